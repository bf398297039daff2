// Batch normalization on CUDA tensors (see kiln/runtime/cuda/nn.h). Each pass over the input is
// one kernel: per-channel sums accumulate in double over blocks that each take a slice of one
// channel (atomic adds of the partial sums, so small channel counts still fill the device),
// one-thread-per-channel kernels turn them into statistics and per-channel coefficients, and an
// element-wise kernel applies those (one or two multiply-adds per element). Formulas as the CPU's
// (kernels/norm.h): biased variance to normalize, the unbiased one for the running variance.
#include <algorithm>

#include "kiln/runtime/cuda/compile.h"
#include "kiln/runtime/cuda/cuda.h"
#include "kiln/runtime/cuda/eager.h"
#include "kiln/runtime/cuda/nn.h"
#include "kiln/runtime/error.h"
#include "kiln/runtime/views.h"
#include "scratch.h"

namespace kiln::cuda {

namespace {

constexpr const char* kBatchNormSource = R"(
// The channel of element i of an [N, C, inner] tensor: 32-bit division where the sizes allow
// (64-bit division is emulated and would dominate these memory-bound kernels).
__device__ inline long long kiln_channel(long long i, long long inner, long long C, bool narrow) {
  return narrow ? (long long)((unsigned)i / (unsigned)inner % (unsigned)C) : i / inner % C;
}
// sums[2c], sums[2c+1] += over this block's slice (blockIdx.x / C) of channel c (blockIdx.x % C):
//   forward (dy null): x and x^2;  backward: dy and dy (x - mean[c]).
extern "C" __global__ void kiln_bn_sums(const float* __restrict__ x, const float* __restrict__ dy,
                                        const float* __restrict__ mean, double* __restrict__ sums,
                                        long long N, long long C, long long inner,
                                        long long chunk) {
  const long long c = blockIdx.x % C;
  const long long count = N * inner;
  const long long begin = blockIdx.x / C * chunk;
  const long long end = min(count, begin + chunk);
  const bool narrow = count <= 0xffffffffLL;
  const float m = dy ? mean[c] : 0.f;
  double s = 0, q = 0;
  for (long long i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const long long n = narrow ? (long long)((unsigned)i / (unsigned)inner) : i / inner;
    const long long at = (n * C + c) * inner + (i - n * inner);
    const float v = x[at];
    if (dy) {
      const float g = dy[at];
      s += g;
      q += (double)g * ((double)v - m);
    } else {
      s += v;
      q += (double)v * v;
    }
  }
  __shared__ double ss[32], qs[32];
  for (int o = 16; o > 0; o >>= 1) {
    s += __shfl_down_sync(0xffffffffu, s, o);
    q += __shfl_down_sync(0xffffffffu, q, o);
  }
  if ((threadIdx.x & 31) == 0) {
    ss[threadIdx.x >> 5] = s;
    qs[threadIdx.x >> 5] = q;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < (int)(blockDim.x >> 5); ++w) {
      s += ss[w];
      q += qs[w];
    }
    atomicAdd(sums + 2 * c, s);
    atomicAdd(sums + 2 * c + 1, q);
  }
}
// The batch statistics of each channel from kiln_bn_sums' forward sums; the running ones
// updated when given.
extern "C" __global__ void kiln_bn_stats(const double* __restrict__ sums, float* __restrict__ mean,
                                         float* __restrict__ invstd,
                                         float* __restrict__ running_mean,
                                         float* __restrict__ running_var, long long C,
                                         long long count, double momentum, double eps) {
  const long long c = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (c >= C) return;
  const double m = sums[2 * c] / count;
  const double var = fmax(sums[2 * c + 1] / count - m * m, 0.0);
  mean[c] = (float)m;
  invstd[c] = (float)(1.0 / sqrt(var + eps));
  if (running_mean) {
    running_mean[c] = (float)((1.0 - momentum) * running_mean[c] + momentum * m);
    running_var[c] =
        (float)((1.0 - momentum) * running_var[c] + momentum * var * count / (count - 1));
  }
}
// 1/sqrt(var + eps) from a running variance, or the saved invstd as it is.
__device__ inline double kiln_bn_invstd(const float* v, long long c, int from_running,
                                        double eps) {
  return from_running ? 1.0 / sqrt((double)v[c] + eps) : (double)v[c];
}
// Per channel: coef[2c] = invstd w, coef[2c+1] = b - mean invstd w (y = x coef0 + coef1).
extern "C" __global__ void kiln_bn_coefficients(const float* __restrict__ mean,
                                                const float* __restrict__ v, int from_running,
                                                double eps, const float* __restrict__ w,
                                                const float* __restrict__ b,
                                                float* __restrict__ coef, long long C) {
  const long long c = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (c >= C) return;
  const double scale = kiln_bn_invstd(v, c, from_running, eps) * (w ? w[c] : 1.f);
  coef[2 * c] = (float)scale;
  coef[2 * c + 1] = (float)((b ? b[c] : 0.f) - mean[c] * scale);
}
extern "C" __global__ void kiln_bn_apply(float* __restrict__ y, const float* __restrict__ x,
                                         const float* __restrict__ coef, long long C,
                                         long long inner, long long total) {
  const bool narrow = total <= 0xffffffffLL;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
       i += (long long)gridDim.x * blockDim.x) {
    const long long c = kiln_channel(i, inner, C, narrow);
    y[i] = fmaf(x[i], coef[2 * c], coef[2 * c + 1]);
  }
}
// From kiln_bn_sums' backward sums: grad_weight = sum dy (x - mean) invstd, grad_bias = sum dy
// (either may be null), and grad_input = dy coef0 + x coef1 + coef2 per channel:
//   training (batch statistics): w invstd (dy - sum_dy / n - (x - mean) invstd^2 sum_dy_xmu / n)
//   inference (constant statistics): dy w invstd.
extern "C" __global__ void kiln_bn_backward_coefficients(
    const double* __restrict__ sums, const float* __restrict__ mean, const float* __restrict__ v,
    int from_running, double eps, const float* __restrict__ w, float* __restrict__ grad_weight,
    float* __restrict__ grad_bias, float* __restrict__ coef, long long C, long long count) {
  const long long c = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (c >= C) return;
  const double invstd = kiln_bn_invstd(v, c, from_running, eps);
  if (grad_weight) grad_weight[c] = (float)(sums[2 * c + 1] * invstd);
  if (grad_bias) grad_bias[c] = (float)sums[2 * c];
  const double scale = invstd * (w ? w[c] : 1.f);
  if (from_running) {
    coef[3 * c] = (float)scale;
    coef[3 * c + 1] = 0.f;
    coef[3 * c + 2] = 0.f;
  } else {
    const double mean_dy = sums[2 * c] / count;
    const double proj = sums[2 * c + 1] / count * invstd * invstd;
    coef[3 * c] = (float)scale;
    coef[3 * c + 1] = (float)(-scale * proj);
    coef[3 * c + 2] = (float)(scale * (mean[c] * proj - mean_dy));
  }
}
extern "C" __global__ void kiln_bn_input_grad(float* __restrict__ dx, const float* __restrict__ dy,
                                              const float* __restrict__ x,
                                              const float* __restrict__ coef, long long C,
                                              long long inner, long long total) {
  const bool narrow = total <= 0xffffffffLL;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
       i += (long long)gridDim.x * blockDim.x) {
    const long long c = kiln_channel(i, inner, C, narrow);
    dx[i] = fmaf(dy[i], coef[3 * c], fmaf(x[i], coef[3 * c + 1], coef[3 * c + 2]));
  }
}
)";

constexpr std::string_view kForward = "batch_norm", kBackward = "batch_norm_backward";

const Kernel& bn_kernel(std::string_view op, const char* name) {
  return kernel(op, kBatchNormSource, name);
}

void* address(const TensorImpl* t) {
  return t ? t->raw_data() : nullptr;
}

// A float32 [C] parameter or statistic on the device, contiguous (a copy if it is not, which
// only reads may use).
TensorImplPtr channel_vector(std::string_view op, const TensorImpl* t, const char* what,
                             int64_t C) {
  if (!t) return {};
  KILN_CHECK(t->device() == Device::CUDA && t->dtype() == DType::Float32, op, "expected ", what,
             " as float32 on cuda, got ", describe(*t), " on ", device_name(t->device()));
  KILN_CHECK(t->numel() == C, op, "expected ", what, " of ", C, " elements, got ", describe(*t));
  return views::contiguous(*t);
}
// The same for a statistic written in place: it must be contiguous already.
TensorImpl* written_vector(std::string_view op, TensorImpl* t, const char* what, int64_t C) {
  if (!t) return nullptr;
  KILN_CHECK(t->device() == Device::CUDA && t->dtype() == DType::Float32 && t->is_contiguous(), op,
             "expected ", what, " as contiguous float32 on cuda, got ", describe(*t), " on ",
             device_name(t->device()));
  KILN_CHECK(t->numel() == C, op, "expected ", what, " of ", C, " elements, got ", describe(*t));
  return t;
}

struct Shape {
  long long N, C, inner, total, count;  // count: values per channel
};
Shape shape_of(std::string_view op, const TensorImpl& input) {
  KILN_CHECK(input.device() == Device::CUDA && input.dtype() == DType::Float32, op,
             "expected the input as float32 on cuda, got ", describe(input), " on ",
             device_name(input.device()));
  KILN_CHECK(input.dim() >= 2, op, "expected input of at least 2 dims (N, C, ...), got ",
             describe(input));
  Shape s{};
  s.N = input.sizes()[0];
  s.C = input.sizes()[1];
  s.inner = 1;
  for (int64_t d = 2; d < input.dim(); ++d) s.inner *= input.sizes()[d];
  s.total = input.numel();
  s.count = s.N * s.inner;
  return s;
}

// Per-channel double sums (2 per channel) of x (forward) or of dy and dy (x - mean) (backward),
// into `sums` (2 C doubles), zeroed first.
void channel_sums(std::string_view op, const Shape& s, const TensorImpl& x, const TensorImpl* dy,
                  const TensorImpl* mean, const Scratch& sums, StreamId stream) {
  fill32(sums.get(), 0, static_cast<size_t>(2 * s.C) * sizeof(double), stream);
  // Enough blocks to fill the device: each channel split into slices of at least 4096 values.
  const long long target_blocks = device_info().multiprocessors * 8LL;
  const long long splits = std::clamp<long long>((target_blocks + s.C - 1) / s.C, 1,
                                                 std::max<long long>(1, s.count / 4096));
  long long chunk = (s.count + splits - 1) / splits;
  long long N = s.N, C = s.C, inner = s.inner;
  void* xp = x.raw_data();
  void* dyp = address(dy);
  void* mp = address(mean);
  void* sp = sums.address();
  void* args[] = {&xp, &dyp, &mp, &sp, &N, &C, &inner, &chunk};
  bn_kernel(op, "kiln_bn_sums").launch(op, static_cast<unsigned>(s.C * splits), 256, args, stream);
}

unsigned elementwise_grid(long long total) {
  return static_cast<unsigned>(std::max<long long>(
      1, std::min<long long>((total + 255) / 256, device_info().multiprocessors * 16LL)));
}

}  // namespace

std::string batch_norm_source() {
  return kBatchNormSource;
}

void batch_norm_out(const TensorImpl& input, const TensorImpl* weight, const TensorImpl* bias,
                    TensorImpl* running_mean, TensorImpl* running_var, bool training,
                    double momentum, double eps, TensorImpl& out, TensorImpl* save_mean,
                    TensorImpl* save_invstd) {
  const std::string_view op = kForward;
  const Shape s = shape_of(op, input);
  KILN_CHECK(
      out.device() == Device::CUDA && out.dtype() == DType::Float32 && out.sizes() == input.sizes(),
      op, "expected out of the input's shape ", describe(input), " on cuda, got ", describe(out),
      " on ", device_name(out.device()));
  TensorImplPtr w = channel_vector(op, weight, "weight", s.C);
  TensorImplPtr b = channel_vector(op, bias, "bias", s.C);
  TensorImpl* rm = written_vector(op, running_mean, "running_mean", s.C);
  TensorImpl* rv = written_vector(op, running_var, "running_var", s.C);
  TensorImpl* sm = written_vector(op, save_mean, "save_mean", s.C);
  TensorImpl* si = written_vector(op, save_invstd, "save_invstd", s.C);
  KILN_CHECK(!rm == !rv, op, "expected both running statistics or neither");
  const StreamId stream = current_stream();
  if (s.total == 0) {  // no statistics, running ones unchanged (as on the CPU)
    for (TensorImpl* t : {sm, si}) {
      if (t) fill32(reinterpret_cast<uintptr_t>(t->raw_data()), 0, t->nbytes(), stream);
    }
    return;
  }
  TensorImplPtr x = views::contiguous(input);
  TensorImplPtr mean_buffer, invstd_buffer;
  const TensorImpl *mean = rm, *v = rv;
  int from_running = 1;
  if (training) {
    KILN_CHECK(s.count > 1, op, "expected more than 1 value per channel when training, got input ",
               describe(input));
    if (!sm) sm = (mean_buffer = empty(Dims{s.C}, DType::Float32, Device::CUDA)).get();
    if (!si) si = (invstd_buffer = empty(Dims{s.C}, DType::Float32, Device::CUDA)).get();
    const Scratch sums(static_cast<size_t>(2 * s.C) * sizeof(double), stream);
    channel_sums(op, s, *x, nullptr, nullptr, sums, stream);
    void* sp = sums.address();
    void *mp = sm->raw_data(), *ip = si->raw_data(), *rmp = address(rm), *rvp = address(rv);
    long long C = s.C, count = s.count;
    void* args[] = {&sp, &mp, &ip, &rmp, &rvp, &C, &count, &momentum, &eps};
    bn_kernel(op, "kiln_bn_stats")
        .launch(op, static_cast<unsigned>((s.C + 127) / 128), 128, args, stream);
    mean = sm;
    v = si;
    from_running = 0;
  } else {
    KILN_CHECK(rm && rv, op, "expected running_mean and running_var in inference mode");
  }
  // y = x scale[c] + shift[c]: the per-channel work done once.
  const Scratch coef(static_cast<size_t>(2 * s.C) * sizeof(float), stream);
  {
    void *mp = address(mean), *vp = address(v), *wp = address(w.get()), *bp = address(b.get());
    void* cp = coef.address();
    long long C = s.C;
    void* args[] = {&mp, &vp, &from_running, &eps, &wp, &bp, &cp, &C};
    bn_kernel(op, "kiln_bn_coefficients")
        .launch(op, static_cast<unsigned>((s.C + 127) / 128), 128, args, stream);
  }
  TensorImplPtr y_buffer =
      out.is_contiguous() ? TensorImplPtr() : empty(out.sizes(), DType::Float32, Device::CUDA);
  TensorImpl& y = y_buffer ? *y_buffer : out;
  void *yp = y.raw_data(), *xp = x->raw_data(), *cp = coef.address();
  long long C = s.C, inner = s.inner, total = s.total;
  void* args[] = {&yp, &xp, &cp, &C, &inner, &total};
  bn_kernel(op, "kiln_bn_apply").launch(op, elementwise_grid(s.total), 256, args, stream);
  if (y_buffer) copy_out(out, y);
}

void batch_norm_backward_out(const TensorImpl& grad_output, const TensorImpl& input,
                             const TensorImpl* weight, const TensorImpl* running_mean,
                             const TensorImpl* running_var, const TensorImpl* save_mean,
                             const TensorImpl* save_invstd, bool training, double eps,
                             TensorImpl* grad_input, TensorImpl* grad_weight,
                             TensorImpl* grad_bias) {
  const std::string_view op = kBackward;
  const Shape s = shape_of(op, input);
  KILN_CHECK(grad_output.device() == Device::CUDA && grad_output.dtype() == DType::Float32 &&
                 grad_output.sizes() == input.sizes(),
             op, "expected grad_output of the input's shape ", describe(input), " on cuda, got ",
             describe(grad_output));
  TensorImplPtr w = channel_vector(op, weight, "weight", s.C);
  TensorImplPtr mean = channel_vector(op, training ? save_mean : running_mean,
                                      training ? "save_mean" : "running_mean", s.C);
  TensorImplPtr v = channel_vector(op, training ? save_invstd : running_var,
                                   training ? "save_invstd" : "running_var", s.C);
  KILN_CHECK(mean && v, op,
             training ? "expected save_mean and save_invstd from the forward in training mode"
                      : "expected running_mean and running_var in inference mode");
  TensorImpl* gw = written_vector(op, grad_weight, "grad_weight", s.C);
  TensorImpl* gb = written_vector(op, grad_bias, "grad_bias", s.C);
  if (grad_input) {
    KILN_CHECK(grad_input->device() == Device::CUDA && grad_input->dtype() == DType::Float32 &&
                   grad_input->sizes() == input.sizes(),
               op, "expected grad_input of the input's shape ", describe(input), " on cuda, got ",
               describe(*grad_input));
  }
  if (s.C == 0) return;  // no channels: nothing to compute
  const StreamId stream = current_stream();
  TensorImplPtr x = views::contiguous(input);
  TensorImplPtr dy = views::contiguous(grad_output);
  const Scratch sums(static_cast<size_t>(2 * s.C) * sizeof(double), stream);
  channel_sums(op, s, *x, dy.get(), mean.get(), sums, stream);
  int from_running = training ? 0 : 1;
  long long C = s.C, inner = s.inner, total = s.total, count = s.count;
  const Scratch coef(static_cast<size_t>(3 * s.C) * sizeof(float), stream);
  {
    void *sp = sums.address(), *mp = mean->raw_data(), *vp = v->raw_data(), *wp = address(w.get());
    void *gwp = address(gw), *gbp = address(gb), *cp = coef.address();
    void* args[] = {&sp, &mp, &vp, &from_running, &eps, &wp, &gwp, &gbp, &cp, &C, &count};
    bn_kernel(op, "kiln_bn_backward_coefficients")
        .launch(op, static_cast<unsigned>((s.C + 127) / 128), 128, args, stream);
  }
  if (grad_input && s.total > 0) {
    TensorImplPtr gx_buffer = grad_input->is_contiguous()
                                  ? TensorImplPtr()
                                  : empty(input.sizes(), DType::Float32, Device::CUDA);
    TensorImpl& gx = gx_buffer ? *gx_buffer : *grad_input;
    void *gxp = gx.raw_data(), *dyp = dy->raw_data(), *xp = x->raw_data(), *cp = coef.address();
    void* args[] = {&gxp, &dyp, &xp, &cp, &C, &inner, &total};
    bn_kernel(op, "kiln_bn_input_grad").launch(op, elementwise_grid(s.total), 256, args, stream);
    if (gx_buffer) copy_out(*grad_input, gx);
  }
}

}  // namespace kiln::cuda
