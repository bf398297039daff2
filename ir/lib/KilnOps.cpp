#include <cmath>

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"

#include "kiln/ir/KilnDialect.h"

using namespace mlir;

namespace kiln::ir {
namespace {

// Promotion of element types, as the runtime's promote_types: floats beat integers, wider wins.
Type promote_types(Type a, Type b) {
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

bool is_float(Type t) {
  return isa<FloatType>(t);
}
bool is_bool(Type t) {
  return t.isInteger(1);
}

// PyTorch's result_type for two tensors: a 0-dim operand only raises the category
// (bool < integer < floating) of a dimensioned one.
Type result_type(RankedTensorType a, RankedTensorType b) {
  Type ea = a.getElementType(), eb = b.getElementType();
  const bool a0 = a.getRank() == 0, b0 = b.getRank() == 0;
  if (a0 != b0) {
    Type dim = a0 ? eb : ea, zero = a0 ? ea : eb;
    auto category = [](Type t) { return is_float(t) ? 2 : is_bool(t) ? 0 : 1; };
    if (category(zero) <= category(dim)) return dim;
    if (is_float(zero)) return Float32Type::get(a.getContext());
    return zero;  // integer 0-dim with a bool tensor
  }
  return promote_types(ea, eb);
}

LogicalResult infer_binary(ValueRange operands, std::optional<Location> loc, StringRef op,
                           bool true_div, SmallVectorImpl<Type>& inferred) {
  auto lhs = cast<RankedTensorType>(operands[0].getType());
  auto rhs = cast<RankedTensorType>(operands[1].getType());
  SmallVector<int64_t> shape;
  if (failed(broadcast(lhs.getShape(), rhs.getShape(), shape, loc, op))) return failure();
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
  if (failed(broadcast(lhs.getShape(), rhs.getShape(), shape, loc, op))) return failure();
  inferred.push_back(RankedTensorType::get(shape, IntegerType::get(lhs.getContext(), 1)));
  return success();
}

// Unary ops keep the shape; the element type is the input's or (float op on integers) a float.
LogicalResult verify_unary(Operation* op) {
  auto in = cast<RankedTensorType>(op->getOperand(0).getType());
  auto out = cast<RankedTensorType>(op->getResult(0).getType());
  if (in.getShape() != out.getShape()) {
    return op->emitOpError("result shape must equal the input's: input ")
           << in << ", result " << out;
  }
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

#define KILN_UNARY_VERIFY(Op)            \
  LogicalResult Op::verify() {           \
    return verify_unary(getOperation()); \
  }
KILN_UNARY_VERIFY(NegOp)
KILN_UNARY_VERIFY(AbsOp)
KILN_UNARY_VERIFY(ExpOp)
KILN_UNARY_VERIFY(LogOp)
KILN_UNARY_VERIFY(Log1pOp)
KILN_UNARY_VERIFY(SqrtOp)
KILN_UNARY_VERIFY(RsqrtOp)
KILN_UNARY_VERIFY(SinOp)
KILN_UNARY_VERIFY(CosOp)
KILN_UNARY_VERIFY(TanhOp)
KILN_UNARY_VERIFY(SigmoidOp)
KILN_UNARY_VERIFY(ReluOp)
KILN_UNARY_VERIFY(SiluOp)
KILN_UNARY_VERIFY(ErfOp)
KILN_UNARY_VERIFY(FloorOp)
KILN_UNARY_VERIFY(CeilOp)
KILN_UNARY_VERIFY(RoundOp)
KILN_UNARY_VERIFY(SignOp)
KILN_UNARY_VERIFY(ReciprocalOp)
KILN_UNARY_VERIFY(LogicalNotOp)
KILN_UNARY_VERIFY(CloneOp)
#undef KILN_UNARY_VERIFY

// relu(relu(x)) == relu(x)
OpFoldResult ReluOp::fold(FoldAdaptor) {
  if (auto inner = getInput().getDefiningOp<ReluOp>()) return inner.getResult();
  return {};
}

// Fused conv/linear: the activation is one of the runtime's kernels::Activation values, a clamp
// has ordered bounds, and a residual has exactly the result's type (it is added element by
// element, without broadcasting).
LogicalResult verify_activation(Operation* op, int64_t activation, double lo, double hi) {
  if (activation < 0 || activation > 8) {
    return op->emitOpError("activation must be a kernels::Activation in [0, 8], got ")
           << activation;
  }
  if (activation == 3 && !(lo <= hi)) {
    return op->emitOpError("clamp bounds are not ordered: min ") << lo << " > max " << hi;
  }
  return success();
}

LogicalResult verify_fused_epilogue(Operation* op, Value residual, int64_t activation, double lo,
                                    double hi) {
  if (failed(verify_activation(op, activation, lo, hi))) return failure();
  if (!isa<NoneType>(residual.getType()) && residual.getType() != op->getResult(0).getType()) {
    return op->emitOpError("residual type ")
           << residual.getType() << " differs from the result type " << op->getResult(0).getType();
  }
  return success();
}

LogicalResult Conv2dFusedOp::verify() {
  return verify_fused_epilogue(*this, getResidual(), getActivation(),
                               getClampMin().convertToDouble(), getClampMax().convertToDouble());
}
// conv2d's shapes as the runtime kernel computes them (kernels/conv.h): input [N, C_in, H, W],
// weight [C_out, C_in / groups, kh, kw], bias none or [C_out], result [N, C_out, Ho, Wo] with
// Ho = (H + 2 pad - dilation (kh - 1) - 1) / stride + 1; positive strides and dilations.
LogicalResult Conv2dOp::verify() {
  auto x = dyn_cast<RankedTensorType>(getInput().getType());
  auto w = dyn_cast<RankedTensorType>(getWeight().getType());
  auto r = dyn_cast<RankedTensorType>(getResult().getType());
  if (!x || !w || !r || x.getRank() != 4 || w.getRank() != 4 || r.getRank() != 4)
    return emitOpError("expects a 4-d input, weight and result, got ")
           << getInput().getType() << ", " << getWeight().getType() << " -> "
           << getResult().getType();
  ArrayRef<int64_t> s = getStride(), p = getPadding(), d = getDilation();
  if (s.size() != 2 || p.size() != 2 || d.size() != 2)
    return emitOpError("stride, padding and dilation must have 2 values each");
  const int64_t groups = getGroups();
  if (groups < 1 || s[0] < 1 || s[1] < 1 || d[0] < 1 || d[1] < 1 || p[0] < 0 || p[1] < 0)
    return emitOpError("expects groups, strides and dilations >= 1 and padding >= 0");
  if (x.isDynamicDim(1) || w.isDynamicDim(1) || w.isDynamicDim(0)) return success();
  if (x.getDimSize(1) != w.getDimSize(1) * groups)
    return emitOpError("input channels ") << x.getDimSize(1) << " differ from weight channels "
                                          << w.getDimSize(1) << " x groups " << groups;
  auto bias = dyn_cast<RankedTensorType>(getBias().getType());
  if (bias && (bias.getRank() != 1 || bias.getDimSize(0) != w.getDimSize(0)))
    return emitOpError("bias must be [") << w.getDimSize(0) << "], got " << bias;
  if (!x.hasStaticShape() || !w.hasStaticShape()) return success();
  int64_t want[4] = {x.getDimSize(0), w.getDimSize(0), 0, 0};
  for (int k = 0; k < 2; ++k) {
    const int64_t span = x.getDimSize(2 + k) + 2 * p[k] - d[k] * (w.getDimSize(2 + k) - 1) - 1;
    if (span < 0)
      return emitOpError("the dilated kernel is larger than the padded input in dim ") << 2 + k;
    want[2 + k] = span / s[k] + 1;
  }
  if (r.getShape() != ArrayRef<int64_t>(want))
    return emitOpError("result must be [")
           << want[0] << ", " << want[1] << ", " << want[2] << ", " << want[3] << "], got " << r;
  return success();
}

// The runtime kernel's shape rule (kernels/conv.h conv2d_avgpool_output_shape): [N, C_out, 1, 1]
// from a 4-d input and weight.
LogicalResult Conv2dAvgpoolOp::verify() {
  if (failed(verify_activation(*this, getActivation(), getClampMin().convertToDouble(),
                               getClampMax().convertToDouble())))
    return failure();
  auto x = dyn_cast<RankedTensorType>(getInput().getType());
  auto w = dyn_cast<RankedTensorType>(getWeight().getType());
  auto r = dyn_cast<RankedTensorType>(getResult().getType());
  if (!x || !w || !r || x.getRank() != 4 || w.getRank() != 4)
    return emitOpError("expects a 4-d input and weight");
  const SmallVector<int64_t, 4> want{x.getShape()[0], w.getShape()[0], 1, 1};
  if (r.getShape() != ArrayRef<int64_t>(want))
    return emitOpError("result must be [N, C_out, 1, 1] = [")
           << want[0] << ", " << want[1] << ", 1, 1], got " << r;
  return success();
}
LogicalResult LinearFusedOp::verify() {
  return verify_fused_epilogue(*this, getResidual(), getActivation(),
                               getClampMin().convertToDouble(), getClampMax().convertToDouble());
}

// interpolate / interpolate_backward (kernels/interpolate.h): the small side `from` and the
// resampled side `to` are 4-d float tensors of one element type with the same N and C; a known
// mode, align_corners only with bilinear, finite non-negative scale factors, both or neither.
LogicalResult verify_interpolate(Operation* op, Type from, Type to, int64_t mode,
                                 bool align_corners, double scale_h, double scale_w) {
  if (mode != 0 && mode != 1)
    return op->emitOpError("mode must be 0 (nearest) or 1 (bilinear), got ") << mode;
  if (align_corners && mode != 1)
    return op->emitOpError("align_corners can only be set with mode 1 (bilinear)");
  if (!std::isfinite(scale_h) || !std::isfinite(scale_w) || scale_h < 0 || scale_w < 0)
    return op->emitOpError("scale factors must be finite and >= 0, got (")
           << scale_h << ", " << scale_w << ")";
  if ((scale_h > 0) != (scale_w > 0))
    return op->emitOpError("scale factors must be both set or both 0, got (")
           << scale_h << ", " << scale_w << ")";
  auto a = dyn_cast<RankedTensorType>(from), b = dyn_cast<RankedTensorType>(to);
  if (!a || !b || a.getRank() != 4 || b.getRank() != 4 || !isa<FloatType>(a.getElementType()))
    return op->emitOpError("expects 4-d float tensors, got ") << from << " and " << to;
  if (a.getElementType() != b.getElementType() || a.getShape()[0] != b.getShape()[0] ||
      a.getShape()[1] != b.getShape()[1])
    return op->emitOpError("expects the same element type, N and C on both sides, got ")
           << from << " and " << to;
  return success();
}
LogicalResult InterpolateOp::verify() {
  return verify_interpolate(*this, getInput().getType(), getResult().getType(), getMode(),
                            getAlignCorners(), getScaleH().convertToDouble(),
                            getScaleW().convertToDouble());
}
LogicalResult InterpolateBackwardOp::verify() {
  return verify_interpolate(*this, getResult().getType(), getGrad().getType(), getMode(),
                            getAlignCorners(), getScaleH().convertToDouble(),
                            getScaleW().convertToDouble());
}

// The block's shapes as the runtime kernel checks them (kernels/mbconv.h), float32 throughout.
LogicalResult MbconvOp::verify() {
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
  if (failed(verify_activation(*this, getExpandActivation(), getExpandClampMin().convertToDouble(),
                               getExpandClampMax().convertToDouble())) ||
      failed(verify_activation(*this, getDwActivation(), getDwClampMin().convertToDouble(),
                               getDwClampMax().convertToDouble())))
    return failure();
  return verify_fused_epilogue(*this, getResidual(), getProjectActivation(),
                               getProjectClampMin().convertToDouble(),
                               getProjectClampMax().convertToDouble());
}

// Constant-like ops fold to their value: the greedy rewrite driver identifies (and dedups)
// constants by that attribute, so without it every constant would look alike.
OpFoldResult ConstantOp::fold(FoldAdaptor) {
  return getValue();
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
