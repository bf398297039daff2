// Canonicalization patterns of --kiln-cleanup: ops that provably return their input unchanged are
// replaced by it, chains of shape ops collapse into one, and guards of constants that hold go.
// Every rewrite requires the forwarded value to have exactly the op's result type, so no implicit
// broadcast or dtype change is lost.

#include <cmath>

#include "ConstantData.h"
#include "PatternSets.h"
#include "kiln/ir/KilnDialect.h"

namespace kiln::passes {
namespace {

bool all_equal(mlir::Value v, double x) {
  // Only small constants are scanned: a weight-sized one is never all ones or zeros in practice.
  auto type = mlir::dyn_cast<mlir::RankedTensorType>(v.getType());
  if (!type || !type.hasStaticShape() || type.getNumElements() > kFoldLimit) return false;
  auto values = constant_values(v);
  if (!values || values->empty()) return false;
  for (double e : *values) {
    if (e != x) return false;
  }
  return true;
}

double float_attr(mlir::Operation* op, llvm::StringRef name, double fallback) {
  auto a = op->getAttrOfType<mlir::FloatAttr>(name);
  return a ? a.getValueAsDouble() : fallback;
}

int64_t int_attr(mlir::Operation* op, llvm::StringRef name) {
  auto a = op->getAttrOfType<mlir::IntegerAttr>(name);
  return a ? a.getInt() : 0;
}

// The value an op forwards unchanged, or null. Only candidates with the op's exact result type.
mlir::Value forwarded_value(mlir::Operation* op) {
  if (op->getNumResults() != 1 || op->getNumOperands() == 0) return {};
  mlir::Type type = op->getResult(0).getType();
  auto same = [&](mlir::Value v) { return v.getType() == type ? v : mlir::Value(); };
  mlir::Value x = op->getOperand(0);
  if (mlir::isa<ir::MulOp>(op)) {
    if (all_equal(op->getOperand(1), 1.0) && same(x)) return x;
    if (all_equal(x, 1.0)) return same(op->getOperand(1));
    return {};
  }
  if (mlir::isa<ir::AddOp>(op)) {
    if (all_equal(op->getOperand(1), 0.0) && same(x)) return x;
    if (all_equal(x, 0.0) && float_attr(op, "alpha", 1.0) == 1.0) return same(op->getOperand(1));
    return {};
  }
  if (mlir::isa<ir::SubOp>(op)) return all_equal(op->getOperand(1), 0.0) ? same(x) : mlir::Value();
  if (mlir::isa<ir::DivOp>(op) || mlir::isa<ir::PowOp>(op))
    return all_equal(op->getOperand(1), 1.0) ? same(x) : mlir::Value();
  if (mlir::isa<ir::CloneOp>(op)) {
    // A returned clone is a fresh tensor the caller may write; inside the graph it is a no-op.
    const bool returned = llvm::any_of(op->getUsers(), [](mlir::Operation* u) {
      return u->hasTrait<mlir::OpTrait::IsTerminator>();
    });
    return returned ? mlir::Value() : same(x);
  }
  if (mlir::isa<ir::ReshapeOp>(op) || mlir::isa<ir::ViewOp>(op) || mlir::isa<ir::ExpandOp>(op) ||
      mlir::isa<ir::SliceOp>(op) || mlir::isa<ir::ToOp>(op)) {
    // A slice whose result shape equals its input's takes every element in order.
    return same(x);
  }
  if (mlir::isa<ir::TransposeOp>(op)) {
    auto rank = mlir::cast<mlir::RankedTensorType>(x.getType()).getRank();
    if (rank == 0) return same(x);
    const int64_t a = (int_attr(op, "dim0") + rank) % rank,
                  b = (int_attr(op, "dim1") + rank) % rank;
    return a == b ? same(x) : mlir::Value();
  }
  if (mlir::isa<ir::PermuteOp>(op)) {
    auto dims = op->getAttrOfType<mlir::DenseI64ArrayAttr>("dims");
    if (!dims) return {};
    const int64_t rank = static_cast<int64_t>(dims.size());
    for (int64_t i = 0; i < rank; ++i) {
      if (dims[i] != i && dims[i] != i - rank) return {};
    }
    return same(x);
  }
  if (mlir::isa<ir::ClampOp>(op)) {
    const bool unbounded = float_attr(op, "min", -INFINITY) == -INFINITY &&
                           float_attr(op, "max", INFINITY) == INFINITY;
    return unbounded ? same(x) : mlir::Value();
  }
  if (mlir::isa<ir::DropoutOp>(op))
    return float_attr(op, "p", 1.0) == 0.0 ? same(x) : mlir::Value();
  if (mlir::isa<ir::CopyOp>(op)) return same(op->getOperand(1));
  return {};
}

struct RemoveNoOp : mlir::RewritePattern {
  explicit RemoveNoOp(mlir::MLIRContext* ctx) : RewritePattern(MatchAnyOpTypeTag(), 1, ctx) {}
  mlir::LogicalResult matchAndRewrite(mlir::Operation* op,
                                      mlir::PatternRewriter& rewriter) const override {
    if (!mlir::isa_and_nonnull<ir::KilnDialect>(op->getDialect())) return mlir::failure();
    mlir::Value v = forwarded_value(op);
    if (!v) return mlir::failure();
    rewriter.replaceOp(op, v);
    return mlir::success();
  }
};

// transpose(transpose(x, a, b), a, b) -> x
struct DoubleTranspose : mlir::OpRewritePattern<ir::TransposeOp> {
  using OpRewritePattern::OpRewritePattern;
  mlir::LogicalResult matchAndRewrite(ir::TransposeOp op,
                                      mlir::PatternRewriter& rewriter) const override {
    auto inner = op.getInput().getDefiningOp<ir::TransposeOp>();
    if (!inner || inner.getInput().getType() != op.getType()) return mlir::failure();
    const int64_t rank = op.getType().getRank();
    auto norm = [rank](int64_t d) { return (d % rank + rank) % rank; };
    const int64_t a = norm(op.getDim0()), b = norm(op.getDim1());
    const int64_t c = norm(inner.getDim0()), d = norm(inner.getDim1());
    if (!((a == c && b == d) || (a == d && b == c))) return mlir::failure();
    rewriter.replaceOp(op, inner.getInput());
    return mlir::success();
  }
};

// permute(permute(x, p), q) -> permute(x, p o q); identity compositions vanish via RemoveNoOp.
struct PermuteOfPermute : mlir::OpRewritePattern<ir::PermuteOp> {
  using OpRewritePattern::OpRewritePattern;
  mlir::LogicalResult matchAndRewrite(ir::PermuteOp op,
                                      mlir::PatternRewriter& rewriter) const override {
    auto inner = op.getInput().getDefiningOp<ir::PermuteOp>();
    if (!inner) return mlir::failure();
    llvm::ArrayRef<int64_t> p = inner.getDims(), q = op.getDims();
    const int64_t rank = static_cast<int64_t>(p.size());
    if (static_cast<int64_t>(q.size()) != rank) return mlir::failure();
    llvm::SmallVector<int64_t> composed(rank);
    for (int64_t i = 0; i < rank; ++i) {
      const int64_t qi = (q[i] % rank + rank) % rank;
      composed[i] = (p[qi] % rank + rank) % rank;
    }
    rewriter.modifyOpInPlace(op, [&] {
      op->setOperand(0, inner.getInput());
      op.setDims(composed);
    });
    return mlir::success();
  }
};

// reshape(reshape(x)) -> reshape(x) (view is reshape in this functional IR).
struct ReshapeOfReshape : mlir::RewritePattern {
  explicit ReshapeOfReshape(mlir::MLIRContext* ctx) : RewritePattern(MatchAnyOpTypeTag(), 1, ctx) {}
  static bool is_reshape(mlir::Operation* op) {
    return mlir::isa_and_nonnull<ir::ReshapeOp, ir::ViewOp>(op);
  }
  mlir::LogicalResult matchAndRewrite(mlir::Operation* op,
                                      mlir::PatternRewriter& rewriter) const override {
    if (!is_reshape(op) || !is_reshape(op->getOperand(0).getDefiningOp())) return mlir::failure();
    mlir::Value source = op->getOperand(0).getDefiningOp()->getOperand(0);
    rewriter.modifyOpInPlace(op, [&] { op->setOperand(0, source); });
    return mlir::success();
  }
};

// A transpose or permute that moves only size-1 dims past the others keeps every element where it
// was (the non-unit dims stay in order): a reshape, which is a view, where the transpose copied
// (a batch-first transformer traced seq-first: [1, T, D] <-> [T, 1, D] around its attention).
struct UnitDimPermuteToReshape : mlir::RewritePattern {
  explicit UnitDimPermuteToReshape(mlir::MLIRContext* ctx)
      : RewritePattern(MatchAnyOpTypeTag(), 1, ctx) {}
  // result dim i = input dim perm[i], or empty when op is neither.
  static llvm::SmallVector<int64_t> permutation(mlir::Operation* op, int64_t rank) {
    auto norm = [rank](int64_t d) { return (d % rank + rank) % rank; };
    llvm::SmallVector<int64_t> perm;
    if (auto t = mlir::dyn_cast<ir::TransposeOp>(op)) {
      for (int64_t i = 0; i < rank; ++i) perm.push_back(i);
      std::swap(perm[norm(t.getDim0())], perm[norm(t.getDim1())]);
    } else if (auto p = mlir::dyn_cast<ir::PermuteOp>(op)) {
      if (static_cast<int64_t>(p.getDims().size()) != rank) return {};
      for (int64_t d : p.getDims()) perm.push_back(norm(d));
    }
    return perm;
  }
  mlir::LogicalResult matchAndRewrite(mlir::Operation* op,
                                      mlir::PatternRewriter& rewriter) const override {
    if (!mlir::isa<ir::TransposeOp, ir::PermuteOp>(op)) return mlir::failure();
    auto in = mlir::dyn_cast<mlir::RankedTensorType>(op->getOperand(0).getType());
    auto out = mlir::dyn_cast<mlir::RankedTensorType>(op->getResult(0).getType());
    if (!in || !out || !in.hasStaticShape() || !out.hasStaticShape() || in.getRank() == 0)
      return mlir::failure();
    const llvm::SmallVector<int64_t> perm = permutation(op, in.getRank());
    if (perm.empty()) return mlir::failure();
    int64_t last = -1;
    bool moves = false;
    for (size_t i = 0; i < perm.size(); ++i) {
      moves |= perm[i] != static_cast<int64_t>(i);
      if (in.getDimSize(perm[i]) == 1) continue;
      if (perm[i] < last) return mlir::failure();  // two non-unit dims swap: a real transpose
      last = perm[i];
    }
    if (!moves) return mlir::failure();  // the identity: RemoveNoOp's
    rewriter.replaceOpWithNewOp<ir::ReshapeOp>(op, out, op->getOperand(0), out.getShape());
    return mlir::success();
  }
};

}  // namespace

// A guard of a value that folded to a constant holds or fails at compile time: one that holds
// checks nothing at run time (the value came from the model's constants, as the shape arithmetic
// an imported ONNX model reads back). One that fails stays, to fail at run time as traced.
struct GuardOfConstant : mlir::OpRewritePattern<ir::GuardOp> {
  using OpRewritePattern::OpRewritePattern;
  mlir::LogicalResult matchAndRewrite(ir::GuardOp op,
                                      mlir::PatternRewriter& rewriter) const override {
    const std::optional<std::vector<double>> v = constant_values(op.getInput());
    const double want = op.getValue().convertToDouble();
    if (!v || v->size() != 1 || !((*v)[0] == want || (std::isnan((*v)[0]) && std::isnan(want))))
      return mlir::failure();
    rewriter.eraseOp(op);
    return mlir::success();
  }
};

void populate_cleanup_patterns(mlir::RewritePatternSet& patterns) {
  mlir::MLIRContext* ctx = patterns.getContext();
  patterns.add<RemoveNoOp, DoubleTranspose, PermuteOfPermute, ReshapeOfReshape, GuardOfConstant,
               UnitDimPermuteToReshape>(ctx);
}

}  // namespace kiln::passes
