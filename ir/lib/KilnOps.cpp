#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"

#include "kiln/ir/KilnDialect.h"

using namespace mlir;

namespace kiln::ir {
namespace {

// Promotion of element types, as the runtime's promote_types: floats beat integers, wider wins.
Type promote(Type a, Type b) {
  if (a == b) return a;
  const bool fa = isa<FloatType>(a), fb = isa<FloatType>(b);
  if (fa != fb) return fa ? a : b;
  const unsigned wa = a.getIntOrFloatBitWidth(), wb = b.getIntOrFloatBitWidth();
  if (fa && wa == wb) return Float32Type::get(a.getContext());  // f16 with bf16
  return wa >= wb ? a : b;
}

// NumPy broadcasting of two static-or-dynamic shapes.
LogicalResult broadcast(ArrayRef<int64_t> a, ArrayRef<int64_t> b, SmallVectorImpl<int64_t>& out,
                        std::optional<Location> loc, StringRef op) {
  const size_t r = std::max(a.size(), b.size());
  out.assign(r, 1);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da == db || db == 1) {
      out[i] = da;
    } else if (da == 1) {
      out[i] = db;
    } else if (ShapedType::isDynamic(da) || ShapedType::isDynamic(db)) {
      out[i] = ShapedType::kDynamic;
    } else {
      return emitOptionalError(loc, op, ": shapes do not broadcast at dim ", i, " (", da, " vs ",
                               db, ")");
    }
  }
  return success();
}

LogicalResult infer_binary(ValueRange operands, std::optional<Location> loc, StringRef op,
                           SmallVectorImpl<Type>& inferred) {
  auto lhs = cast<RankedTensorType>(operands[0].getType());
  auto rhs = cast<RankedTensorType>(operands[1].getType());
  SmallVector<int64_t> shape;
  if (failed(broadcast(lhs.getShape(), rhs.getShape(), shape, loc, op))) return failure();
  inferred.push_back(
      RankedTensorType::get(shape, promote(lhs.getElementType(), rhs.getElementType())));
  return success();
}

}  // namespace

#define KILN_BINARY_INFER(Op, name)                                                        \
  LogicalResult Op::inferReturnTypes(MLIRContext*, std::optional<Location> loc,            \
                                     Op::Adaptor adaptor, SmallVectorImpl<Type>& inferred) { \
    return infer_binary(adaptor.getOperands(), loc, name, inferred);                       \
  }
KILN_BINARY_INFER(AddOp, "kiln.add")
KILN_BINARY_INFER(SubOp, "kiln.sub")
KILN_BINARY_INFER(MulOp, "kiln.mul")
KILN_BINARY_INFER(DivOp, "kiln.div")
#undef KILN_BINARY_INFER

// relu(relu(x)) == relu(x)
OpFoldResult ReluOp::fold(FoldAdaptor) {
  if (auto inner = getInput().getDefiningOp<ReluOp>()) return inner.getResult();
  return {};
}

LogicalResult MatmulOp::inferReturnTypes(MLIRContext*, std::optional<Location> loc,
                                         MatmulOp::Adaptor adaptor,
                                         SmallVectorImpl<Type>& inferred) {
  auto lhs = cast<RankedTensorType>(adaptor.getLhs().getType());
  auto rhs = cast<RankedTensorType>(adaptor.getRhs().getType());
  if (lhs.getRank() < 2 || rhs.getRank() < 2) {
    return emitOptionalError(loc, "kiln.matmul: expected operands of rank >= 2, got rank ",
                             lhs.getRank(), " and ", rhs.getRank());
  }
  if (lhs.getElementType() != rhs.getElementType()) {
    return emitOptionalError(loc, "kiln.matmul: operand element types differ: ",
                             lhs.getElementType(), " vs ", rhs.getElementType());
  }
  ArrayRef<int64_t> a = lhs.getShape(), b = rhs.getShape();
  const int64_t k_lhs = a.back(), k_rhs = b[b.size() - 2];
  if (!ShapedType::isDynamic(k_lhs) && !ShapedType::isDynamic(k_rhs) && k_lhs != k_rhs) {
    return emitOptionalError(loc, "kiln.matmul: contraction sizes differ: lhs ", lhs, " has ",
                             k_lhs, ", rhs ", rhs, " has ", k_rhs);
  }
  SmallVector<int64_t> batch;
  if (failed(broadcast(a.drop_back(2), b.drop_back(2), batch, loc, "kiln.matmul")))
    return failure();
  batch.push_back(a[a.size() - 2]);
  batch.push_back(b.back());
  inferred.push_back(RankedTensorType::get(batch, lhs.getElementType()));
  return success();
}

}  // namespace kiln::ir

#define GET_OP_CLASSES
#include "kiln/ir/KilnOps.cpp.inc"
