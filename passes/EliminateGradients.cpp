// --kiln-eliminate-gradients: derives the inference function from a traced training step (forward
// + backward + optimizer update, parameters as in-out results) or from a forward traced with
// requires_grad. @forward keeps only its first `kiln.num_outputs` results (the tracer's outputs;
// the in-out parameter and optimizer-state results that follow are dropped), and with
// drop-loss-head a result computed by a loss op is replaced by the loss's prediction operand (the
// logits). Everything only the dropped results used (backward ops, gradients, saved values,
// optimizer arithmetic, the loss) is then dead and erased, as are arguments nothing reads any more
// (targets, optimizer state), with `kiln.arg_names` kept in step. With eval-mode (default on) the
// result runs in inference mode: batch_norm uses its running statistics and dropout is identity.

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Pass/Pass.h"

#include "kiln/ir/KilnDialect.h"
#include "kiln/passes/Passes.h"

namespace kiln::passes {
namespace {

bool is_loss(mlir::Operation* op) {
  return mlir::isa_and_nonnull<ir::CrossEntropyOp, ir::NllLossOp, ir::MseLossOp, ir::SmoothL1LossOp,
                               ir::BinaryCrossEntropyWithLogitsOp>(op);
}

void erase_dead_ops(mlir::Block& block) {
  for (mlir::Operation& op : llvm::make_early_inc_range(llvm::reverse(block))) {
    if (op.use_empty() && mlir::isOpTriviallyDead(&op)) op.erase();
  }
}

struct EliminateGradientsPass
    : mlir::PassWrapper<EliminateGradientsPass, mlir::OperationPass<mlir::ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(EliminateGradientsPass)
  EliminateGradientsPass() = default;
  EliminateGradientsPass(const EliminateGradientsPass& other) : PassWrapper(other) {}
  EliminateGradientsPass(bool drop_loss, bool eval) {
    drop_loss_head = drop_loss;
    eval_mode = eval;
  }

  llvm::StringRef getArgument() const override { return "kiln-eliminate-gradients"; }
  llvm::StringRef getDescription() const override {
    return "Keep only @forward's outputs: drop backward, optimizer and in-out results";
  }

  Option<bool> drop_loss_head{
      *this, "drop-loss-head",
      llvm::cl::desc("Return the loss's prediction input instead of the loss"),
      llvm::cl::init(false)};
  Option<bool> eval_mode{*this, "eval-mode",
                         llvm::cl::desc("batch_norm uses running statistics, dropout is identity"),
                         llvm::cl::init(true)};

  void runOnOperation() override {
    auto fn = getOperation().lookupSymbol<mlir::func::FuncOp>("forward");
    if (!fn) return;
    mlir::Block& block = fn.getBody().front();
    auto ret = mlir::cast<mlir::func::ReturnOp>(block.getTerminator());
    unsigned keep = ret.getNumOperands();
    if (auto n = fn->getAttrOfType<mlir::IntegerAttr>("kiln.num_outputs")) {
      if (n.getInt() < 0 || n.getInt() > static_cast<int64_t>(keep)) {
        fn.emitError("kiln.num_outputs = ") << n.getInt() << " but @forward returns " << keep;
        return signalPassFailure();
      }
      keep = static_cast<unsigned>(n.getInt());
    }
    llvm::SmallVector<mlir::Value> results(ret.getOperands().take_front(keep));
    if (drop_loss_head) {
      for (mlir::Value& r : results) {
        if (is_loss(r.getDefiningOp())) r = r.getDefiningOp()->getOperand(0);
      }
    }
    mlir::OpBuilder b(ret);
    b.create<mlir::func::ReturnOp>(ret.getLoc(), results);
    ret->erase();
    if (eval_mode) {
      fn.walk([&](ir::BatchNormOp bn) {
        if (!mlir::isa<mlir::NoneType>(bn.getRunningMean().getType()) &&
            !mlir::isa<mlir::NoneType>(bn.getRunningVar().getType()))
          bn.setTraining(false);
      });
      fn.walk([](ir::DropoutOp op) {
        op.getResult().replaceAllUsesWith(op.getInput());
        op->erase();
      });
    }
    erase_dead_ops(block);
    // Arguments nothing reads any more (loss targets, optimizer state) leave the signature.
    auto names = fn->getAttrOfType<mlir::ArrayAttr>("kiln.arg_names");
    llvm::BitVector unused(fn.getNumArguments());
    llvm::SmallVector<mlir::Attribute> kept_names;
    for (unsigned i = 0; i < fn.getNumArguments(); ++i) {
      if (fn.getArgument(i).use_empty()) {
        unused.set(i);
      } else if (names && i < names.size()) {
        kept_names.push_back(names[i]);
      }
    }
    fn.eraseArguments(unused);
    llvm::SmallVector<mlir::Type> types;
    for (mlir::Value r : results) types.push_back(r.getType());
    fn.setFunctionType(b.getFunctionType(fn.getArgumentTypes(), types));
    if (names) fn->setAttr("kiln.arg_names", b.getArrayAttr(kept_names));
    fn->setAttr("kiln.num_outputs", b.getI64IntegerAttr(static_cast<int64_t>(results.size())));
  }
};

}  // namespace

std::unique_ptr<mlir::Pass> create_eliminate_gradients_pass(bool drop_loss_head, bool eval_mode) {
  return std::make_unique<EliminateGradientsPass>(drop_loss_head, eval_mode);
}

}  // namespace kiln::passes
