// --kiln-fold-batch-norm: an eval-mode batch_norm that normalizes the output of a conv2d (or a
// linear on [N, C]) with constant weights and constant running statistics folds into that op:
//   s = gamma / sqrt(running_var + eps)
//   W'[c, ...] = W[c, ...] * s[c]        b'[c] = (b[c] - running_mean[c]) * s[c] + beta[c]
// (gamma = 1, beta = 0, b = 0 when absent). The folded weight and bias are new constants owned by
// the module (a heap resource blob); the frozen originals are untouched, because other ops or the
// caller may still read them. Runs after freezing; batch_norm in training mode never folds.

#include <cmath>

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Pass/Pass.h"

#include "ConstantData.h"
#include "kiln/ir/KilnDialect.h"
#include "kiln/passes/Passes.h"

namespace kiln::passes {
namespace {

// Values of an optional per-channel operand, or `fill` repeated when it is kiln.none.
std::optional<std::vector<double>> per_channel(mlir::Value v, int64_t channels, double fill) {
  if (mlir::isa<mlir::NoneType>(v.getType())) return std::vector<double>(channels, fill);
  auto values = constant_values(v);
  if (!values || static_cast<int64_t>(values->size()) != channels) return std::nullopt;
  return values;
}

bool fold(ir::BatchNormOp bn) {
  if (bn.getTraining()) return false;
  mlir::Operation* producer = bn.getInput().getDefiningOp();
  if (!producer || !producer->hasOneUse()) return false;
  const bool is_conv = mlir::isa<ir::Conv2dOp>(producer);
  const bool is_linear =
      mlir::isa<ir::LinearOp>(producer) && bn.getInput().getType().getRank() == 2;
  if (!is_conv && !is_linear) return false;
  auto weight_type = mlir::cast<mlir::RankedTensorType>(producer->getOperand(1).getType());
  if (!weight_type.getElementType().isF32() && !weight_type.getElementType().isF64()) return false;
  const int64_t channels = weight_type.getDimSize(0);
  auto weight = constant_values(producer->getOperand(1));
  auto bias = per_channel(producer->getOperand(2), channels, 0.0);
  auto mean = per_channel(bn.getRunningMean(), channels, NAN);
  auto var = per_channel(bn.getRunningVar(), channels, NAN);
  auto gamma = per_channel(bn.getWeight(), channels, 1.0);
  auto beta = per_channel(bn.getBias(), channels, 0.0);
  // Running statistics must be real constants (kiln.none means batch statistics: not foldable).
  if (!weight || !bias || !gamma || !beta || !mean || !var ||
      mlir::isa<mlir::NoneType>(bn.getRunningMean().getType()) ||
      mlir::isa<mlir::NoneType>(bn.getRunningVar().getType()))
    return false;
  const double eps = bn.getEps().convertToDouble();
  const int64_t per_out = weight_type.getNumElements() / channels;
  std::vector<double> new_weight(weight->size()), new_bias(channels);
  for (int64_t c = 0; c < channels; ++c) {
    const double s = (*gamma)[c] / std::sqrt((*var)[c] + eps);
    for (int64_t k = 0; k < per_out; ++k)
      new_weight[c * per_out + k] = (*weight)[c * per_out + k] * s;
    new_bias[c] = ((*bias)[c] - (*mean)[c]) * s + (*beta)[c];
  }
  mlir::OpBuilder b(producer);
  auto bias_type = mlir::RankedTensorType::get({channels}, weight_type.getElementType());
  mlir::Value w = make_constant(b, producer->getLoc(), weight_type, new_weight, "bn_folded_weight");
  mlir::Value bb = make_constant(b, producer->getLoc(), bias_type, new_bias, "bn_folded_bias");
  mlir::Operation* folded = b.clone(*producer);
  folded->setOperand(1, w);
  folded->setOperand(2, bb);
  bn.getResult().replaceAllUsesWith(folded->getResult(0));
  bn->erase();
  producer->erase();
  return true;
}

struct FoldBatchNormPass
    : mlir::PassWrapper<FoldBatchNormPass, mlir::OperationPass<mlir::func::FuncOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(FoldBatchNormPass)
  llvm::StringRef getArgument() const override { return "kiln-fold-batch-norm"; }
  llvm::StringRef getDescription() const override {
    return "Fold eval-mode batch_norm into the preceding conv2d/linear's constant weight and bias";
  }
  void runOnOperation() override {
    llvm::SmallVector<ir::BatchNormOp> bns;
    getOperation().walk([&](ir::BatchNormOp op) { bns.push_back(op); });
    for (ir::BatchNormOp op : bns) fold(op);
  }
};

}  // namespace

std::unique_ptr<mlir::Pass> create_fold_batch_norm_pass() {
  return std::make_unique<FoldBatchNormPass>();
}

}  // namespace kiln::passes
