// --kiln-recognize-layer-norm: layer normalization written out in elementwise ops and means, as
// ONNX exports before opset 17 give it (and TensorFlow's converters):
//
//   m = mean(x, trailing dims, keepdim)      d = x - m
//   v = mean(d ^ 2 | d * d, same dims)       n = d / sqrt(v + eps)  |  d * rsqrt(v + eps)  (or
//                                            rsqrt(v + eps) * d)
//   y = n [* w] [+ b]                        (w, b of the normalized shape, either operand order)
//
// becomes one kiln.layer_norm(x, w, b) {normalized_shape, eps}: one pass over each row (a row
// kernel in generated code, the runtime's layer norm in artifacts) where nine kernels each passed
// over the tensor and two materialized it.
//
// Every intermediate must be used only by the chain, float32 and of x's static shape (the means
// of the row shape with kept dims), eps a one-element non-negative constant and the exponent
// exactly 2.

#include "ConstantData.h"
#include "kiln/ir/KilnDialect.h"
#include "kiln/passes/Passes.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Pass/Pass.h"

namespace kiln::passes {
namespace {

std::optional<double> scalar(mlir::Value v) {
  auto values = constant_values(v);
  if (!values || values->size() != 1) return std::nullopt;
  return values->front();
}

bool unit_alpha(mlir::Operation* op) {
  auto alpha = op->getAttrOfType<mlir::FloatAttr>("alpha");
  return !alpha || alpha.getValueAsDouble() == 1.0;
}

// The number of trailing dims `mean` reduces with kept dims over its input of rank `rank`, or 0
// when its dims are not exactly the last k.
int64_t trailing_dims(ir::MeanOp mean, int64_t rank) {
  auto dims = mean->getAttrOfType<mlir::DenseI64ArrayAttr>("dims");
  auto keep = mean->getAttrOfType<mlir::BoolAttr>("keepdim");
  if (!dims || !keep || !keep.getValue() || dims.empty()) return 0;
  llvm::SmallVector<bool, 8> seen(rank, false);
  for (int64_t d : dims.asArrayRef()) {
    if (d < 0) d += rank;
    if (d < 0 || d >= rank || seen[d]) return 0;
    seen[d] = true;
  }
  const int64_t k = dims.size();
  for (int64_t d = rank - k; d < rank; ++d)
    if (!seen[d]) return 0;
  return k;
}

// `v` is the other operand of a two-operand `op` beside `known`: the operand that is not `known`.
mlir::Value other_operand(mlir::Operation* op, mlir::Value known) {
  if (op->getNumOperands() != 2) return {};
  if (op->getOperand(0) == known) return op->getOperand(1);
  if (op->getOperand(1) == known) return op->getOperand(0);
  return {};
}

// An affine parameter of the normalized shape applied to `v` by its only user of type OpT
// (mul for the weight, add for the bias): the parameter, else null.
template <typename OpT>
mlir::Value affine_param(mlir::Value v, llvm::ArrayRef<int64_t> normalized) {
  if (!v.hasOneUse()) return {};
  auto op = mlir::dyn_cast<OpT>(*v.getUsers().begin());
  if (!op || !unit_alpha(op) || op.getResult().getType() != v.getType()) return {};
  mlir::Value p = other_operand(op, v);
  auto type = p ? mlir::dyn_cast<mlir::RankedTensorType>(p.getType()) : nullptr;
  if (!type || !type.getElementType().isF32() || type.getShape() != normalized) return {};
  return p;
}

bool recognize(ir::MeanOp mean, llvm::DenseSet<mlir::Operation*>& erased) {
  // m = mean(x), used only by d = x - m.
  mlir::Value x = mean.getInput();
  auto xt = mlir::dyn_cast<mlir::RankedTensorType>(x.getType());
  if (!xt || !xt.hasStaticShape() || !xt.getElementType().isF32() || xt.getRank() == 0)
    return false;
  const int64_t k = trailing_dims(mean, xt.getRank());
  if (k == 0 || !mean.getResult().hasOneUse()) return false;
  auto sub = mlir::dyn_cast<ir::SubOp>(*mean.getResult().getUsers().begin());
  if (!sub || !unit_alpha(sub) || sub.getLhs() != x || sub.getRhs() != mean.getResult() ||
      sub.getResult().getType() != x.getType())
    return false;
  mlir::Value d = sub.getResult();

  // d's users: the square and the normalization, nothing else.
  mlir::Operation *square = nullptr, *normalize = nullptr;
  for (mlir::Operation* user : d.getUsers()) {
    if (user == square || user == normalize) continue;
    const bool is_square =
        (mlir::isa<ir::PowOp>(user) && user->getOperand(0) == d &&
         scalar(user->getOperand(1)) == 2.0) ||
        (mlir::isa<ir::MulOp>(user) && user->getOperand(0) == d && user->getOperand(1) == d);
    if (is_square && !square) {
      square = user;
    } else if (!normalize && (mlir::isa<ir::MulOp>(user) ||
                              (mlir::isa<ir::DivOp>(user) && user->getOperand(0) == d))) {
      normalize = user;
    } else {
      return false;
    }
  }
  if (!square || !normalize || !unit_alpha(square) || !unit_alpha(normalize) ||
      !square->getResult(0).hasOneUse())
    return false;

  // v = mean(square) over the same dims; e = v + eps; s = sqrt(e) for a division, rsqrt(e) for
  // a product.
  auto var = mlir::dyn_cast<ir::MeanOp>(*square->getResult(0).getUsers().begin());
  if (!var || trailing_dims(var, xt.getRank()) != k ||
      var.getResult().getType() != mean.getResult().getType() || !var.getResult().hasOneUse())
    return false;
  auto add_eps = mlir::dyn_cast<ir::AddOp>(*var.getResult().getUsers().begin());
  if (!add_eps || !unit_alpha(add_eps) || !add_eps.getResult().hasOneUse() ||
      add_eps.getResult().getType() != var.getResult().getType())
    return false;
  std::optional<double> eps = scalar(other_operand(add_eps, var.getResult()));
  if (!eps || !(*eps >= 0.0)) return false;
  mlir::Operation* root = *add_eps.getResult().getUsers().begin();
  const bool division = mlir::isa<ir::DivOp>(normalize);
  if (!(division ? mlir::isa<ir::SqrtOp>(root) : mlir::isa<ir::RsqrtOp>(root)) ||
      !root->getResult(0).hasOneUse() || other_operand(normalize, d) != root->getResult(0) ||
      normalize->getResult(0).getType() != x.getType())
    return false;

  llvm::SmallVector<mlir::Operation*, 10> chain = {normalize, root, add_eps, var,
                                                   square,    sub,  mean};
  const llvm::ArrayRef<int64_t> normalized = xt.getShape().take_back(k);
  mlir::Value y = normalize->getResult(0);
  mlir::Value weight = affine_param<ir::MulOp>(y, normalized), bias;
  if (weight) {
    chain.insert(chain.begin(), *y.getUsers().begin());
    y = chain.front()->getResult(0);
  }
  if ((bias = affine_param<ir::AddOp>(y, normalized))) {
    chain.insert(chain.begin(), *y.getUsers().begin());
    y = chain.front()->getResult(0);
  }

  // The last op of the chain is after every operand (x, w, b) it reads.
  mlir::OpBuilder b(chain.front());
  const mlir::Location loc = chain.front()->getLoc();
  mlir::OperationState state(loc, "kiln.layer_norm");
  state.addOperands({x, weight ? weight : make_none(b, loc), bias ? bias : make_none(b, loc)});
  state.addAttribute("normalized_shape", b.getDenseI64ArrayAttr(normalized));
  state.addAttribute("eps", b.getF64FloatAttr(*eps));
  state.addTypes(x.getType());
  mlir::Operation* layer_norm = b.create(state);
  y.replaceAllUsesWith(layer_norm->getResult(0));
  // Each constant once: one constant may feed two ops of the chain (eps and the exponent 2).
  llvm::SetVector<mlir::Operation*> constants;
  for (mlir::Operation* op : chain)
    for (mlir::Value operand : op->getOperands())
      if (is_constant(operand)) constants.insert(operand.getDefiningOp());
  erased.insert(chain.begin(), chain.end());
  // From the root down: each op is used only by ops erased before it.
  for (mlir::Operation* op : chain) op->erase();
  for (mlir::Operation* c : constants)
    if (c->use_empty()) c->erase();
  return true;
}

struct RecognizeLayerNormPass
    : mlir::PassWrapper<RecognizeLayerNormPass, mlir::OperationPass<mlir::func::FuncOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(RecognizeLayerNormPass)
  llvm::StringRef getArgument() const override { return "kiln-recognize-layer-norm"; }
  llvm::StringRef getDescription() const override {
    return "(x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) [* w] [+ b] over trailing dims "
           "becomes kiln.layer_norm";
  }
  void runOnOperation() override {
    llvm::SmallVector<ir::MeanOp> means;
    getOperation().walk([&](ir::MeanOp op) { means.push_back(op); });
    // A recognized chain erases the variance's mean too, which comes later in the list.
    llvm::DenseSet<mlir::Operation*> erased;
    for (ir::MeanOp op : means)
      if (!erased.contains(op.getOperation())) recognize(op, erased);
  }
};

}  // namespace

std::unique_ptr<mlir::Pass> create_recognize_layer_norm_pass() {
  return std::make_unique<RecognizeLayerNormPass>();
}

}  // namespace kiln::passes
