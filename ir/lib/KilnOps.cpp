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

// The block's shapes as the runtime kernel checks them (kernels/mbconv.h), float32 throughout.
LogicalResult MbconvOp::verify() {
  if (failed(verify_enum_attrs(*this))) return failure();
  auto shape = [](Value v) -> ArrayRef<int64_t> {
    return cast<RankedTensorType>(v.getType()).getShape();
  };
  auto absent = [](Value v) { return isa<NoneType>(v.getType()); };
  for (Value v : getOperation()->getOperands()) {
    if (!absent(v) && !cast<RankedTensorType>(v.getType()).getElementType().isF32())
      return emitOpError("expects float32 operands, got ") << v.getType();
  }
  ArrayRef<int64_t> x = shape(getInput()), dw = shape(getDwWeight()),
                    pw = shape(getProjectWeight());
  if (x.size() != 4 || dw.size() != 4 || pw.size() != 4)
    return emitOpError("expects 4-d input, dw_weight and project_weight");
  const int64_t E = dw[0];
  if (!absent(getExpandWeight())) {
    ArrayRef<int64_t> ew = shape(getExpandWeight());
    if (ew != ArrayRef<int64_t>{E, x[1], 1, 1})
      return emitOpError("expand_weight must be [") << E << ", " << x[1] << ", 1, 1]";
  } else if (x[1] != E) {
    return emitOpError("without expand_weight the input has dw_weight's ")
           << E << " channels, got " << x[1];
  }
  if (dw[1] != 1) return emitOpError("dw_weight must be [E, 1, KH, KW] (depthwise)");
  if (pw[1] != E || pw[2] != 1 || pw[3] != 1)
    return emitOpError("project_weight must be [P, ") << E << ", 1, 1]";
  auto bias_ok = [&](Value b, int64_t n) { return absent(b) || shape(b) == ArrayRef<int64_t>{n}; };
  if (!bias_ok(getExpandBias(), E) || !bias_ok(getDwBias(), E) || !bias_ok(getProjectBias(), pw[0]))
    return emitOpError("biases must be [E], [E] and [P]");
  ArrayRef<int64_t> s = getStride(), p = getPadding();
  if (s.size() != 2 || p.size() != 2 || s[0] < 1 || s[1] < 1 || p[0] < 0 || p[1] < 0 ||
      p[0] >= dw[2] || p[1] >= dw[3])
    return emitOpError("stride must be >= 1 and padding in [0, kernel) (2 values each)");
  const int64_t Ho = (x[2] + 2 * p[0] - dw[2]) / s[0] + 1,
                Wo = (x[3] + 2 * p[1] - dw[3]) / s[1] + 1;
  if (shape(getResult()) != ArrayRef<int64_t>{x[0], pw[0], Ho, Wo})
    return emitOpError("result must be [")
           << x[0] << ", " << pw[0] << ", " << Ho << ", " << Wo << "]";
  if (failed(shape::activation(getOperation(), getExpandActivation(),
                               getExpandClampMin().convertToDouble(),
                               getExpandClampMax().convertToDouble())) ||
      failed(shape::activation(getOperation(), getDwActivation(), getDwClampMin().convertToDouble(),
                               getDwClampMax().convertToDouble())))
    return failure();
  return shape::fused_epilogue(getOperation(), getResidual(), getProjectActivation(),
                               getProjectClampMin().convertToDouble(),
                               getProjectClampMax().convertToDouble(), getResult());
}

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
  if (lhs.getRank() < 2 || rhs.getRank() < 2) {
    return emitOptionalError(loc, "kiln.matmul: expected operands of rank >= 2, got rank ",
                             lhs.getRank(), " and ", rhs.getRank());
  }
  if (lhs.getElementType() != rhs.getElementType()) {  // the tracer inserts kiln.to first
    return emitOptionalError(loc,
                             "kiln.matmul: operand element types differ: ", lhs.getElementType(),
                             " vs ", rhs.getElementType());
  }
  ArrayRef<int64_t> a = lhs.getShape(), b = rhs.getShape();
  const int64_t k_lhs = a.back(), k_rhs = b[b.size() - 2];
  if (!ShapedType::isDynamic(k_lhs) && !ShapedType::isDynamic(k_rhs) && k_lhs != k_rhs) {
    return emitOptionalError(loc, "kiln.matmul: contraction sizes differ: lhs ", lhs, " has ",
                             k_lhs, ", rhs ", rhs, " has ", k_rhs);
  }
  SmallVector<int64_t> batch;
  if (failed(broadcast_shapes(a.drop_back(2), b.drop_back(2), batch, loc, "kiln.matmul")))
    return failure();
  batch.push_back(a[a.size() - 2]);
  batch.push_back(b.back());
  inferred.push_back(RankedTensorType::get(batch, lhs.getElementType()));
  return success();
}

}  // namespace kiln::ir

#define GET_OP_CLASSES
#include "kiln/ir/KilnOps.cpp.inc"

#include "kiln/ir/KilnEnums.cpp.inc"
