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

// A kiln.guard protects what the trace recorded after it. When results were dropped (a training
// step's inference function), guards after the last op the kept results need are taken to protect
// only dropped work (the step logging loss.item()): they go, so they keep neither the loss nor
// its targets.
void erase_guards_after_kept_work(mlir::Block& block) {
  llvm::DenseSet<mlir::Operation*> needed;
  llvm::SmallVector<mlir::Operation*> work;
  auto need = [&](mlir::Value v) {
    mlir::Operation* def = v.getDefiningOp();
    if (!def) return;
    mlir::Operation* top = block.findAncestorOpInBlock(*def);
    if (top && needed.insert(top).second) work.push_back(top);
  };
  for (mlir::Value v : block.getTerminator()->getOperands()) need(v);
  while (!work.empty()) {
    mlir::Operation* op = work.pop_back_val();
    op->walk([&](mlir::Operation* nested) {
      for (mlir::Value v : nested->getOperands()) need(v);
    });
  }
  mlir::Operation* last = nullptr;
  for (mlir::Operation& op : block)
    if (needed.count(&op)) last = &op;
  for (mlir::Operation& op : llvm::make_early_inc_range(llvm::reverse(block))) {
    if (&op == last) break;
    if (mlir::isa<ir::GuardOp>(op)) op.erase();
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
  Option<int> num_outputs{*this, "num-outputs",
                          llvm::cl::desc("Results to keep (default: func attr kiln.num_outputs, "
                                         "else all)"),
                          llvm::cl::init(-1)};
  Option<bool> eval_mode{*this, "eval-mode",
                         llvm::cl::desc("batch_norm uses running statistics, dropout is identity"),
                         llvm::cl::init(true)};

  void runOnOperation() override {
    auto fn = getOperation().lookupSymbol<mlir::func::FuncOp>("forward");
    if (!fn) return;
    mlir::Block& block = fn.getBody().front();
    auto ret = mlir::cast<mlir::func::ReturnOp>(block.getTerminator());
    unsigned keep = ret.getNumOperands();
    const unsigned total = keep;
    int64_t wanted = num_outputs;
    if (wanted < 0) {
      auto n = fn->getAttrOfType<mlir::IntegerAttr>("kiln.num_outputs");
      wanted = n ? n.getInt() : static_cast<int64_t>(keep);
    }
    if (wanted < 0 || wanted > static_cast<int64_t>(keep)) {
      fn.emitError("kiln-eliminate-gradients: keeping ")
          << wanted << " results, but @forward returns " << keep;
      return signalPassFailure();
    }
    keep = static_cast<unsigned>(wanted);
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
    // Only where work was dropped: a function that keeps all its results (a plain inference
    // trace) keeps every guard, since the host code may have chosen which values to return by
    // what it read (`r > 0 ? relu(x) : x * r` returns a value made before the read).
    if (keep < total || drop_loss_head) erase_guards_after_kept_work(block);
    erase_dead_ops(block);
    // Arguments nothing reads any more (loss targets, optimizer state) leave the signature. The
    // model's inputs (`kiln.num_inputs`, as jit::save marks them) stay unless the loss head
    // goes: a caller passes what it traced with, read or not.
    auto names = fn->getAttrOfType<mlir::ArrayAttr>("kiln.arg_names");
    unsigned keep_inputs = 0;
    if (auto a = fn->getAttrOfType<mlir::IntegerAttr>("kiln.num_inputs"); a && !drop_loss_head)
      keep_inputs = static_cast<unsigned>(a.getInt());
    llvm::BitVector unused(fn.getNumArguments());
    llvm::SmallVector<mlir::Attribute> kept_names;
    for (unsigned i = 0; i < fn.getNumArguments(); ++i) {
      if (i >= keep_inputs && fn.getArgument(i).use_empty()) {
        unused.set(i);
      } else if (names && i < names.size()) {
        kept_names.push_back(names[i]);
      }
    }
    if (auto a = fn->getAttrOfType<mlir::IntegerAttr>("kiln.num_inputs")) {
      int64_t inputs = a.getInt();  // the inputs that remain
      for (unsigned i = 0; i < fn.getNumArguments() && i < a.getInt(); ++i) inputs -= unused[i];
      fn->setAttr("kiln.num_inputs", mlir::Builder(fn.getContext()).getI64IntegerAttr(inputs));
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
