// --kiln-fold-qdq: the QDQ form of an int8 layer (what ONNX Runtime's quantize_static writes and
// kiln::quant's convert produces)
//   xf = kiln.dequantize(xq, xs, xz)               xq uint8/int8, per tensor
//   wf = kiln.dequantize(wq, ws, wz) {axis = 0}    wq int8/uint8, per tensor or per channel
//   y  = kiln.conv2d(xf, wf, b?) | kiln.linear(xf, wf, b?)
//   r  = kiln.relu(y)                              optional, y used only here (or a clamp from 0
//                                                  whose top saturates the quantizer: ReLU6)
//   q  = kiln.quantize(r or y, ys, yz)             per tensor, uint8/int8
// becomes q = kiln.qconv2d / kiln.qlinear(xq, xs, xz, wq, ws, wz, b_int32, ys, yz) {relu}: the
// integer kernels (kernels/qgemm.h) instead of three float ops around the float one. A float bias
// becomes int32 at scale xs * ws[o] (round half to even), as the TFLite and ONNX schemes store it;
// that needs constant xs, ws and b (b may be the dequantize of constants, as ONNX Runtime's QDQ
// models store it), and a bias whose int32 value is in range, else nothing folds.
// relu folds as a clamp at yz (quantize(relu(v)) = max(quantize(v), yz)); so does clamp(v, 0, M)
// when quantize(M) >= the type's largest value, since the quantizer saturates there anyway.
//
// The QDQ form of an integer add (a residual connection):
//   q = kiln.quantize(relu?(kiln.add(kiln.dequantize(a), kiln.dequantize(b))), ys, yz)
// becomes q = kiln.qadd(a, as, az, b, bs, bz, ys, yz) {relu}, every parameter per tensor and a, b
// and the sum of one shape: the same float32 operations in one kernel, so the same bytes.
//
// A cat of dequantizes with one set of constant parameters concatenates the bytes instead
// (cat(dequantize(a), dequantize(b)) = dequantize(cat(a, b))).
//
// Ops that only move or select values move above a per-tensor dequantize first, so that they run
// on the bytes: the schema's view ops, view(dequantize(q)) = dequantize(view(q)) (a classifier's
// flatten between the pooled features and its linear layer, a channel shuffle's transpose), and
// max_pool2d(dequantize(q)) = dequantize(max_pool2d(q)) (dequantizing is increasing: the scale
// is positive) when the pool's indices go unused. Then a quantize of a dequantize with the same
// constant parameters and dtype is the bytes themselves (quantize((q - z) * s, s, z) = q).
//
// The QDQ form of an average pool (ONNX Runtime's QDQ AveragePool / GlobalAveragePool):
//   q = kiln.quantize(kiln.avg_pool2d(kiln.dequantize(x)), ys, yz)
// becomes q = kiln.qavg_pool2d(x, xs, xz, ys, yz) with the pool's window: exact integer sums,
// requantized once (no float32 sum); an adaptive average pool too where all its windows have
// one size (H and W multiples of the output: a global pool is one window over the plane).
//
// What stays: the dequantize ops' other users keep them (dead ones go in the next cleanup), and
// a layer whose float result has other users stays float (its quantize is not the only reader).

#include <array>
#include <cmath>
#include <limits>

#include "ConstantData.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Pass/Pass.h"

#include "kiln/ir/KilnDialect.h"
#include "kiln/ir/OpSchema.h"
#include "kiln/passes/Passes.h"

namespace kiln::passes {
namespace {

bool is_int8(mlir::Value v) {
  auto t = mlir::dyn_cast<mlir::RankedTensorType>(v.getType());
  return t && t.getElementType().isInteger(8);  // int8 (signless) or uint8
}
int64_t rank_of(mlir::Value v) {
  auto t = mlir::dyn_cast<mlir::RankedTensorType>(v.getType());
  return t ? t.getRank() : -1;
}

// The int32 bias at scale xs * ws[o], or nullopt when a value does not fit.
std::optional<std::vector<double>> integer_bias(const std::vector<double>& b, double xs,
                                                const std::vector<double>& ws) {
  std::vector<double> q(b.size());
  for (size_t o = 0; o < b.size(); ++o) {
    const double s = static_cast<double>(static_cast<float>(xs) *
                                         static_cast<float>(ws.size() == 1 ? ws[0] : ws[o]));
    const double v = std::nearbyint(b[o] / s);
    if (!(std::abs(v) <= std::numeric_limits<int32_t>::max())) return std::nullopt;
    q[o] = v;
  }
  return q;
}

// The quantized type's largest value (uint8 255, int8 127).
double qmax_of(mlir::Value q) {
  auto t = mlir::cast<mlir::IntegerType>(
      mlir::cast<mlir::RankedTensorType>(q.getType()).getElementType());
  return t.isUnsigned() ? 255.0 : 127.0;
}

// Whether `op` acts as a relu under the quantize that reads it: kiln.relu, or a kiln.clamp from 0
// whose upper bound quantizes at or above the type's largest value (ReLU6 when the output range
// observed is at most 6), so that clamping at the top is the quantizer's own saturation.
bool acts_as_relu(mlir::Operation* op, ir::QuantizeOp quantize) {
  if (!op) return false;
  if (mlir::isa<ir::ReluOp>(op)) return true;
  auto clamp = mlir::dyn_cast<ir::ClampOp>(op);
  if (!clamp || clamp.getMin().convertToDouble() != 0.0) return false;
  const double hi = clamp.getMax().convertToDouble();
  if (hi == INFINITY) return true;
  auto ys = constant_values(quantize->getOperand(1));
  auto yz = constant_values(quantize->getOperand(2));
  if (!ys || !yz || ys->size() != 1 || yz->size() != 1) return false;
  const float scaled = static_cast<float>(hi) / static_cast<float>((*ys)[0]);
  return std::nearbyint(static_cast<double>(scaled)) + (*yz)[0] >= qmax_of(quantize.getResult());
}

// A float bias's values: a constant, or the dequantize of constants (ONNX Runtime's QDQ models
// store the bias as int32 at x_scale * w_scale and dequantize it), (q - zp) * scale in float32 as
// the dequantize kernel computes it.
std::optional<std::vector<double>> bias_values(mlir::Value bias) {
  if (auto values = constant_values(bias)) return values;
  auto dq = bias.getDefiningOp<ir::DequantizeOp>();
  if (!dq) return std::nullopt;
  auto q = constant_values(dq->getOperand(0));
  auto s = constant_values(dq->getOperand(1));
  auto z = constant_values(dq->getOperand(2));
  if (!q || !s || !z || s->size() != z->size() || (s->size() != 1 && s->size() != q->size()))
    return std::nullopt;
  std::vector<double> out(q->size());
  for (size_t i = 0; i < q->size(); ++i) {
    const size_t c = s->size() == 1 ? 0 : i;
    out[i] = static_cast<float>((*q)[i] - (*z)[c]) * static_cast<float>((*s)[c]);
  }
  return out;
}

// What a per-tensor 8-bit quantize reads: `op`'s float result, used only there, possibly through
// a relu that only it reads (folded as the integer op's relu); {} when it is not that.
struct Quantized {
  mlir::Operation* op = nullptr;
  mlir::Operation* relu = nullptr;
};
Quantized quantized_producer(ir::QuantizeOp quantize) {
  mlir::Value input = quantize->getOperand(0);
  if (!is_int8(quantize.getResult()) || rank_of(quantize->getOperand(1)) != 0) return {};
  mlir::Operation* relu = input.getDefiningOp();
  if (acts_as_relu(relu, quantize)) {
    if (!input.hasOneUse()) return {};
    input = relu->getOperand(0);
  } else {
    relu = nullptr;
  }
  if (!input.hasOneUse()) return {};
  return {input.getDefiningOp(), relu};
}

// Replaces `quantize`, and the relu and op it folds, by the integer op `state` holds the operands
// (and op-specific attributes) of.
void replace(ir::QuantizeOp quantize, const Quantized& p, mlir::OperationState& state) {
  mlir::OpBuilder b(quantize);
  state.addAttribute("dtype", quantize->getAttr("dtype"));
  state.addAttribute("relu", b.getBoolAttr(p.relu != nullptr));
  state.addTypes(quantize.getResult().getType());
  mlir::Operation* folded = b.create(state);
  quantize.getResult().replaceAllUsesWith(folded->getResult(0));
  quantize->erase();
  if (p.relu) p.relu->erase();
  p.op->erase();
}

bool fold(ir::QuantizeOp quantize) {
  const Quantized p = quantized_producer(quantize);
  mlir::Operation* layer = p.op;
  const bool conv = layer && mlir::isa<ir::Conv2dOp>(layer);
  if (!layer || !(conv || mlir::isa<ir::LinearOp>(layer))) return false;
  auto x = layer->getOperand(0).getDefiningOp<ir::DequantizeOp>();
  auto w = layer->getOperand(1).getDefiningOp<ir::DequantizeOp>();
  if (!x || !w || !is_int8(x->getOperand(0)) || !is_int8(w->getOperand(0))) return false;
  if (rank_of(x->getOperand(1)) != 0) return false;  // per-tensor activations only
  if (rank_of(w->getOperand(1)) == 1 && w.getAxis() != 0) return false;  // per output channel

  mlir::OpBuilder b(quantize);
  const mlir::Location loc = layer->getLoc();
  mlir::Value bias = layer->getOperand(2);
  if (!mlir::isa<mlir::NoneType>(bias.getType())) {
    auto values = bias_values(bias);
    auto xs = constant_values(x->getOperand(1));
    auto ws = constant_values(w->getOperand(1));
    if (!values || !xs || !ws) return false;
    auto q = integer_bias(*values, (*xs)[0], *ws);
    if (!q) return false;
    auto type = mlir::RankedTensorType::get({static_cast<int64_t>(q->size())}, b.getI32Type());
    bias = make_constant(b, loc, type, *q, "qdq_bias");
  }
  mlir::OperationState state(
      loc, conv ? ir::Qconv2dOp::getOperationName() : ir::QlinearOp::getOperationName());
  state.addOperands({x->getOperand(0), x->getOperand(1), x->getOperand(2), w->getOperand(0),
                     w->getOperand(1), w->getOperand(2), bias, quantize->getOperand(1),
                     quantize->getOperand(2)});
  if (conv)
    for (const char* a : {"stride", "padding", "dilation", "groups"})
      state.addAttribute(a, layer->getAttr(a));
  replace(quantize, p, state);
  return true;
}

// Whether two parameter operands hold the same constant values.
bool same_constants(mlir::Value a, mlir::Value b) {
  if (a == b) return true;
  auto va = constant_values(a), vb = constant_values(b);
  return va && vb && *va == *vb;
}

// op(dequantize(q, s, z)) -> dequantize(op(q), s, z) for a per-tensor s, where op moves or
// selects values (moves_values_only).
void sink_below_dequantize(mlir::Operation* op) {
  auto dq = op->getOperand(0).getDefiningOp<ir::DequantizeOp>();
  if (!dq || rank_of(dq->getOperand(1)) != 0) return;
  auto qt = mlir::cast<mlir::RankedTensorType>(dq->getOperand(0).getType());
  auto rt = mlir::cast<mlir::RankedTensorType>(op->getResult(0).getType());
  mlir::OpBuilder b(op);
  mlir::Operation* moved = b.clone(*op);
  moved->setOperand(0, dq->getOperand(0));
  moved->getResult(0).setType(mlir::RankedTensorType::get(rt.getShape(), qt.getElementType()));
  mlir::Operation* deq = b.clone(*dq);
  deq->setOperand(0, moved->getResult(0));
  deq->getResult(0).setType(rt);
  op->getResult(0).replaceAllUsesWith(deq->getResult(0));
  op->erase();
  if (dq->use_empty()) dq->erase();
}

// q = quantize(relu?(add(dequantize(a), dequantize(b)))) -> qadd(a, ..., b, ...) {relu}.
bool fold_add(ir::QuantizeOp quantize) {
  const Quantized p = quantized_producer(quantize);
  auto add = mlir::dyn_cast_or_null<ir::AddOp>(p.op);
  if (!add) return false;
  const mlir::Type type = add.getResult().getType();
  if (auto alpha = add->getAttrOfType<mlir::FloatAttr>("alpha");
      alpha && alpha.getValueAsDouble() != 1.0)
    return false;
  auto a = add->getOperand(0).getDefiningOp<ir::DequantizeOp>();
  auto b = add->getOperand(1).getDefiningOp<ir::DequantizeOp>();
  if (!a || !b || !is_int8(a->getOperand(0)) || !is_int8(b->getOperand(0))) return false;
  if (rank_of(a->getOperand(1)) != 0 || rank_of(b->getOperand(1)) != 0) return false;
  if (a.getResult().getType() != type || b.getResult().getType() != type)
    return false;  // broadcasting
  mlir::OperationState state(add->getLoc(), ir::QaddOp::getOperationName());
  state.addOperands({a->getOperand(0), a->getOperand(1), a->getOperand(2), b->getOperand(0),
                     b->getOperand(1), b->getOperand(2), quantize->getOperand(1),
                     quantize->getOperand(2)});
  replace(quantize, p, state);
  return true;
}

// The avg_pool2d window (kernel, stride, padding) an adaptive average pool of this static shape
// uses at every output, or nullopt when its windows differ (H or W not a multiple of the output).
std::optional<std::array<int64_t, 2>> uniform_window(ir::AdaptiveAvgPool2dOp pool) {
  auto in = mlir::cast<mlir::RankedTensorType>(pool->getOperand(0).getType());
  auto out = mlir::cast<mlir::RankedTensorType>(pool.getResult().getType());
  if (!in.hasStaticShape() || !out.hasStaticShape() || in.getRank() < 3) return std::nullopt;
  const int64_t r = in.getRank(), H = in.getDimSize(r - 2), W = in.getDimSize(r - 1);
  const int64_t Ho = out.getDimSize(r - 2), Wo = out.getDimSize(r - 1);
  if (Ho < 1 || Wo < 1 || H % Ho != 0 || W % Wo != 0) return std::nullopt;
  return std::array<int64_t, 2>{H / Ho, W / Wo};
}

// q = quantize(avg_pool2d(dequantize(x))) -> qavg_pool2d(x, xs, xz, ys, yz); an adaptive average
// pool too where every window has one size (a global pool: kernel = stride = the input's H, W).
bool fold_avg_pool(ir::QuantizeOp quantize) {
  const Quantized p = quantized_producer(quantize);
  if (!p.op || p.relu || !average_pool_on_bytes(p.op)) return false;
  auto x = p.op->getOperand(0).getDefiningOp<ir::DequantizeOp>();
  if (!x || !is_int8(x->getOperand(0)) || rank_of(x->getOperand(1)) != 0) return false;
  mlir::OpBuilder b(quantize);
  mlir::OperationState state(p.op->getLoc(), ir::QavgPool2dOp::getOperationName());
  state.addOperands({x->getOperand(0), x->getOperand(1), x->getOperand(2), quantize->getOperand(1),
                     quantize->getOperand(2)});
  if (auto adaptive = mlir::dyn_cast<ir::AdaptiveAvgPool2dOp>(p.op)) {
    const std::array<int64_t, 2> window = *uniform_window(adaptive);
    state.addAttribute("kernel", b.getDenseI64ArrayAttr(window));
    state.addAttribute("stride", b.getDenseI64ArrayAttr(window));
    state.addAttribute("padding", b.getDenseI64ArrayAttr({0, 0}));
    state.addAttribute("ceil_mode", b.getBoolAttr(false));
    state.addAttribute("count_include_pad", b.getBoolAttr(true));
  } else {
    for (const char* a : {"kernel", "stride", "padding", "ceil_mode", "count_include_pad"})
      state.addAttribute(a, p.op->getAttr(a));
  }
  state.addAttribute("dtype", quantize->getAttr("dtype"));
  state.addTypes(quantize.getResult().getType());
  mlir::Operation* folded = b.create(state);
  quantize.getResult().replaceAllUsesWith(folded->getResult(0));
  quantize->erase();
  p.op->erase();
  if (x->use_empty()) x->erase();
  return true;
}

// cat(dequantize(a, s, z), dequantize(b, s, z), ...) -> dequantize(cat(a, b, ...), s, z) when
// every input is the per-tensor dequantize of one dtype with the same constant parameters
// (kiln::quant's prepare gives a cat's inputs one observer): concatenating the bytes.
void sink_cat_below_dequantize(ir::CatOp cat) {
  auto element = [](mlir::Value v) {
    return mlir::cast<mlir::RankedTensorType>(v.getType()).getElementType();
  };
  llvm::SmallVector<mlir::Value> bytes;
  ir::DequantizeOp first;
  for (mlir::Value v : cat->getOperands()) {
    auto dq = v.getDefiningOp<ir::DequantizeOp>();
    if (!dq || rank_of(dq->getOperand(1)) != 0 || !is_int8(dq->getOperand(0))) return;
    if (!first) first = dq;
    if (element(dq->getOperand(0)) != element(first->getOperand(0)) ||
        !same_constants(dq->getOperand(1), first->getOperand(1)) ||
        !same_constants(dq->getOperand(2), first->getOperand(2)))
      return;
    bytes.push_back(dq->getOperand(0));
  }
  if (!first) return;
  auto rt = mlir::cast<mlir::RankedTensorType>(cat.getResult().getType());
  mlir::OpBuilder b(cat);
  mlir::Operation* moved = b.clone(*cat);
  moved->setOperands(bytes);
  moved->getResult(0).setType(
      mlir::RankedTensorType::get(rt.getShape(), element(first->getOperand(0))));
  mlir::Operation* deq = b.clone(*first);
  deq->setOperand(0, moved->getResult(0));
  deq->getResult(0).setType(rt);
  llvm::SmallPtrSet<mlir::Operation*, 4> inputs;  // each dequantize once (cat(x, x))
  for (mlir::Value v : cat->getOperands()) inputs.insert(v.getDefiningOp());
  cat.getResult().replaceAllUsesWith(deq->getResult(0));
  cat->erase();
  for (mlir::Operation* op : inputs)
    if (op->use_empty()) op->erase();
}

// quantize(dequantize(q, s, z), s, z) of q's dtype -> q.
bool fold_requantize(ir::QuantizeOp quantize) {
  auto dq = quantize->getOperand(0).getDefiningOp<ir::DequantizeOp>();
  if (!dq || dq->getOperand(0).getType() != quantize.getResult().getType()) return false;
  if (rank_of(dq->getOperand(1)) != 0 || rank_of(quantize->getOperand(1)) != 0) return false;
  if (!same_constants(dq->getOperand(1), quantize->getOperand(1)) ||
      !same_constants(dq->getOperand(2), quantize->getOperand(2)))
    return false;
  quantize.getResult().replaceAllUsesWith(dq->getOperand(0));
  quantize->erase();
  if (dq->use_empty()) dq->erase();
  return true;
}

struct FoldQuantDequantPass
    : mlir::PassWrapper<FoldQuantDequantPass, mlir::OperationPass<mlir::func::FuncOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(FoldQuantDequantPass)
  llvm::StringRef getArgument() const override { return "kiln-fold-qdq"; }
  llvm::StringRef getDescription() const override {
    return "Fold dequantize -> conv2d/linear/add (-> relu) / average pool -> quantize into "
           "kiln.qconv2d/qlinear/qadd/qavg_pool2d";
  }
  void runOnOperation() override {
    llvm::SmallVector<mlir::Operation*> movers;
    getOperation().walk([&](mlir::Operation* op) {
      if (moves_values_only(op)) movers.push_back(op);
    });
    for (mlir::Operation* op : movers) sink_below_dequantize(op);
    llvm::SmallVector<ir::CatOp> cats;
    getOperation().walk([&](ir::CatOp op) { cats.push_back(op); });
    for (ir::CatOp op : cats) sink_cat_below_dequantize(op);
    llvm::SmallVector<ir::QuantizeOp> quantizes;
    getOperation().walk([&](ir::QuantizeOp op) { quantizes.push_back(op); });
    for (ir::QuantizeOp op : quantizes)
      if (!fold(op) && !fold_add(op) && !fold_avg_pool(op)) fold_requantize(op);
  }
};

}  // namespace

bool moves_values_only(mlir::Operation* op) {
  if (mlir::isa<ir::MaxPool2dOp>(op)) return op->getResult(1).use_empty();
  const llvm::StringRef name = op->getName().getStringRef();
  const ir::OpSchema* schema = ir::find_op_schema({name.data(), name.size()});
  return schema && (schema->traits & ir::kTraitView) && op->getNumOperands() == 1 &&
         op->getNumResults() == 1;
}

bool average_pool_on_bytes(mlir::Operation* op) {
  if (mlir::isa<ir::AvgPool2dOp>(op)) return true;
  auto adaptive = mlir::dyn_cast<ir::AdaptiveAvgPool2dOp>(op);
  return adaptive && uniform_window(adaptive).has_value();
}

std::unique_ptr<mlir::Pass> create_fold_qdq_pass() {
  return std::make_unique<FoldQuantDequantPass>();
}

}  // namespace kiln::passes
