// --kiln-matmul-to-linear: a kiln.matmul whose right operand is a constant float32 matrix W
// [K, N] (an ONNX MatMul against an initializer, `x.matmul(W)` with W frozen) becomes
// kiln.linear(x, Wᵀ) with the transposed constant: what follows it (a bias add, a residual, an
// activation) then fuses into its GEMM (--kiln-fuse-epilogues), and the weight is prepared like
// any linear layer's. The two compute the same [..., N] for x [..., K] of any rank >= 1.
//
// Left alone: a left operand that is constant too (constant folding's), splat or non-float32
// weights, and a weight another op also reads (the transposed copy would duplicate it).

#include "ConstantData.h"
#include "kiln/ir/KilnDialect.h"
#include "kiln/passes/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Pass/Pass.h"

namespace kiln::passes {
namespace {

bool rewrite(ir::MatmulOp mm) {
  mlir::Value x = mm.getLhs(), w = mm.getRhs();
  auto wt = mlir::dyn_cast<mlir::RankedTensorType>(w.getType());
  auto xt = mlir::dyn_cast<mlir::RankedTensorType>(x.getType());
  if (!wt || !xt || wt.getRank() != 2 || xt.getRank() < 1 || !wt.hasStaticShape() ||
      !wt.getElementType().isF32() || !xt.getElementType().isF32())
    return false;
  if (!is_constant(w) || is_constant(x) || !w.hasOneUse()) return false;
  const int64_t K = wt.getDimSize(0), N = wt.getDimSize(1);
  std::optional<std::vector<double>> values = constant_values(w);
  if (!values || static_cast<int64_t>(values->size()) != K * N || K * N <= 1) return false;
  std::vector<double> transposed(values->size());
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) transposed[n * K + k] = (*values)[k * N + n];

  mlir::OpBuilder b(mm);
  auto type = mlir::RankedTensorType::get({N, K}, wt.getElementType());
  mlir::Value weight = make_constant(b, w.getLoc(), type, transposed, "kiln_matmul_weight_t");
  mlir::OperationState state(mm.getLoc(), "kiln.linear");
  state.addOperands({x, weight, make_none(b, mm.getLoc())});
  state.addTypes(mm.getResult().getType());
  mlir::Operation* linear = b.create(state);
  mm.getResult().replaceAllUsesWith(linear->getResult(0));
  mlir::Operation* old_weight = w.getDefiningOp();
  mm.erase();
  if (old_weight->use_empty()) old_weight->erase();
  return true;
}

struct MatmulToLinearPass
    : mlir::PassWrapper<MatmulToLinearPass, mlir::OperationPass<mlir::func::FuncOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(MatmulToLinearPass)
  llvm::StringRef getArgument() const override { return "kiln-matmul-to-linear"; }
  llvm::StringRef getDescription() const override {
    return "A matmul by a constant float32 matrix becomes kiln.linear with the transposed constant";
  }
  void runOnOperation() override {
    llvm::SmallVector<ir::MatmulOp> matmuls;
    getOperation().walk([&](ir::MatmulOp op) { matmuls.push_back(op); });
    for (ir::MatmulOp op : matmuls) rewrite(op);
  }
};

}  // namespace

std::unique_ptr<mlir::Pass> create_matmul_to_linear_pass() {
  return std::make_unique<MatmulToLinearPass>();
}

}  // namespace kiln::passes
