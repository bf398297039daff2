#include <cmath>

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"

#include "ShapeRules.h"
#include "kiln/ir/KilnDialect.h"

using namespace mlir;

namespace kiln::ir {
namespace {

using shape::broadcast_shapes;
using shape::result_type;

bool is_float(Type t) {
  return isa<FloatType>(t);
}

LogicalResult infer_binary(ValueRange operands, std::optional<Location> loc, StringRef op,
                           bool true_div, SmallVectorImpl<Type>& inferred) {
  auto lhs = cast<RankedTensorType>(operands[0].getType());
  auto rhs = cast<RankedTensorType>(operands[1].getType());
  SmallVector<int64_t> shape;
  if (failed(broadcast_shapes(lhs.getShape(), rhs.getShape(), shape, loc, op))) return failure();
  Type element = result_type(lhs, rhs);
  if (true_div && !is_float(element)) element = Float32Type::get(lhs.getContext());
  inferred.push_back(RankedTensorType::get(shape, element));
  return success();
}

LogicalResult infer_compare(ValueRange operands, std::optional<Location> loc, StringRef op,
                            SmallVectorImpl<Type>& inferred) {
  auto lhs = cast<RankedTensorType>(operands[0].getType());
  auto rhs = cast<RankedTensorType>(operands[1].getType());
  SmallVector<int64_t> shape;
  if (failed(broadcast_shapes(lhs.getShape(), rhs.getShape(), shape, loc, op))) return failure();
  inferred.push_back(RankedTensorType::get(shape, IntegerType::get(lhs.getContext(), 1)));
  return success();
}

}  // namespace

#define KILN_BINARY_INFER(Op, name, true_div)                                                \
  LogicalResult Op::inferReturnTypes(MLIRContext*, std::optional<Location> loc,              \
                                     Op::Adaptor adaptor, SmallVectorImpl<Type>& inferred) { \
    return infer_binary(ValueRange{adaptor.getLhs(), adaptor.getRhs()}, loc, name, true_div, \
                        inferred);                                                           \
  }
KILN_BINARY_INFER(AddOp, "kiln.add", false)
KILN_BINARY_INFER(SubOp, "kiln.sub", false)
KILN_BINARY_INFER(MulOp, "kiln.mul", false)
KILN_BINARY_INFER(DivOp, "kiln.div", true)
KILN_BINARY_INFER(PowOp, "kiln.pow", false)
KILN_BINARY_INFER(MaximumOp, "kiln.maximum", false)
KILN_BINARY_INFER(MinimumOp, "kiln.minimum", false)
#undef KILN_BINARY_INFER

#define KILN_COMPARE_INFER(Op, name)                                                         \
  LogicalResult Op::inferReturnTypes(MLIRContext*, std::optional<Location> loc,              \
                                     Op::Adaptor adaptor, SmallVectorImpl<Type>& inferred) { \
    return infer_compare(adaptor.getOperands(), loc, name, inferred);                        \
  }
KILN_COMPARE_INFER(EqOp, "kiln.eq")
KILN_COMPARE_INFER(NeOp, "kiln.ne")
KILN_COMPARE_INFER(LtOp, "kiln.lt")
KILN_COMPARE_INFER(LeOp, "kiln.le")
KILN_COMPARE_INFER(GtOp, "kiln.gt")
KILN_COMPARE_INFER(GeOp, "kiln.ge")
KILN_COMPARE_INFER(LogicalAndOp, "kiln.logical_and")
KILN_COMPARE_INFER(LogicalOrOp, "kiln.logical_or")
#undef KILN_COMPARE_INFER

OpFoldResult ReluOp::fold(FoldAdaptor) {
  if (auto inner = getInput().getDefiningOp<ReluOp>()) return inner.getResult();
  return {};
}

// Every other op's verifier: its enum attributes' ranges and the shape rules ir/ops.toml names.
#include "kiln/ir/KilnOpVerifiers.inc"

// Constant-like ops fold to their value: the greedy rewrite driver identifies (and dedups)
// constants by that attribute, so without it every constant would look alike.
OpFoldResult ConstantOp::fold(FoldAdaptor) {
  return getValue();
}
LogicalResult ConstantOp::verify() {
  if (getValue().getShapedType() != getResult().getType())
    return emitOpError("value type ") << getValue().getShapedType()
                                      << " differs from the result type " << getResult().getType();
  return success();
}
OpFoldResult NoneOp::fold(FoldAdaptor) {
  return UnitAttr::get(getContext());
}

// The body's arguments mirror the operands and its yield the results, type for type; the body holds
// kiln ops only (the region is codegen's unit of one loop nest).
LogicalResult FusedOp::verify() {
  Block& body = getBody().front();
  if (body.getNumArguments() != getNumOperands()) {
    return emitOpError("body takes ") << body.getNumArguments() << " arguments, the op has "
                                      << getNumOperands() << " operands";
  }
  for (auto [arg, operand] : llvm::zip(body.getArguments(), getOperands())) {
    if (arg.getType() != operand.getType()) {
      return emitOpError("body argument type ")
             << arg.getType() << " differs from operand type " << operand.getType();
    }
  }
  auto yield = dyn_cast<YieldOp>(body.getTerminator());
  if (!yield) return emitOpError("body must end in kiln.yield");
  if (yield.getValues().getTypes() != getResultTypes()) {
    return emitOpError("yields ") << yield.getValues().getTypes() << ", the op returns "
                                  << getResultTypes();
  }
  for (Operation& op : body.without_terminator()) {
    if (op.getDialect() != (*this)->getDialect() || op.getNumRegions() != 0) {
      return emitOpError("body may hold only kiln ops without regions, found ") << op.getName();
    }
  }
  return success();
}

LogicalResult MatmulOp::inferReturnTypes(MLIRContext*, std::optional<Location> loc,
                                         MatmulOp::Adaptor adaptor,
                                         SmallVectorImpl<Type>& inferred) {
  auto lhs = cast<RankedTensorType>(adaptor.getLhs().getType());
  auto rhs = cast<RankedTensorType>(adaptor.getRhs().getType());
  if (lhs.getRank() < 1 || rhs.getRank() < 1) {
    return emitOptionalError(loc, "kiln.matmul: expected operands of rank >= 1, got rank ",
                             lhs.getRank(), " and ", rhs.getRank());
  }
  if (lhs.getElementType() != rhs.getElementType()) {  // the tracer inserts kiln.to first
    return emitOptionalError(loc,
                             "kiln.matmul: operand element types differ: ", lhs.getElementType(),
                             " vs ", rhs.getElementType());
  }
  // torch.matmul: a 1-D lhs is a row [1, k] and a 1-D rhs a column [k, 1], their unit dim dropped
  // from the result (1-D x 1-D is the dot product, a 0-dim result).
  ArrayRef<int64_t> a = lhs.getShape(), b = rhs.getShape();
  const int64_t k_lhs = a.back(), k_rhs = b.size() == 1 ? b[0] : b[b.size() - 2];
  if (!ShapedType::isDynamic(k_lhs) && !ShapedType::isDynamic(k_rhs) && k_lhs != k_rhs) {
    return emitOptionalError(loc, "kiln.matmul: contraction sizes differ: lhs ", lhs, " has ",
                             k_lhs, ", rhs ", rhs, " has ", k_rhs);
  }
  SmallVector<int64_t> batch;
  if (failed(broadcast_shapes(a.size() >= 2 ? a.drop_back(2) : ArrayRef<int64_t>{},
                              b.size() >= 2 ? b.drop_back(2) : ArrayRef<int64_t>{}, batch, loc,
                              "kiln.matmul")))
    return failure();
  if (a.size() >= 2) batch.push_back(a[a.size() - 2]);
  if (b.size() >= 2) batch.push_back(b.back());
  inferred.push_back(RankedTensorType::get(batch, lhs.getElementType()));
  return success();
}

}  // namespace kiln::ir

#define GET_OP_CLASSES
#include "kiln/ir/KilnOps.cpp.inc"

#include "kiln/ir/KilnEnums.cpp.inc"
