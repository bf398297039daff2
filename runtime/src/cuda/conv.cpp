// Convolutions on CUDA through cuDNN 9's graph API (see kiln/runtime/cuda/nn.h): each shape is an
// operation graph of one convolution (forward, backward-data or backward-filter), cuDNN's
// heuristic proposes engine configurations, the ones that finalize into execution plans are
// kept, and a large convolution times them once on its first call (as PyTorch's
// cudnn.benchmark does) and keeps the fastest. Bias and ReLU follow as one generated pointwise
// kernel; cuDNN's fused conv + bias + activation graphs need engines that fp32 NCHW lacks.
#if KILN_HAVE_CUDA
#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "api.h"
#include "kiln/runtime/cuda/cuda.h"
#include "kiln/runtime/cuda/eager.h"
#include "kiln/runtime/cuda/nn.h"
#include "kiln/runtime/cuda/pointwise.h"
#include "kiln/runtime/error.h"
#include "kiln/runtime/views.h"
#include "scratch.h"

namespace kiln::cuda {

ConvOptions& conv_options() {
  static ConvOptions options;
  return options;
}

#if !KILN_HAVE_CUDNN
std::string cudnn_version() {
  fail("cudnn", "kiln was built without cuDNN's headers (cudnn_graph.h)");
}
void conv2d_out(const TensorImpl&, const TensorImpl&, const TensorImpl*,
                const kernels::Conv2dParams&, bool, TensorImpl&) {
  fail("conv2d", "kiln was built without cuDNN's headers (cudnn_graph.h)");
}
void conv2d_backward_out(const TensorImpl&, const TensorImpl&, const TensorImpl&,
                         const kernels::Conv2dParams&, TensorImpl*, TensorImpl*, TensorImpl*) {
  fail("conv2d_backward", "kiln was built without cuDNN's headers (cudnn_graph.h)");
}
#else

// The handle and operation graph attributes below are deprecated in cuDNN 9.19 in favour of a
// device-properties descriptor that older cuDNN 9 releases lack; they still work in both.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace {

enum class ConvKind { Forward = 0, BackwardData = 1, BackwardFilter = 2 };

const char* kind_name(ConvKind k) {
  switch (k) {
    case ConvKind::Forward:
      return "conv2d";
    case ConvKind::BackwardData:
      return "conv2d_backward (input)";
    case ConvKind::BackwardFilter:
      return "conv2d_backward (weight)";
  }
  return "conv2d";
}

// An owned backend descriptor.
class Descriptor {
 public:
  Descriptor() = default;
  Descriptor(cudnnBackendDescriptorType_t type, std::string_view op) {
    api::check(api::cudnn(op).cudnnBackendCreateDescriptor(type, &d_), op,
               "cudnnBackendCreateDescriptor");
  }
  ~Descriptor() {
    if (d_) api::cudnn("cudnn").cudnnBackendDestroyDescriptor(d_);
  }
  Descriptor(Descriptor&& o) noexcept : d_(o.d_) { o.d_ = nullptr; }
  Descriptor& operator=(Descriptor&& o) noexcept {
    std::swap(d_, o.d_);
    return *this;
  }
  cudnnBackendDescriptor_t get() const { return d_; }
  // Sets an attribute of `count` values of `type`.
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
           const void* values, std::string_view op) {
    api::check(api::cudnn(op).cudnnBackendSetAttribute(d_, name, type, count, values), op,
               "cudnnBackendSetAttribute");
  }
  void finalize(std::string_view op) {
    api::check(api::cudnn(op).cudnnBackendFinalize(d_), op, "cudnnBackendFinalize");
  }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

struct Handle {
  cudnnHandle_t handle = nullptr;
};
cudnnHandle_t handle(std::string_view op) {
  static Handle* h = [op] {
    api::driver(op);         // the context current on this thread
    auto* h = new Handle();  // process lifetime, like the device allocator
    api::check(api::cudnn(op).cudnnCreate(&h->handle), op, "cudnnCreate");
    return h;
  }();
  api::make_context_current(op);
  return h->handle;
}

constexpr int64_t kUidX = 'x', kUidW = 'w', kUidY = 'y';

// The largest power of two up to 16 that divides the address: what cuDNN's vectorized engines
// may assume.
int64_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  int64_t align = 16;
  while (align > 4 && a % align != 0) align /= 2;
  return align;
}

struct PlanKey {
  ConvKind kind;
  std::array<int64_t, 4> x, w, y;
  std::array<int64_t, 6> params;  // stride, padding, dilation (h, w)
  std::array<int64_t, 3> align;
  bool tf32;
  bool operator==(const PlanKey&) const = default;
};
struct PlanKeyHash {
  size_t operator()(const PlanKey& k) const {
    size_t h = static_cast<size_t>(k.kind) * 31 + k.tf32;
    auto mix = [&h](int64_t v) { h = h * 1000003u ^ std::hash<int64_t>()(v); };
    for (int64_t v : k.x) mix(v);
    for (int64_t v : k.w) mix(v);
    for (int64_t v : k.y) mix(v);
    for (int64_t v : k.params) mix(v);
    for (int64_t v : k.align) mix(v);
    return h;
  }
};

struct Candidate {
  Descriptor plan;
  int64_t workspace = 0;
};
struct Plan {
  std::vector<Candidate> candidates;  // the heuristic's order; the chosen one first once tuned
  bool tuned = false;
  // The descriptors the plans were made from (tensors, convolution, operation, graph, heuristic,
  // engine configurations), kept as long as the plans: cuDNN's own frontend keeps them alive.
  std::vector<Descriptor> sources;
};

Descriptor tensor(std::span<const int64_t> dims, int64_t uid, int64_t align, std::string_view op) {
  Descriptor t(CUDNN_BACKEND_TENSOR_DESCRIPTOR, op);
  const int64_t strides[4] = {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1};
  const cudnnDataType_t dtype = CUDNN_DATA_FLOAT;
  t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dtype, op);
  t.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data(), op);
  t.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides, op);
  t.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, op);
  t.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, op);
  t.finalize(op);
  return t;
}

// Whether to leave out an engine configuration by its numerical notes, as PyTorch does: engines
// that convert float32 inputs down (to fp16/bf16) always, tensor-core (TF32) engines when TF32 is
// not allowed.
bool excluded(cudnnBackendDescriptor_t config, bool tf32, std::string_view op) {
  const api::Cudnn& lib = api::cudnn(op);
  Descriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR, op);
  cudnnBackendDescriptor_t e = engine.get();
  int64_t n = 0;
  api::check(lib.cudnnBackendGetAttribute(config, CUDNN_ATTR_ENGINECFG_ENGINE,
                                          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &e),
             op, "cudnnBackendGetAttribute (engine)");
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  api::check(
      lib.cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                   CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes),
      op, "cudnnBackendGetAttribute (numerical notes)");
  for (int64_t i = 0; i < n; ++i) {
    if (notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS) return true;
    if (!tf32 && notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE) return true;
  }
  return false;
}

// The execution plans cuDNN's heuristic `mode` proposes for `graph` that finalize here.
void add_candidates(cudnnBackendDescriptor_t graph, cudnnBackendHeurMode_t mode, bool tf32,
                    cudnnHandle_t h, Plan& plan, std::string_view op) {
  std::vector<Candidate>& out = plan.candidates;
  constexpr size_t kMaxCandidates = 8;
  const api::Cudnn& lib = api::cudnn(op);
  Descriptor heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, op);
  heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph, op);
  heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, op);
  if (lib.cudnnBackendFinalize(heur.get()) != CUDNN_STATUS_SUCCESS) return;
  cudnnBackendDescriptor_t heur_raw = heur.get();
  plan.sources.push_back(std::move(heur));
  int64_t count = 0;
  if (lib.cudnnBackendGetAttribute(heur_raw, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                   nullptr) != CUDNN_STATUS_SUCCESS ||
      count <= 0) {
    return;
  }
  std::vector<Descriptor> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, op);
    raw.push_back(configs.back().get());
  }
  int64_t got = 0;
  api::check(lib.cudnnBackendGetAttribute(heur_raw, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                          CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, raw.data()),
             op, "cudnnBackendGetAttribute (heuristic results)");
  for (Descriptor& c : configs) plan.sources.push_back(std::move(c));
  for (int64_t i = 0; i < got && out.size() < kMaxCandidates; ++i) {
    if (excluded(raw[i], tf32, op)) continue;
    Candidate c;
    c.plan = Descriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, op);
    c.plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, op);
    c.plan.set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw[i],
               op);
    if (lib.cudnnBackendFinalize(c.plan.get()) != CUDNN_STATUS_SUCCESS) continue;
    int64_t n = 0;
    api::check(lib.cudnnBackendGetAttribute(c.plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                            CUDNN_TYPE_INT64, 1, &n, &c.workspace),
               op, "cudnnBackendGetAttribute (workspace size)");
    out.push_back(std::move(c));
  }
}

void build(const PlanKey& key, cudnnHandle_t h, Plan& plan) {
  const std::string_view op = kind_name(key.kind);
  Descriptor x = tensor(key.x, kUidX, key.align[0], op);
  Descriptor w = tensor(key.w, kUidW, key.align[1], op);
  Descriptor y = tensor(key.y, kUidY, key.align[2], op);

  Descriptor conv(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, op);
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t spatial = 2;
  const int64_t* stride = &key.params[0];
  const int64_t* pad = &key.params[2];
  const int64_t* dilation = &key.params[4];
  conv.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute, op);
  conv.set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode, op);
  conv.set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial, op);
  conv.set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dilation, op);
  conv.set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, stride, op);
  conv.set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad, op);
  conv.set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad, op);
  conv.finalize(op);

  // Groups are implied: the weight's input channels are the input's divided by the groups.
  const float alpha = 1.0f, beta = 0.0f;
  cudnnBackendDescriptor_t xd = x.get(), wd = w.get(), yd = y.get(), cd = conv.get();
  // The operation's descriptor type and its attributes for the activation (x or dx), the weight
  // (w or dw), the output side (y or dy), the convolution, alpha and beta.
  struct OperationAttributes {
    cudnnBackendDescriptorType_t type;
    cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
  };
  static constexpr OperationAttributes kAttributes[] = {
      {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
      {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
      {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA},
  };
  const OperationAttributes& at = kAttributes[static_cast<int>(key.kind)];
  Descriptor operation(at.type, op);
  operation.set(at.x, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &xd, op);
  operation.set(at.w, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &wd, op);
  operation.set(at.y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &yd, op);
  operation.set(at.conv, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd, op);
  operation.set(at.alpha, CUDNN_TYPE_FLOAT, 1, &alpha, op);
  operation.set(at.beta, CUDNN_TYPE_FLOAT, 1, &beta, op);
  operation.finalize(op);

  Descriptor graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, op);
  cudnnBackendDescriptor_t od = operation.get();
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, op);
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &od, op);
  graph.finalize(op);

  add_candidates(graph.get(), CUDNN_HEUR_MODE_A, key.tf32, h, plan, op);
  if (plan.candidates.empty()) {
    add_candidates(graph.get(), CUDNN_HEUR_MODE_FALLBACK, key.tf32, h, plan, op);
  }
  for (Descriptor* d : {&x, &w, &y, &conv, &operation, &graph}) {
    plan.sources.push_back(std::move(*d));
  }
  KILN_CHECK(!plan.candidates.empty(), op, "cuDNN has no engine for input [", key.x[0], ", ",
             key.x[1], ", ", key.x[2], ", ", key.x[3], "], weight [", key.w[0], ", ", key.w[1],
             ", ", key.w[2], ", ", key.w[3], "] float32", key.tf32 ? "" : " without TF32");
}

std::mutex& plans_mutex() {
  static std::mutex m;
  return m;
}

Plan& plan_for(const PlanKey& key, cudnnHandle_t h) {
  static auto* plans = new std::unordered_map<PlanKey, Plan, PlanKeyHash>();
  auto [it, inserted] = plans->try_emplace(key);
  if (!inserted) return it->second;
  try {
    build(key, h, it->second);
  } catch (...) {
    plans->erase(it);
    throw;
  }
  return it->second;
}

// Runs one candidate; false where cuDNN refuses it at execution.
bool execute(const Candidate& c, cudnnHandle_t h, void* x, void* w, void* y, StreamId stream,
             std::string_view op) {
  const api::Cudnn& lib = api::cudnn(op);
  const Scratch workspace(static_cast<size_t>(c.workspace), stream);
  Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, op);
  const int64_t uids[3] = {kUidX, kUidW, kUidY};
  void* ptrs[3] = {x, w, y};
  void* ws = workspace.address();
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids, op);
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs, op);
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws, op);
  pack.finalize(op);
  return lib.cudnnBackendExecute(h, c.plan.get(), pack.get()) == CUDNN_STATUS_SUCCESS;
}

// A convolution of `flops` multiply-adds or more times its candidates on its first call: cuDNN's
// heuristic first pick is not always the fastest, and one timing pass per shape is cheap next
// to a training run. Smaller ones keep the heuristic's order.
constexpr double kTuneAboveFlops = 2e8;

void run(ConvKind kind, const TensorImpl& x, const TensorImpl& w, const TensorImpl& y,
         const kernels::Conv2dParams& p, double flops) {
  const std::string_view op = kind_name(kind);
  const StreamId stream = current_stream();
  cudnnHandle_t h = handle(op);
  const api::Cudnn& lib = api::cudnn(op);
  api::check(lib.cudnnSetStream(h, reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(stream))),
             op, "cudnnSetStream");
  PlanKey key{};
  key.kind = kind;
  for (int d = 0; d < 4; ++d) {
    key.x[d] = x.sizes()[d];
    key.w[d] = w.sizes()[d];
    key.y[d] = y.sizes()[d];
  }
  key.params = {p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dilation_h, p.dilation_w};
  key.align = {alignment_of(x.raw_data()), alignment_of(w.raw_data()), alignment_of(y.raw_data())};
  key.tf32 = conv_options().allow_tf32;
  std::lock_guard lock(plans_mutex());
  Plan& plan = plan_for(key, h);
  if (!plan.tuned) {
    plan.tuned = true;
    if (plan.candidates.size() > 1 && flops >= kTuneAboveFlops) {
      Event start, end;
      float best = INFINITY;
      size_t best_index = 0;
      for (size_t i = 0; i < plan.candidates.size(); ++i) {
        float ms = INFINITY;
        for (int rep = 0; rep < 2; ++rep) {  // the first run warms the engine up
          start.record(stream);
          const bool ok =
              execute(plan.candidates[i], h, x.raw_data(), w.raw_data(), y.raw_data(), stream, op);
          end.record(stream);
          end.synchronize();
          if (!ok) break;
          if (rep > 0) ms = start.elapsed_ms(end);
        }
        if (ms < best) {
          best = ms;
          best_index = i;
        }
      }
      std::swap(plan.candidates[0], plan.candidates[best_index]);
    }
  }
  for (const Candidate& c : plan.candidates) {
    if (execute(c, h, x.raw_data(), w.raw_data(), y.raw_data(), stream, op)) return;
  }
  char message[512] = {};
  lib.cudnnGetLastErrorString(message, sizeof message);
  fail(op, "cuDNN refused every execution plan for input ", describe(x), ", weight ", describe(w),
       ": ", message);
}

void check_float32_on_device(std::string_view op, const TensorImpl& t, const char* what) {
  KILN_CHECK(t.device() == Device::CUDA, op, "expected ", what, " on cuda, got ", describe(t),
             " on ", device_name(t.device()));
  KILN_CHECK(t.dtype() == DType::Float32, op, "the CUDA backend runs float32 only so far, got ",
             what, " ", describe(t));
}

double multiply_adds(const TensorImpl& y, const TensorImpl& w) {
  return static_cast<double>(y.numel()) * static_cast<double>(w.numel() / w.sizes()[0]);
}

}  // namespace

std::string cudnn_version() {
  const size_t v = api::cudnn("cudnn").cudnnGetVersion();  // 91400 = 9.14.0
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

void conv2d_out(const TensorImpl& input, const TensorImpl& weight, const TensorImpl* bias,
                const kernels::Conv2dParams& p, bool relu, TensorImpl& out) {
  constexpr std::string_view op = "conv2d";
  check_float32_on_device(op, input, "input");
  check_float32_on_device(op, weight, "weight");
  check_float32_on_device(op, out, "out");
  if (bias) check_float32_on_device(op, *bias, "bias");
  if (out.numel() == 0) return;
  ContiguousOutput y(out);
  if (input.numel() == 0 || weight.numel() == 0) {  // no input channels: an empty sum
    fill32(reinterpret_cast<uintptr_t>(y.get().raw_data()), 0, y.get().nbytes(), current_stream());
  } else {
    TensorImplPtr x = views::contiguous(input), w = views::contiguous(weight);
    run(ConvKind::Forward, *x, *w, y.get(), p, multiply_adds(y.get(), *w));
  }
  if (bias || relu) {  // one pointwise pass: + bias[c] (then relu), in place
    PointwiseExpr e;
    PointwiseExpr::Value v = e.input(0);
    std::vector<const TensorImpl*> inputs = {&y.get()};
    TensorImplPtr b;
    if (bias) {
      const int64_t c = bias->sizes()[0];
      const int64_t shape[3] = {c, 1, 1};
      b = views::reshape(*bias, shape);
      inputs.push_back(b.get());
      v = e.binary(kernels::BinaryOp::Add, v, e.input(1));
    }
    if (relu) e.unary(kernels::UnaryOp::Relu, v);
    pointwise_out(op, e, inputs, y.get(), current_stream());
  }
  y.finish();
}

void conv2d_backward_out(const TensorImpl& grad_output, const TensorImpl& input,
                         const TensorImpl& weight, const kernels::Conv2dParams& p,
                         TensorImpl* grad_input, TensorImpl* grad_weight, TensorImpl* grad_bias) {
  constexpr std::string_view op = "conv2d_backward";
  check_float32_on_device(op, grad_output, "grad_output");
  check_float32_on_device(op, input, "input");
  check_float32_on_device(op, weight, "weight");
  for (TensorImpl* t : {grad_input, grad_weight, grad_bias}) {
    if (t) check_float32_on_device(op, *t, "a gradient");
  }
  const StreamId stream = current_stream();
  TensorImplPtr dy = views::contiguous(grad_output);
  const bool empty_sum = grad_output.numel() == 0 || input.numel() == 0 || weight.numel() == 0;
  auto zero = [&](TensorImpl& t) {
    fill32(reinterpret_cast<uintptr_t>(t.raw_data()), 0, t.nbytes(), stream);
  };
  if (grad_input && grad_input->numel() > 0) {
    ContiguousOutput gx(*grad_input);
    if (empty_sum) {
      zero(gx.get());
    } else {
      TensorImplPtr w = views::contiguous(weight);
      run(ConvKind::BackwardData, gx.get(), *w, *dy, p, multiply_adds(*dy, *w));
    }
    gx.finish();
  }
  if (grad_weight && grad_weight->numel() > 0) {
    ContiguousOutput gw(*grad_weight);
    if (empty_sum) {
      zero(gw.get());
    } else {
      TensorImplPtr x = views::contiguous(input);
      run(ConvKind::BackwardFilter, *x, gw.get(), *dy, p, multiply_adds(*dy, gw.get()));
    }
    gw.finish();
  }
  if (grad_bias && grad_bias->numel() > 0) {
    ContiguousOutput gb(*grad_bias);
    const int64_t dims[3] = {0, 2, 3};
    reduce_out(op, *dy, dims, false, gb.get());
    gb.finish();
  }
}

#pragma GCC diagnostic pop
#endif  // KILN_HAVE_CUDNN

}  // namespace kiln::cuda
#endif  // KILN_HAVE_CUDA
