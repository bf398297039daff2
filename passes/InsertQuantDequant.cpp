// --kiln-insert-qdq: writes a quantization plan into the graph as QDQ pairs, the form
// --kiln-fold-qdq turns into integer layers. The plan is given on the IR (kiln::quant's convert
// computes it from calibration; tests write it by hand), so the policy (which values, which
// observer, which scheme) stays with the caller and this pass only rewrites:
//
//   an op's first result (or a @forward argument) with  kiln.qparams = {scale = S : f32,
//       zero_point = Z : i64, dtype = D : i64}
//     v  ->  d = kiln.dequantize(kiln.quantize(v, S, Z) {dtype = D}, S, Z); v's other users read d
//   a kiln.conv2d / kiln.linear with  kiln.qweight = {value = <int8 elements>,
//       scale = <f32 elements, one per output channel or 0-dim>, zero_point = <int elements>}
//     its weight operand -> kiln.dequantize(constant value, constant scale, constant zero_point)
//     {axis = 0}; the float weight constant goes when nothing else reads it.
//   a kiln.linear with  kiln.qweight  and the unit attribute  kiln.qdynamic
//     -> kiln.qlinear_dynamic(input, constant value, constant scale, constant zero_point, bias):
//     dynamic quantization, the input quantized per call (no activation parameters to plan).
//
// (An op's first result: max_pool2d's values, not its indices.) The attributes are removed. A value
// that is not a ranked float32 tensor, or a qweight whose shapes do not match the weight, is an
// error naming the op (nothing is half rewritten).

#include <cmath>

#include "ConstantData.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Pass/Pass.h"

#include "kiln/ir/KilnDialect.h"
#include "kiln/passes/Passes.h"

namespace kiln::passes {
namespace {

constexpr llvm::StringLiteral kQParams = "kiln.qparams";
constexpr llvm::StringLiteral kQWeight = "kiln.qweight";
constexpr llvm::StringLiteral kQDynamic = "kiln.qdynamic";

struct ActivationParams {
  double scale = 1;
  int64_t zero_point = 0;
  int64_t dtype = 0;
};

std::optional<ActivationParams> read_params(mlir::DictionaryAttr d) {
  auto scale = d.getAs<mlir::FloatAttr>("scale");
  auto zero_point = d.getAs<mlir::IntegerAttr>("zero_point");
  auto dtype = d.getAs<mlir::IntegerAttr>("dtype");
  if (!scale || !zero_point || !dtype) return std::nullopt;
  return ActivationParams{scale.getValueAsDouble(), zero_point.getInt(), dtype.getInt()};
}

mlir::Type element_type_of(mlir::MLIRContext* ctx, int64_t dtype) {
  switch (static_cast<ir::DType>(dtype)) {
    case ir::DType::Int8:
      return mlir::IntegerType::get(ctx, 8);
    case ir::DType::Uint8:
      return mlir::IntegerType::get(ctx, 8, mlir::IntegerType::Unsigned);
    case ir::DType::Int32:
      return mlir::IntegerType::get(ctx, 32);
    default:
      return nullptr;
  }
}

mlir::Value scalar(mlir::OpBuilder& b, mlir::Location loc, mlir::Type element, double v) {
  return make_constant(b, loc, mlir::RankedTensorType::get({}, element), {v}, "qparam");
}

// q = quantize(v), d = dequantize(q), every other user of v reads d.
mlir::LogicalResult insert_pair(mlir::OpBuilder& b, mlir::Location loc, mlir::Value v,
                                mlir::DictionaryAttr attr, mlir::Operation* where) {
  auto type = mlir::dyn_cast<mlir::RankedTensorType>(v.getType());
  auto params = read_params(attr);
  if (!params || !type || !type.getElementType().isF32())
    return where->emitError(
        "kiln.qparams: expected {scale: f32, zero_point: i64, dtype: i64} "
        "on a float32 tensor");
  mlir::Type qt = element_type_of(b.getContext(), params->dtype);
  if (!qt || !(params->scale > 0) || !std::isfinite(params->scale))
    return where->emitError(
        "kiln.qparams: expected dtype int8, uint8 or int32 and a finite scale > 0");
  mlir::Value s = scalar(b, loc, b.getF32Type(), params->scale);
  mlir::Value z = scalar(b, loc, b.getI32Type(), static_cast<double>(params->zero_point));
  mlir::OperationState qs(loc, ir::QuantizeOp::getOperationName());
  qs.addOperands({v, s, z});
  qs.addAttribute("axis", b.getI64IntegerAttr(1));
  qs.addAttribute("dtype", b.getI64IntegerAttr(params->dtype));
  qs.addTypes(mlir::RankedTensorType::get(type.getShape(), qt));
  mlir::Operation* q = b.create(qs);
  mlir::OperationState ds(loc, ir::DequantizeOp::getOperationName());
  ds.addOperands({q->getResult(0), s, z});
  ds.addAttribute("axis", b.getI64IntegerAttr(1));
  ds.addTypes(type);
  mlir::Operation* d = b.create(ds);
  v.replaceAllUsesExcept(d->getResult(0), q);
  return mlir::success();
}

mlir::LogicalResult quantize_weight(mlir::Operation* layer, mlir::DictionaryAttr attr) {
  auto value = attr.getAs<mlir::ElementsAttr>("value");
  auto scale = attr.getAs<mlir::ElementsAttr>("scale");
  auto zero_point = attr.getAs<mlir::ElementsAttr>("zero_point");
  mlir::Value w = layer->getOperand(1);
  auto wt = mlir::dyn_cast<mlir::RankedTensorType>(w.getType());
  if (!value || !scale || !zero_point || !wt || value.getShapedType().getShape() != wt.getShape())
    return layer->emitError(
        "kiln.qweight: expected {value, scale, zero_point} elements with "
        "value shaped like the weight");
  const int64_t channels = wt.getRank() > 0 ? wt.getDimSize(0) : 1;
  const int64_t n = scale.getShapedType().getNumElements();
  if (scale.getShapedType().getRank() > 1 ||
      (scale.getShapedType().getRank() == 1 && n != channels))
    return layer->emitError("kiln.qweight: expected one scale per output channel (")
           << channels << "), got " << n;
  mlir::OpBuilder b(layer);
  const mlir::Location loc = layer->getLoc();
  auto constant = [&](mlir::ElementsAttr a) {
    auto type = mlir::cast<mlir::RankedTensorType>(a.getShapedType());
    return b.create<ir::ConstantOp>(loc, type, a).getResult();
  };
  if (layer->hasAttr(kQDynamic)) {
    if (!mlir::isa<ir::LinearOp>(layer))
      return layer->emitError("kiln.qdynamic: only kiln.linear is quantized dynamically");
    mlir::OperationState qs(loc, ir::QlinearDynamicOp::getOperationName());
    qs.addOperands({layer->getOperand(0), constant(value), constant(scale), constant(zero_point),
                    layer->getOperand(2)});
    qs.addTypes(layer->getResult(0).getType());
    mlir::Operation* q = b.create(qs);
    layer->getResult(0).replaceAllUsesWith(q->getResult(0));
    layer->erase();
    if (mlir::Operation* old = w.getDefiningOp(); old && old->use_empty()) old->erase();
    return mlir::success();
  }
  mlir::OperationState ds(loc, ir::DequantizeOp::getOperationName());
  ds.addOperands({constant(value), constant(scale), constant(zero_point)});
  ds.addAttribute("axis", b.getI64IntegerAttr(0));
  ds.addTypes(wt);
  layer->setOperand(1, b.create(ds)->getResult(0));
  if (mlir::Operation* old = w.getDefiningOp(); old && old->use_empty()) old->erase();
  return mlir::success();
}

struct InsertQuantDequantPass
    : mlir::PassWrapper<InsertQuantDequantPass, mlir::OperationPass<mlir::func::FuncOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(InsertQuantDequantPass)
  llvm::StringRef getArgument() const override { return "kiln-insert-qdq"; }
  llvm::StringRef getDescription() const override {
    return "Insert quantize/dequantize pairs and int8 weights where kiln.qparams / kiln.qweight "
           "attributes ask for them";
  }
  void runOnOperation() override {
    mlir::func::FuncOp func = getOperation();
    bool failed = false;
    mlir::OpBuilder b(func.getContext());
    if (!func.isExternal()) {
      b.setInsertionPointToStart(&func.front());
      for (unsigned i = 0; i < func.getNumArguments(); ++i) {
        auto attr = func.getArgAttrOfType<mlir::DictionaryAttr>(i, kQParams);
        if (!attr) continue;
        failed |= mlir::failed(insert_pair(b, func.getLoc(), func.getArgument(i), attr, func));
        func.removeArgAttr(i, kQParams);
      }
    }
    llvm::SmallVector<mlir::Operation*> ops;
    func.walk([&](mlir::Operation* op) {
      if (op->hasAttr(kQParams) || op->hasAttr(kQWeight) || op->hasAttr(kQDynamic))
        ops.push_back(op);
    });
    for (mlir::Operation* op : ops) {
      if (auto attr = op->getAttrOfType<mlir::DictionaryAttr>(kQWeight)) {
        op->removeAttr(kQWeight);
        if (!mlir::isa<ir::Conv2dOp, ir::LinearOp>(op)) {
          op->emitError("kiln.qweight: only kiln.conv2d and kiln.linear take int8 weights");
          failed = true;
        } else if (op->hasAttr(kQDynamic)) {
          failed |= mlir::failed(quantize_weight(op, attr));  // replaces (erases) the op
          continue;
        } else {
          failed |= mlir::failed(quantize_weight(op, attr));
        }
      }
      if (op->hasAttr(kQDynamic)) {
        op->emitError("kiln.qdynamic: expected kiln.qweight beside it");
        op->removeAttr(kQDynamic);
        failed = true;
      }
      if (auto attr = op->getAttrOfType<mlir::DictionaryAttr>(kQParams)) {
        op->removeAttr(kQParams);
        if (op->getNumResults() == 0) {
          op->emitError("kiln.qparams: expected an op with a result");
          failed = true;
          continue;
        }
        b.setInsertionPointAfter(op);
        failed |= mlir::failed(insert_pair(b, op->getLoc(), op->getResult(0), attr, op));
      }
    }
    if (failed) signalPassFailure();
  }
};

}  // namespace

std::unique_ptr<mlir::Pass> create_insert_qdq_pass() {
  return std::make_unique<InsertQuantDequantPass>();
}

}  // namespace kiln::passes
