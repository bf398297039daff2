// The pointwise kernel generator (see kiln/runtime/cuda/pointwise.h). Plain C++: it builds CUDA
// C text, and launches through compile.h (which refuses where the build has no CUDA).
#include "kiln/runtime/cuda/pointwise.h"

#include <cstdio>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "kiln/runtime/cuda/compile.h"
#include "kiln/runtime/cuda/cuda.h"
#include "kiln/runtime/error.h"

namespace kiln::cuda {

namespace {

using kernels::BinaryOp;
using kernels::UnaryOp;

constexpr int kMaxRank = 8;

// The CPU's unary formulas, compiled as device code (std:: names mapped below).
constexpr const char* kFormulas =
#include "unary_formulas_source.inc"
    ;

// NVRTC has CUDA's float functions but no <cmath>: the formulas' std:: calls land on them.
constexpr const char* kPrelude = R"(
namespace std {
inline float fabs(float x) { return ::fabsf(x); }
inline float floor(float x) { return ::floorf(x); }
inline float ceil(float x) { return ::ceilf(x); }
inline float nearbyint(float x) { return ::rintf(x); }
inline float exp(float x) { return ::expf(x); }
inline float log(float x) { return ::logf(x); }
inline float log1p(float x) { return ::log1pf(x); }
inline float expm1(float x) { return ::expm1f(x); }
inline float sqrt(float x) { return ::sqrtf(x); }
inline float sin(float x) { return ::sinf(x); }
inline float cos(float x) { return ::cosf(x); }
inline float tanh(float x) { return ::tanhf(x); }
inline float erf(float x) { return ::erff(x); }
inline float erfc(float x) { return ::erfcf(x); }
inline float pow(float x, float y) { return ::powf(x, y); }
}  // namespace std
)";

// `lit` turns a parameter's value into an expression (a kernel argument).
template <typename Lit>
std::string unary_call(UnaryOp op, const std::string& x, const kernels::UnaryParams& p, Lit lit) {
  const std::string ns = "kiln::kernels::scalar::";
  switch (op) {
#define KILN_UNARY_OP(name, value, keeps_integers) \
  case UnaryOp::value:                             \
    return ns + #name "(" + x + ")";
#include "kiln/runtime/unary_ops.inc"
#undef KILN_UNARY_OP
    case UnaryOp::Gelu:
      return ns + "gelu(" + x + ")";
    case UnaryOp::GeluTanh:
      return ns + "gelu_tanh(" + x + ")";
    case UnaryOp::LeakyRelu:
      return ns + "leaky_relu(" + x + ", " + lit(kernels::unary_param_a(op, p)) + ")";
    case UnaryOp::Hardtanh:
      return ns + "hardtanh(" + x + ", " + lit(kernels::unary_param_a(op, p)) + ", " +
             lit(kernels::unary_param_b(op, p)) + ")";
  }
  fail("cuda pointwise", "unknown unary op ", static_cast<int>(op));
}

std::string value_name(int v) {
  return "t" + std::to_string(v);
}

void* device_address(const TensorImpl& t) {
  return t.raw_data();
}

// [first, last] element addresses of a view (bytes).
std::pair<uintptr_t, uintptr_t> byte_range(const TensorImpl& t) {
  const auto base = reinterpret_cast<uintptr_t>(t.raw_data());
  uintptr_t last = base;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.sizes()[d] > 1) last += (t.sizes()[d] - 1) * t.strides()[d] * t.itemsize();
  }
  return {base, last + t.itemsize() - 1};
}

// Each element is read and written by one thread, so an output that is exactly an input
// (in-place ops) is safe; any other overlap would read elements another thread already wrote
// (PyTorch refuses it too).
void check_overlap(std::string_view op, const TensorImpl& in, int index, const TensorImpl& out) {
  if (in.storage().get() != out.storage().get() || in.numel() == 0 || out.numel() == 0) return;
  if (in.raw_data() == out.raw_data() && in.sizes() == out.sizes() &&
      in.strides() == out.strides()) {
    return;
  }
  const auto [a0, a1] = byte_range(in);
  const auto [b0, b1] = byte_range(out);
  KILN_CHECK(a1 < b0 || b1 < a0, op, "the output ", describe(out), " overlaps input ", index, " ",
             describe(in), " in memory without being the same view; write into a clone");
}

struct PointwiseKernels {
  const Kernel* flat = nullptr;
  const Kernel* strided = nullptr;
};

}  // namespace

PointwiseExpr::Value PointwiseExpr::add(std::string expression) {
  lines_.push_back(std::move(expression));
  return static_cast<Value>(lines_.size() - 1);
}

PointwiseExpr::Value PointwiseExpr::input(int index) {
  KILN_CHECK(index >= 0 && index < 64, "cuda pointwise", "input index ", index,
             " out of range [0, 64)");
  num_inputs_ = std::max(num_inputs_, index + 1);
  return add("in" + std::to_string(index));
}

PointwiseExpr::Value PointwiseExpr::constant(double value) {
  constants_.push_back(static_cast<float>(value));
  return add("c" + std::to_string(constants_.size() - 1));
}

void PointwiseExpr::check_defined(Value v) const {
  KILN_CHECK(v >= 0 && v < static_cast<Value>(lines_.size()), "cuda pointwise", "value ", v,
             " is not defined yet");
}

PointwiseExpr::Value PointwiseExpr::unary(UnaryOp op, Value x, const kernels::UnaryParams& p) {
  check_defined(x);
  const std::string call =
      unary_call(op, value_name(x), p, [this](double v) { return value_name(constant(v)); });
  return add(call);
}

PointwiseExpr::Value PointwiseExpr::call(std::string_view formula, std::span<const Value> args) {
  std::string s = "kiln::kernels::scalar::" + std::string(formula) + "(";
  for (size_t i = 0; i < args.size(); ++i) {
    check_defined(args[i]);
    s += (i ? ", " : "") + value_name(args[i]);
  }
  return add(s + ")");
}

PointwiseExpr::Value PointwiseExpr::binary(BinaryOp op, Value a, Value b) {
  const int n = static_cast<int>(lines_.size());
  KILN_CHECK(a >= 0 && a < n && b >= 0 && b < n, "cuda pointwise", "values ", a, ", ", b,
             " are not both defined");
  const std::string x = value_name(a), y = value_name(b);
  switch (op) {
    case BinaryOp::Add:
      return add(x + " + " + y);
    case BinaryOp::Sub:
      return add(x + " - " + y);
    case BinaryOp::Mul:
      return add(x + " * " + y);
    case BinaryOp::Div:
      return add(x + " / " + y);
    case BinaryOp::Pow:
      return add("std::pow(" + x + ", " + y + ")");
    case BinaryOp::Maximum:  // NaN-propagating, as on the CPU (fmaxf drops NaN)
      return add("(" + x + " != " + x + " || " + y + " != " + y + ") ? " + x + " + " + y +
                 " : ::fmaxf(" + x + ", " + y + ")");
    case BinaryOp::Minimum:
      return add("(" + x + " != " + x + " || " + y + " != " + y + ") ? " + x + " + " + y +
                 " : ::fminf(" + x + ", " + y + ")");
    default:
      fail(kernels::binary_op_name(op),
           "has no float32 pointwise form on CUDA yet (comparison "
           "and logical ops give bool tensors)");
  }
}

std::string PointwiseExpr::device_function() const {
  KILN_CHECK(!lines_.empty(), "cuda pointwise", "the expression is empty");
  std::string s = "__device__ __forceinline__ float kiln_pointwise(";
  std::string sep;
  for (int i = 0; i < num_inputs_; ++i, sep = ", ") s += sep + "float in" + std::to_string(i);
  for (size_t i = 0; i < constants_.size(); ++i, sep = ", ")
    s += sep + "float c" + std::to_string(i);
  s += ") {\n";
  for (size_t i = 0; i < lines_.size(); ++i) {
    s += "  const float " + value_name(static_cast<int>(i)) + " = " + lines_[i] + ";\n";
  }
  s += "  return " + value_name(static_cast<int>(lines_.size()) - 1) + ";\n}\n";
  return s;
}

namespace {
// An expression's kernels, by its element function (which names no tensor and no number): eager
// ops look theirs up here without generating the whole source again.
const PointwiseKernels& kernels_for(std::string_view op, const PointwiseExpr& e) {
  static std::mutex mutex;
  static auto* cache = new std::unordered_map<std::string, PointwiseKernels>();
  std::string key = e.device_function();
  std::lock_guard lock(mutex);
  auto it = cache->find(key);
  if (it != cache->end()) return it->second;
  const std::string source = pointwise_source(e);
  PointwiseKernels k{&kernel(op, source, "kiln_pointwise_flat"),
                     &kernel(op, source, "kiln_pointwise_strided")};
  return cache->emplace(std::move(key), k).first->second;
}
}  // namespace

std::string pointwise_source(const PointwiseExpr& e) {
  const int n = e.num_inputs();
  std::string params, args, vec_loads, vec_args[4], strided_args, consts;
  for (size_t i = 0; i < e.constants().size(); ++i) consts += ", c" + std::to_string(i);
  for (int i = 0; i < n; ++i) {
    const std::string k = std::to_string(i);
    params += ", const float* __restrict__ in" + k;
    args += std::string(i ? ", " : "") + "in" + k + "[i]";
    vec_loads +=
        "      const float4 v" + k + " = reinterpret_cast<const float4*>(in" + k + ")[i];\n";
    const char* lanes[] = {"x", "y", "z", "w"};
    for (int l = 0; l < 4; ++l)
      vec_args[l] += std::string(i ? ", " : "") + "v" + k + "." + lanes[l];
    strided_args += std::string(i ? ", " : "") + "in" + k + "[o" + k + "]";
  }
  for (size_t i = 0; i < e.constants().size(); ++i) params += ", float c" + std::to_string(i);
  if (n == 0) consts = consts.empty() ? "" : consts.substr(2);  // no leading input arguments
  for (std::string* a :
       {&args, &vec_args[0], &vec_args[1], &vec_args[2], &vec_args[3], &strided_args}) {
    *a += consts;
  }
  std::string s = kPrelude;
  s += kFormulas;
  s += "\n" + e.device_function();
  s += "struct KilnGeom { long long sizes[8]; long long out_strides[8]; long long strides[" +
       std::to_string(std::max(n, 1)) + "][8]; int rank; };\n";
  // Contiguous inputs of the output's shape: 16-byte vector loads where every pointer allows.
  s += "extern \"C\" __global__ void kiln_pointwise_flat(float* __restrict__ out" + params +
       ", long long n, int vec) {\n"
       "  const long long tid = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
       "  const long long step = (long long)gridDim.x * blockDim.x;\n"
       "  long long tail = 0;\n"
       "  if (vec) {\n"
       "    const long long n4 = n >> 2;\n"
       "    for (long long i = tid; i < n4; i += step) {\n" +
       vec_loads +
       "      float4 r;\n"
       "      r.x = kiln_pointwise(" +
       vec_args[0] +
       ");\n"
       "      r.y = kiln_pointwise(" +
       vec_args[1] +
       ");\n"
       "      r.z = kiln_pointwise(" +
       vec_args[2] +
       ");\n"
       "      r.w = kiln_pointwise(" +
       vec_args[3] +
       ");\n"
       "      reinterpret_cast<float4*>(out)[i] = r;\n"
       "    }\n"
       "    tail = n4 << 2;\n"
       "  }\n"
       "  for (long long i = tail + tid; i < n; i += step) out[i] = kiln_pointwise(" +
       args +
       ");\n"
       "}\n";
  // Any strides (broadcast dims have stride 0): the output index decomposed per dim.
  s += "extern \"C\" __global__ void kiln_pointwise_strided(float* __restrict__ out" + params +
       ", KilnGeom g, long long n) {\n"
       "  const long long step = (long long)gridDim.x * blockDim.x;\n"
       "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += step) "
       "{\n";
  for (int i = 0; i < n; ++i) s += "    long long o" + std::to_string(i) + " = 0;\n";
  s += "    long long oo = 0, rem = i;\n"
       "    for (int d = g.rank - 1; d >= 0; --d) {\n"
       "      const long long idx = rem % g.sizes[d];\n"
       "      rem /= g.sizes[d];\n"
       "      oo += idx * g.out_strides[d];\n";
  for (int i = 0; i < n; ++i) {
    const std::string k = std::to_string(i);
    s += "      o" + k + " += idx * g.strides[" + k + "][d];\n";
  }
  s += "    }\n"
       "    out[oo] = kiln_pointwise(" +
       strided_args +
       ");\n"
       "  }\n"
       "}\n";
  return s;
}

void pointwise_out(std::string_view op, const PointwiseExpr& e,
                   std::span<const TensorImpl* const> inputs, TensorImpl& out, StreamId stream) {
  const int n_in = e.num_inputs();
  KILN_CHECK(static_cast<int>(inputs.size()) == n_in, op, "expected ", n_in, " inputs, got ",
             inputs.size());
  KILN_CHECK(out.device() == Device::CUDA, op, "expected the output on cuda, got ",
             device_name(out.device()));
  KILN_CHECK(out.dtype() == DType::Float32, op, "the CUDA backend runs float32 only so far, got ",
             dtype_name(out.dtype()));
  // Outputs may be views (in-place ops on slices, copies into them); element-wise overlap of
  // the output with an input other than exact aliasing is refused by the callers.
  for (int64_t d = 0; d < out.dim(); ++d) {
    KILN_CHECK(out.strides()[d] > 0 || out.sizes()[d] <= 1, op,
               "expected an output without broadcast (stride 0) dims on cuda, got ", describe(out),
               " with strides ", out.strides());
  }
  KILN_CHECK(out.dim() <= kMaxRank, op, "expected at most ", kMaxRank, " dims on cuda, got ",
             out.dim());
  const int64_t numel = out.numel();
  bool flat = out.is_contiguous();
  std::vector<Dims> strides(n_in);
  for (int i = 0; i < n_in; ++i) {
    const TensorImpl& t = *inputs[i];
    KILN_CHECK(t.device() == Device::CUDA, op, "expected every tensor on one device, got input ", i,
               " on ", device_name(t.device()), " and the output on cuda");
    KILN_CHECK(t.dtype() == DType::Float32, op,
               "the CUDA backend runs float32 only so far, got input ", i, " of ",
               dtype_name(t.dtype()));
    // Broadcast to out's shape from the right; stride 0 where the input has size 1.
    KILN_CHECK(t.dim() <= out.dim(), op, "input ", i, " ", describe(t),
               " does not broadcast to the output's shape ", describe(out));
    Dims s(out.dim(), 0);
    const int64_t shift = out.dim() - t.dim();
    for (int64_t d = 0; d < t.dim(); ++d) {
      const int64_t size = t.sizes()[d], target = out.sizes()[d + shift];
      KILN_CHECK(size == target || size == 1, op, "input ", i, " ", describe(t),
                 " does not broadcast to the output's shape ", describe(out));
      s[d + shift] = size == 1 ? 0 : t.strides()[d];
    }
    flat = flat && t.is_contiguous() && t.sizes() == out.sizes();
    check_overlap(op, t, i, out);
    strides[i] = std::move(s);
  }
  if (numel == 0) return;
  const PointwiseKernels& k = kernels_for(op, e);
  const int sms = device_info().multiprocessors;
  constexpr unsigned kBlock = 256;
  // Arguments in the generated order: out, inputs, constants, then the variant's own.
  std::vector<void*> ptrs(n_in + 1);
  ptrs[0] = device_address(out);
  for (int i = 0; i < n_in; ++i) ptrs[i + 1] = device_address(*inputs[i]);
  std::vector<float> constants = e.constants();
  std::vector<void*> args;
  args.reserve(ptrs.size() + constants.size() + 2);
  for (void*& p : ptrs) args.push_back(&p);
  for (float& c : constants) args.push_back(&c);
  long long n = numel;
  auto grid_for = [&](long long work) {
    const long long blocks = (work + kBlock - 1) / kBlock;
    return static_cast<unsigned>(std::max<long long>(1, std::min<long long>(blocks, sms * 8LL)));
  };
  if (flat) {
    int vec = 1;
    for (void* p : ptrs) vec &= (reinterpret_cast<uintptr_t>(p) % 16) == 0;
    args.push_back(&n);
    args.push_back(&vec);
    k.flat->launch(op, grid_for(vec ? (n + 3) / 4 : n), kBlock, args.data(), stream);
    return;
  }
  // KilnGeom as the generated struct lays it out: sizes[8], out_strides[8], strides[n][8], rank.
  std::vector<long long> geom(2 * kMaxRank + kMaxRank * std::max(n_in, 1) + 1, 0);
  for (int64_t d = 0; d < out.dim(); ++d) {
    geom[d] = out.sizes()[d];
    geom[kMaxRank + d] = out.strides()[d];
  }
  for (int i = 0; i < n_in; ++i) {
    for (int64_t d = 0; d < out.dim(); ++d) geom[2 * kMaxRank + i * kMaxRank + d] = strides[i][d];
  }
  int rank = static_cast<int>(out.dim());
  std::memcpy(&geom.back(), &rank, sizeof rank);
  args.push_back(geom.data());
  args.push_back(&n);
  k.strided->launch(op, grid_for(n), kBlock, args.data(), stream);
}

}  // namespace kiln::cuda
