// Constant folding of small constant subgraphs (part of --kiln-cleanup): an elementwise, compare
// or reshape op whose operands are all kiln.constant with at most kFoldLimit elements is evaluated
// here, in double precision, and replaced by a constant of its result type. Weights are larger
// than the limit and are folded only by the dedicated passes (batch-norm folding).

#include <cmath>
#include <functional>

#include "ConstantData.h"
#include "PatternSets.h"
#include "kiln/ir/KilnDialect.h"

namespace kiln::passes {
namespace {

using Unary = std::function<double(double)>;
using Binary = std::function<double(double, double)>;

double attr_f(mlir::Operation* op, llvm::StringRef name, double fallback) {
  auto a = op->getAttrOfType<mlir::FloatAttr>(name);
  return a ? a.getValueAsDouble() : fallback;
}

std::optional<Unary> unary_fn(mlir::Operation* op) {
  if (mlir::isa<ir::NegOp>(op)) return [](double x) { return -x; };
  if (mlir::isa<ir::AbsOp>(op)) return [](double x) { return std::fabs(x); };
  if (mlir::isa<ir::ExpOp>(op)) return [](double x) { return std::exp(x); };
  if (mlir::isa<ir::LogOp>(op)) return [](double x) { return std::log(x); };
  if (mlir::isa<ir::Log1pOp>(op)) return [](double x) { return std::log1p(x); };
  if (mlir::isa<ir::SqrtOp>(op)) return [](double x) { return std::sqrt(x); };
  if (mlir::isa<ir::RsqrtOp>(op)) return [](double x) { return 1.0 / std::sqrt(x); };
  if (mlir::isa<ir::ReciprocalOp>(op)) return [](double x) { return 1.0 / x; };
  if (mlir::isa<ir::SinOp>(op)) return [](double x) { return std::sin(x); };
  if (mlir::isa<ir::CosOp>(op)) return [](double x) { return std::cos(x); };
  if (mlir::isa<ir::TanhOp>(op)) return [](double x) { return std::tanh(x); };
  if (mlir::isa<ir::SigmoidOp>(op)) return [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  if (mlir::isa<ir::ReluOp>(op)) return [](double x) { return x > 0 ? x : 0.0; };
  if (mlir::isa<ir::SiluOp>(op)) return [](double x) { return x / (1.0 + std::exp(-x)); };
  if (mlir::isa<ir::ErfOp>(op)) return [](double x) { return std::erf(x); };
  if (mlir::isa<ir::FloorOp>(op)) return [](double x) { return std::floor(x); };
  if (mlir::isa<ir::CeilOp>(op)) return [](double x) { return std::ceil(x); };
  if (mlir::isa<ir::RoundOp>(op)) return [](double x) { return std::nearbyint(x); };
  if (mlir::isa<ir::SignOp>(op))
    return [](double x) { return static_cast<double>((x > 0) - (x < 0)); };
  if (mlir::isa<ir::CloneOp>(op) || mlir::isa<ir::ReshapeOp>(op) || mlir::isa<ir::ViewOp>(op) ||
      mlir::isa<ir::ToOp>(op))
    return [](double x) { return x; };
  if (mlir::isa<ir::ClampOp>(op)) {
    const double lo = attr_f(op, "min", -INFINITY), hi = attr_f(op, "max", INFINITY);
    return [lo, hi](double x) { return std::fmin(std::fmax(x, lo), hi); };
  }
  if (mlir::isa<ir::LeakyReluOp>(op)) {
    const double s = attr_f(op, "negative_slope", 0.01);
    return [s](double x) { return x > 0 ? x : s * x; };
  }
  return std::nullopt;
}

std::optional<Binary> binary_fn(mlir::Operation* op) {
  const double alpha = attr_f(op, "alpha", 1.0);
  if (mlir::isa<ir::AddOp>(op)) return [alpha](double a, double b) { return a + alpha * b; };
  if (mlir::isa<ir::SubOp>(op)) return [alpha](double a, double b) { return a - alpha * b; };
  if (mlir::isa<ir::MulOp>(op)) return [](double a, double b) { return a * b; };
  if (mlir::isa<ir::DivOp>(op)) return [](double a, double b) { return a / b; };
  if (mlir::isa<ir::PowOp>(op)) return [](double a, double b) { return std::pow(a, b); };
  if (mlir::isa<ir::MaximumOp>(op)) return [](double a, double b) { return std::fmax(a, b); };
  if (mlir::isa<ir::MinimumOp>(op)) return [](double a, double b) { return std::fmin(a, b); };
  if (mlir::isa<ir::EqOp>(op)) return [](double a, double b) { return double(a == b); };
  if (mlir::isa<ir::NeOp>(op)) return [](double a, double b) { return double(a != b); };
  if (mlir::isa<ir::LtOp>(op)) return [](double a, double b) { return double(a < b); };
  if (mlir::isa<ir::LeOp>(op)) return [](double a, double b) { return double(a <= b); };
  if (mlir::isa<ir::GtOp>(op)) return [](double a, double b) { return double(a > b); };
  if (mlir::isa<ir::GeOp>(op)) return [](double a, double b) { return double(a >= b); };
  return std::nullopt;
}

// Flat index into an operand of shape `in` (right-aligned, size-1 dims broadcast) for the
// multi-index `idx` of the result.
int64_t broadcast_index(llvm::ArrayRef<int64_t> in, llvm::ArrayRef<int64_t> idx) {
  int64_t flat = 0;
  const size_t offset = idx.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d) flat = flat * in[d] + (in[d] == 1 ? 0 : idx[d + offset]);
  return flat;
}

// Rounds a computed value the way the result's element type stores it (integers truncate, as a
// C cast; booleans are 0/1).
double store_as(mlir::Type et, double x) {
  if (et.isInteger(1)) return x != 0 ? 1.0 : 0.0;
  if (mlir::isa<mlir::IntegerType>(et)) return std::trunc(x);
  return x;
}

struct FoldConstantOp : mlir::RewritePattern {
  explicit FoldConstantOp(mlir::MLIRContext* ctx) : RewritePattern(MatchAnyOpTypeTag(), 1, ctx) {}

  mlir::LogicalResult matchAndRewrite(mlir::Operation* op,
                                      mlir::PatternRewriter& rewriter) const override {
    if (!mlir::isa_and_nonnull<ir::KilnDialect>(op->getDialect()) || op->getNumResults() != 1 ||
        op->getNumOperands() == 0 || mlir::isa<ir::ConstantOp>(op))
      return mlir::failure();
    auto type = mlir::dyn_cast<mlir::RankedTensorType>(op->getResult(0).getType());
    if (!type || !type.hasStaticShape() || type.getNumElements() > kFoldLimit)
      return mlir::failure();
    std::vector<std::vector<double>> inputs;
    for (mlir::Value v : op->getOperands()) {
      auto t = mlir::dyn_cast<mlir::RankedTensorType>(v.getType());
      if (!t || !t.hasStaticShape() || t.getNumElements() > kFoldLimit) return mlir::failure();
      auto values = constant_values(v);
      if (!values) return mlir::failure();
      inputs.push_back(std::move(*values));
    }
    const int64_t n = type.getNumElements();
    std::vector<double> out(n);
    mlir::Type et = type.getElementType();
    if (op->getNumOperands() == 1) {
      auto fn = unary_fn(op);
      if (!fn || static_cast<int64_t>(inputs[0].size()) != n) return mlir::failure();
      for (int64_t i = 0; i < n; ++i) out[i] = store_as(et, (*fn)(inputs[0][i]));
    } else if (op->getNumOperands() == 2) {
      auto fn = binary_fn(op);
      if (!fn) return mlir::failure();
      auto a = mlir::cast<mlir::RankedTensorType>(op->getOperand(0).getType()).getShape();
      auto b = mlir::cast<mlir::RankedTensorType>(op->getOperand(1).getType()).getShape();
      llvm::ArrayRef<int64_t> shape = type.getShape();
      llvm::SmallVector<int64_t> idx(shape.size(), 0);
      for (int64_t i = 0; i < n; ++i) {
        out[i] = store_as(
            et, (*fn)(inputs[0][broadcast_index(a, idx)], inputs[1][broadcast_index(b, idx)]));
        for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
          if (++idx[d] < shape[d]) break;
          idx[d] = 0;
        }
      }
    } else {
      return mlir::failure();
    }
    rewriter.replaceOp(op, make_constant(rewriter, op->getLoc(), type, out, "folded"));
    return mlir::success();
  }
};

}  // namespace

void populate_constant_fold_patterns(mlir::RewritePatternSet& patterns) {
  patterns.add<FoldConstantOp>(patterns.getContext());
}

}  // namespace kiln::passes
