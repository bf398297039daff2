// kiln::quant::prepare / convert (kiln/jit/quantize.h): the policy of post-training int8
// quantization. Which values are observed and how their parameters are chosen is decided here;
// the graph rewrite is --kiln-insert-qdq (passes/InsertQuantDequant.cpp), which reads the plan
// this file writes on the IR, and the integer layers come from --kiln-fold-qdq when the function
// is saved.
//
// Calibration runs a clone of the prepared module whose @forward also returns every observed
// value and every layer's weight, on the reference interpreter (the runtime's kernels).

#include "kiln/jit/quantize.h"

#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "kiln/ir/KilnDialect.h"
#include "kiln/kiln.h"
#include "kiln/passes/Passes.h"
#include "kiln/quant.h"
#include "kiln/quant/observer.h"
#include "kiln/trace/freeze.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "mlir/IR/IRMapping.h"
#include "pipeline.h"
#include "quantize_internal.h"

namespace kiln::quant {
namespace {

constexpr const char* kWho = "kiln::quant";

// A value whose quantization parameters calibration chooses.
struct Point {
  mlir::Value value;
  std::string name;                    // "input of conv2d #3"
  std::shared_ptr<Observer> observer;  // shared by the inputs and output of a cat
};

bool is_f32(mlir::Value v) {
  auto t = mlir::dyn_cast<mlir::RankedTensorType>(v.getType());
  return t && t.getElementType().isF32();
}

// Why a conv2d / linear stays float32 ("" when it can be quantized).
std::string float_reason(mlir::Operation* layer) {
  if (!is_f32(layer->getOperand(0)) || !is_f32(layer->getResult(0)))
    return "its input or result is not float32";
  if (!layer->getOperand(1).getDefiningOp<ir::ConstantOp>() || !is_f32(layer->getOperand(1)))
    return "its weight is not a float32 constant";
  mlir::Value bias = layer->getOperand(2);
  if (!mlir::isa<mlir::NoneType>(bias.getType()) && !bias.getDefiningOp<ir::ConstantOp>())
    return "its bias is not a constant";
  return "";
}

// A relu, or a clamp from 0 (ReLU6): observed after it, the layer's output range starts at 0 and
// --kiln-fold-qdq folds it into the integer layer (a ReLU6 whose observed range stays within 6
// saturates at the top in the quantizer itself).
bool relu_like(mlir::Operation* op) {
  if (mlir::isa<ir::ReluOp>(op)) return true;
  auto clamp = mlir::dyn_cast<ir::ClampOp>(op);
  return clamp && clamp.getMin().convertToDouble() == 0.0;
}

// The value a layer's input is a reshape (or chain of reshapes) of: --kiln-fold-qdq moves
// reshapes above a dequantize, so observing the source is enough.
mlir::Value reshape_source(mlir::Value v) {
  while (mlir::Operation* op = v.getDefiningOp()) {
    if (!mlir::isa<ir::ReshapeOp, ir::ViewOp>(op)) break;
    v = op->getOperand(0);
  }
  return v;
}

// Where --kiln-insert-qdq can put a quantize after `v`: an argument of @forward or an op's first
// result (max_pool2d's values) in @forward's body, not inside a loop or branch (whose values the
// calibration module cannot return).
bool can_observe(mlir::Value v, mlir::Block* body) {
  if (auto arg = mlir::dyn_cast<mlir::BlockArgument>(v)) return arg.getOwner() == body && is_f32(v);
  mlir::Operation* op = v.getDefiningOp();
  return op && op->getBlock() == body && op->getResult(0) == v && is_f32(v);
}

std::unique_ptr<Observer> make_observer(const QConfig& c) {
  ObserverOptions o;
  o.dtype = c.activation_dtype;
  o.qscheme = c.symmetric_activations ? QScheme::PerTensorSymmetric : QScheme::PerTensorAffine;
  o.percentile = c.percentile;
  switch (c.calibration) {
    case Calibration::MinMax:
      return std::make_unique<MinMaxObserver>(o);
    case Calibration::MovingAverageMinMax:
      return std::make_unique<MovingAverageMinMaxObserver>(o);
    case Calibration::Percentile:
      return std::make_unique<PercentileObserver>(o);
  }
  fail(kWho, "unknown calibration method");
}

bool all_finite(const Tensor& t) {
  const Tensor c = t.contiguous();
  const float* p = c.data_ptr<float>();
  for (int64_t i = 0, n = c.numel(); i < n; ++i)
    if (!std::isfinite(p[i])) return false;
  return true;
}

mlir::DictionaryAttr activation_attr(mlir::Builder& b, const QParams& qp) {
  return b.getDictionaryAttr(
      {b.getNamedAttr("scale", b.getF32FloatAttr(qp.scale.item<float>())),
       b.getNamedAttr("zero_point", b.getI64IntegerAttr(qp.zero_point.item<int64_t>())),
       b.getNamedAttr("dtype", b.getI64IntegerAttr(static_cast<int64_t>(qp.dtype)))});
}

}  // namespace

namespace detail {

std::string location_of(mlir::Operation* op) {
  std::string s;
  llvm::raw_string_ostream os(s);
  op->getLoc().print(os);
  return s;
}

Dims shape_of(mlir::Value v) {
  auto t = mlir::cast<mlir::RankedTensorType>(v.getType());
  return Dims(std::vector<int64_t>(t.getShape().begin(), t.getShape().end()));
}

// kiln.qweight for a float32 weight: int8, symmetric, per output channel or per tensor.
mlir::DictionaryAttr weight_attr(mlir::Builder& b, const Tensor& w, bool per_channel) {
  ObserverOptions o;
  o.dtype = DType::Int8;
  std::unique_ptr<Observer> observer;
  if (per_channel) {
    o.qscheme = QScheme::PerChannelSymmetric;
    observer = std::make_unique<PerChannelMinMaxObserver>(o);
  } else {
    o.qscheme = QScheme::PerTensorSymmetric;
    observer = std::make_unique<MinMaxObserver>(o);
  }
  (*observer)(w);
  const QParams qp = observer->calculate_qparams();
  const Tensor q = (per_channel ? quantize_per_channel(w, qp.scale, qp.zero_point, 0, DType::Int8)
                                : quantize_per_tensor(w, qp.scale.item<double>(), 0, DType::Int8))
                       .contiguous();
  const Dims& sizes = w.sizes();
  auto value_type = mlir::RankedTensorType::get(llvm::ArrayRef<int64_t>(sizes.data(), sizes.size()),
                                                b.getIntegerType(8));
  llvm::ArrayRef<int8_t> bytes(q.data_ptr<int8_t>(), static_cast<size_t>(q.numel()));
  auto value = mlir::DenseResourceElementsAttr::get(
      value_type, "qweight", mlir::HeapAsmResourceBlob::allocateAndCopyInferAlign<int8_t>(bytes));
  const Tensor s = qp.scale.contiguous();
  std::vector<float> scales(s.data_ptr<float>(), s.data_ptr<float>() + s.numel());
  llvm::SmallVector<int64_t, 1> scale_shape;
  if (per_channel) scale_shape.push_back(static_cast<int64_t>(scales.size()));
  auto scale_type = mlir::RankedTensorType::get(scale_shape, b.getF32Type());
  auto zp_type = mlir::RankedTensorType::get(scale_shape, b.getI32Type());
  return b.getDictionaryAttr(
      {b.getNamedAttr("value", value),
       b.getNamedAttr("scale", mlir::DenseElementsAttr::get(scale_type, llvm::ArrayRef(scales))),
       b.getNamedAttr("zero_point", mlir::DenseElementsAttr::get(zp_type, int32_t{0}))});
}

mlir::func::FuncOp forward_of(mlir::ModuleOp module) {
  auto f = module.lookupSymbol<mlir::func::FuncOp>("forward");
  KILN_CHECK(f, kWho, "the traced module has no @forward");
  return f;
}

void freeze_for_quantization(jit::TracedFunction& fn, const char* who) {
  KILN_CHECK(fn.mutated_captures().empty(), who, "the traced function writes ",
             fn.mutated_captures().size(),
             " captured tensors (a training step); only an inference function can be quantized");
  if (!fn.captures().empty()) jit::freeze(fn);
  const std::string err = jit::run_pipeline(fn.context(), fn.module(), [](mlir::OpPassManager& pm) {
    pm.addNestedPass<mlir::func::FuncOp>(passes::create_freeze_pass());
    pm.addNestedPass<mlir::func::FuncOp>(passes::create_cleanup_pass());
    pm.addPass(passes::create_eliminate_gradients_pass(false, /*eval_mode=*/true));
    pm.addNestedPass<mlir::func::FuncOp>(passes::create_cleanup_pass());
    pm.addNestedPass<mlir::func::FuncOp>(passes::create_fold_batch_norm_pass());
  });
  KILN_CHECK(err.empty(), who, "folding batch norm: ", err);
}

jit::TracedFunction trace_for_quantization(nn::Module& module, const TensorList& example_inputs) {
  struct ModeGuard {  // restores the module's mode also when tracing throws
    nn::Module& m;
    bool training = m.is_training();
    ~ModeGuard() { m.train(training); }
  } guard{module};
  module.eval();
  autograd::NoGradGuard no_grad;
  return jit::trace(module, example_inputs);
}

}  // namespace detail

using detail::forward_of;
using detail::location_of;
using detail::shape_of;
using detail::weight_attr;

struct Prepared::Impl {
  jit::TracedFunction fn;
  QConfig config;
  std::vector<LayerReport> layers;
  std::vector<mlir::Operation*> quantized;  // the layers that become integer layers
  std::vector<Point> points;
  // @forward with every point and weight returned too; its point values and layers.
  mlir::OwningOpRef<mlir::ModuleOp> calibration;
  std::vector<mlir::Value> calibration_points;
  std::vector<mlir::Operation*> calibration_layers;
  size_t num_outputs = 0;
  TensorList weights;  // per quantized layer, read by the first batch
  // kiln.qweight per quantized layer, made once: each holds an int8 blob the context keeps until
  // it goes, so compare() and convert() share them.
  std::vector<mlir::DictionaryAttr> qweights;
  int64_t batches = 0;
};

Prepared::Prepared(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

const Prepared::Impl& Prepared::impl(const char* who) const {
  KILN_CHECK(impl_, who, "this Prepared was moved from (convert() takes it)");
  return *impl_;
}
Prepared::Prepared(Prepared&&) noexcept = default;
Prepared& Prepared::operator=(Prepared&&) noexcept = default;
Prepared::~Prepared() = default;

Prepared prepare(jit::TracedFunction fn, const QConfig& config) {
  KILN_CHECK(config.activation_dtype == DType::UInt8 || config.activation_dtype == DType::Int8,
             "kiln::quant::prepare", "activation_dtype: expected uint8 or int8, got ",
             config.activation_dtype);
  detail::freeze_for_quantization(fn, "kiln::quant::prepare");

  auto impl = std::make_unique<Prepared::Impl>();
  impl->config = config;
  mlir::func::FuncOp forward = forward_of(fn.module());
  impl->num_outputs = forward.getFunctionType().getNumResults();
  std::map<const void*, size_t> point_of;  // mlir::Value's opaque pointer -> its point
  auto observe = [&](mlir::Value v, const std::string& name) {
    auto [it, fresh] = point_of.try_emplace(v.getAsOpaquePointer(), impl->points.size());
    if (fresh) impl->points.push_back({v, name, make_observer(config)});
  };
  int64_t index = 0;
  forward.walk([&](mlir::Operation* op) {
    if (!mlir::isa<ir::Conv2dOp, ir::LinearOp>(op)) return;
    LayerReport r;
    r.op = mlir::isa<ir::Conv2dOp>(op) ? "conv2d" : "linear";
    r.index = index++;
    r.location = location_of(op);
    r.weight_shape = shape_of(op->getOperand(1));
    r.reason =
        op->getBlock() == &forward.front() ? float_reason(op) : "it is inside a loop or a branch";
    mlir::Value input = reshape_source(op->getOperand(0));
    mlir::Value output = op->getResult(0);
    if (output.hasOneUse() && relu_like(*output.getUsers().begin()))
      output = output.getUsers().begin()->getResult(0);
    if (r.reason.empty() &&
        (!can_observe(input, &forward.front()) || !can_observe(output, &forward.front())))
      r.reason = "its input or output is not the first result of an op in @forward's body";
    r.quantized = r.reason.empty();
    if (r.quantized) {
      const std::string layer = r.op + " #" + std::to_string(r.index);
      observe(input, "input of " + layer);
      observe(output, "output of " + layer);
      impl->quantized.push_back(op);
    }
    impl->layers.push_back(std::move(r));
  });
  // A same-shape add of two observed values (a residual connection) gets its output (after a
  // relu it alone feeds) observed too, so --kiln-fold-qdq makes it a kiln.qadd on the bytes.
  forward.walk([&](ir::AddOp add) {
    mlir::Value a = add->getOperand(0), b = add->getOperand(1);
    if (!point_of.count(a.getAsOpaquePointer()) || !point_of.count(b.getAsOpaquePointer()) ||
        a.getType() != add.getResult().getType() || b.getType() != a.getType())
      return;
    mlir::Value output = add.getResult();
    if (output.hasOneUse() && relu_like(*output.getUsers().begin()))
      output = output.getUsers().begin()->getResult(0);
    if (can_observe(output, &forward.front())) observe(output, "output of a residual add");
  });
  // A cat of observed values gets its output observed, and its inputs and output share one
  // observer (TFLite's rule for concatenation): one scale and zero point for all of them, so
  // --kiln-fold-qdq concatenates the bytes as they are.
  forward.walk([&](ir::CatOp cat) {
    if (cat->getNumOperands() == 0 || !can_observe(cat.getResult(), &forward.front())) return;
    for (mlir::Value v : cat->getOperands())
      if (!point_of.count(v.getAsOpaquePointer())) return;
    observe(cat.getResult(), "output of a cat");
    std::set<const Observer*> merged;
    for (mlir::Value v : cat->getOperands())
      merged.insert(impl->points[point_of[v.getAsOpaquePointer()]].observer.get());
    const std::shared_ptr<Observer> shared =
        impl->points[point_of[cat.getResult().getAsOpaquePointer()]].observer;
    for (Point& p : impl->points)  // every point holding a merged observer, transitively
      if (merged.count(p.observer.get())) p.observer = shared;
  });

  // The calibration module: @forward returns its outputs, then each point, then each weight.
  mlir::IRMapping map;
  impl->calibration = mlir::cast<mlir::ModuleOp>(fn.module()->clone(map));
  mlir::func::FuncOp cf = forward_of(*impl->calibration);
  mlir::Operation* ret = cf.getBody().back().getTerminator();
  llvm::SmallVector<mlir::Value> results(ret->getOperands());
  for (const Point& p : impl->points) {
    impl->calibration_points.push_back(map.lookup(p.value));
    results.push_back(impl->calibration_points.back());
  }
  for (mlir::Operation* layer : impl->quantized) {
    impl->calibration_layers.push_back(map.lookup(layer));
    results.push_back(map.lookup(layer->getOperand(1)));
  }
  ret->setOperands(results);
  cf.setType(mlir::FunctionType::get(cf.getContext(), cf.getArgumentTypes(),
                                     mlir::ValueRange(results).getTypes()));
  impl->fn = std::move(fn);
  return Prepared(std::move(impl));
}

Prepared prepare(nn::Module& module, const TensorList& example_inputs, const QConfig& config) {
  return prepare(detail::trace_for_quantization(module, example_inputs), config);
}

void Prepared::calibrate_checks(const TensorList& inputs, const char* who) const {
  const Impl& m = impl(who);
  const auto& guards = m.fn.guards();
  KILN_CHECK(inputs.size() == m.fn.num_inputs(), who, "expected ", m.fn.num_inputs(),
             " inputs, got ", inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    KILN_CHECK(inputs[i].defined(), who, "input ", i, " is undefined");
    if (i >= guards.size()) continue;
    KILN_CHECK(inputs[i].sizes() == guards[i].sizes && inputs[i].dtype() == guards[i].dtype, who,
               "input ", i, " ('", guards[i].name, "'): expected shape ", guards[i].sizes, " ",
               guards[i].dtype, " (the traced input), got ", inputs[i].sizes(), " ",
               inputs[i].dtype());
  }
}

void Prepared::calibrate(const TensorList& inputs) {
  calibrate_checks(inputs, "kiln::quant::calibrate");
  Impl& m = *impl_;
  const TensorList out = jit::interpret(*m.calibration, inputs);
  for (size_t k = 0; k < m.points.size(); ++k) {
    const Tensor& t = out[m.num_outputs + k];
    KILN_CHECK(all_finite(t), "kiln::quant::calibrate", "the observer of the ", m.points[k].name,
               " saw NaN or Inf (calibration batch ", m.batches, ")");
    (*m.points[k].observer)(t);
  }
  if (m.batches == 0) {
    const size_t first = m.num_outputs + m.points.size();
    m.weights.assign(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
  }
  ++m.batches;
}

int64_t Prepared::num_batches() const {
  return impl("kiln::quant::Prepared").batches;
}
const std::vector<LayerReport>& Prepared::layers() const {
  return impl("kiln::quant::Prepared").layers;
}

std::vector<std::string> Prepared::float_ops() const {
  impl("kiln::quant::Prepared");
  std::map<std::string, int64_t> count;
  auto quantized = [&](mlir::Operation* op) {
    return std::find(impl_->quantized.begin(), impl_->quantized.end(), op) !=
           impl_->quantized.end();
  };
  std::set<const void*> observed;
  for (const Point& p : impl_->points) observed.insert(p.value.getAsOpaquePointer());
  auto is_observed = [&](mlir::Value v) { return observed.count(v.getAsOpaquePointer()) > 0; };
  // What --kiln-fold-qdq runs on the bytes: ops that only move values (moves_values_only), an
  // average pool whose output is observed (kiln.qavg_pool2d), and an add of observed values
  // whose output (after a relu it alone feeds) is observed (kiln.qadd).
  auto on_bytes = [&](mlir::Operation* op) {
    if (passes::moves_values_only(op)) return true;
    if (passes::average_pool_on_bytes(op)) return is_observed(op->getResult(0));
    if (mlir::isa<ir::CatOp>(op))
      return is_observed(op->getResult(0)) &&
             llvm::all_of(op->getOperands(), [&](mlir::Value v) { return is_observed(v); });
    if (!mlir::isa<ir::AddOp>(op) || !is_observed(op->getOperand(0)) ||
        !is_observed(op->getOperand(1)))
      return false;
    mlir::Value out = op->getResult(0);
    if (out.hasOneUse() && relu_like(*out.getUsers().begin()))
      out = out.getUsers().begin()->getResult(0);
    return is_observed(out);
  };
  for (const Point& p : impl_->points) {
    for (mlir::Operation* user : p.value.getUsers()) {
      if (quantized(user) || relu_like(user) || on_bytes(user) ||
          mlir::isa<mlir::func::ReturnOp>(user))
        continue;
      ++count[user->getName().getStringRef().str()];
    }
  }
  std::vector<std::string> out;
  for (const auto& [name, n] : count) out.push_back(name + " x" + std::to_string(n));
  return out;
}

std::string Prepared::report() const {
  impl("kiln::quant::Prepared");
  std::ostringstream os;
  int64_t n = 0;
  for (const LayerReport& r : impl_->layers) n += r.quantized;
  os << n << " of " << impl_->layers.size() << " conv2d/linear layers int8 (" << impl_->batches
     << " calibration batches)\n";
  for (const LayerReport& r : impl_->layers) {
    os << "  " << r.op << " #" << r.index << " " << r.weight_shape << ": "
       << (r.quantized ? "int8" : "float32, " + r.reason) << "\n";
  }
  const std::vector<std::string> ops = float_ops();
  if (!ops.empty()) {
    os << "float32 between dequantize and quantize:";
    for (const std::string& s : ops) os << " " << s;
    os << "\n";
  }
  return os.str();
}

namespace {

// Writes the plan (kiln.qparams at `points`, kiln.qweight on `layers`) into `module` and runs
// --kiln-insert-qdq on it; `points` and `layers` are module's values and ops for m's.
void write_plan(Prepared::Impl& m, mlir::ModuleOp module, llvm::ArrayRef<mlir::Value> points,
                llvm::ArrayRef<mlir::Operation*> layers, bool cleanup, const char* who) {
  KILN_CHECK(m.batches > 0, who, "no calibration batch was run (call Prepared::calibrate first)");
  mlir::func::FuncOp forward = forward_of(module);
  mlir::Builder b(forward.getContext());
  for (size_t k = 0; k < points.size(); ++k) {
    const mlir::DictionaryAttr attr = activation_attr(b, m.points[k].observer->calculate_qparams());
    if (auto arg = mlir::dyn_cast<mlir::BlockArgument>(points[k]))
      forward.setArgAttr(arg.getArgNumber(), "kiln.qparams", attr);
    else
      points[k].getDefiningOp()->setAttr("kiln.qparams", attr);
  }
  if (m.qweights.empty())
    for (const Tensor& w : m.weights)
      m.qweights.push_back(weight_attr(b, w, m.config.per_channel_weights));
  for (size_t k = 0; k < layers.size(); ++k) layers[k]->setAttr("kiln.qweight", m.qweights[k]);
  const std::string err = jit::run_pipeline(m.fn.context(), module, [&](mlir::OpPassManager& pm) {
    pm.addNestedPass<mlir::func::FuncOp>(passes::create_insert_qdq_pass());
    if (cleanup) pm.addNestedPass<mlir::func::FuncOp>(passes::create_cleanup_pass());
  });
  KILN_CHECK(err.empty(), who, "inserting quantize/dequantize: ", err);
}

}  // namespace

std::vector<PointError> Prepared::compare(const TensorList& inputs) const {
  impl("kiln::quant::compare");
  Impl& m = *impl_;
  // The calibration module returns each point's float value; a copy with the plan written in
  // returns each point's dequantized value instead (insert-qdq redirects the return's reads).
  mlir::IRMapping map;
  mlir::OwningOpRef<mlir::ModuleOp> quantized =
      mlir::cast<mlir::ModuleOp>(m.calibration.get()->clone(map));
  std::vector<mlir::Value> points;
  std::vector<mlir::Operation*> layers;
  for (mlir::Value v : m.calibration_points) points.push_back(map.lookup(v));
  for (mlir::Operation* op : m.calibration_layers) layers.push_back(map.lookup(op));
  write_plan(m, *quantized, points, layers, /*cleanup=*/false, "kiln::quant::compare");
  calibrate_checks(inputs, "kiln::quant::compare");
  const TensorList reference = jit::interpret(m.calibration.get(), inputs);
  const TensorList test = jit::interpret(*quantized, inputs);
  std::vector<PointError> out;
  for (size_t i = 0; i < m.num_outputs; ++i)
    out.push_back({"output " + std::to_string(i), Sqnr{}.add(reference[i], test[i])});
  for (size_t k = 0; k < m.points.size(); ++k) {
    const size_t i = m.num_outputs + k;
    out.push_back({m.points[k].name, Sqnr{}.add(reference[i], test[i])});
  }
  return out;
}

std::vector<PointError> Prepared::compare(const std::vector<TensorList>& batches) const {
  std::vector<PointError> total;
  for (const TensorList& inputs : batches) {
    std::vector<PointError> e = compare(inputs);
    if (total.empty()) {
      total = std::move(e);
      continue;
    }
    for (size_t i = 0; i < e.size(); ++i) total[i].sqnr += e[i].sqnr;
  }
  return total;
}

jit::TracedFunction convert(Prepared prepared) {
  prepared.impl("kiln::quant::convert");
  Prepared::Impl& m = *prepared.impl_;
  std::vector<mlir::Value> points;
  for (const Point& p : m.points) points.push_back(p.value);
  write_plan(m, m.fn.module(), points, m.quantized, /*cleanup=*/true, "kiln::quant::convert");
  m.calibration = {};
  return std::move(m.fn);
}

}  // namespace kiln::quant
