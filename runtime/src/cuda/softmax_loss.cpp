// softmax / log_softmax and the classification losses on CUDA tensors (see
// kiln/runtime/cuda/nn.h). One block per row (softmax) or per sample (losses): block-wide max and
// sum reductions (warp shuffles, then shared memory), the max subtracted before exp. The losses
// follow the CPU kernel's formulas (kernels/loss.cpp), accumulating in double.

#include <algorithm>
#include <optional>

#include "kiln/runtime/cuda/compile.h"
#include "kiln/runtime/cuda/cuda.h"
#include "kiln/runtime/cuda/eager.h"
#include "kiln/runtime/cuda/nn.h"
#include "kiln/runtime/cuda/pointwise.h"
#include "kiln/runtime/error.h"
#include "kiln/runtime/views.h"
#include "scratch.h"

namespace kiln::cuda {

namespace {

constexpr const char* kSource = R"(
// The max (is_max) or sum of v over the block; every thread gets it. `shared` holds 32 values.
__device__ double kiln_block_reduce(double v, bool is_max, double* shared) {
  for (int o = 16; o > 0; o >>= 1) {
    const double u = __shfl_down_sync(0xffffffffu, v, o);
    v = is_max ? fmax(v, u) : v + u;
  }
  if ((threadIdx.x & 31) == 0) shared[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = threadIdx.x < (blockDim.x >> 5) ? shared[threadIdx.x]
                                         : (is_max ? -__longlong_as_double(0x7ff0000000000000LL)
                                                   : 0.0);
    for (int o = 16; o > 0; o >>= 1) {
      const double u = __shfl_down_sync(0xffffffffu, v, o);
      v = is_max ? fmax(v, u) : v + u;
    }
    if (threadIdx.x == 0) shared[0] = v;
  }
  __syncthreads();
  v = shared[0];
  __syncthreads();
  return v;
}
#define KILN_NEG_INF (-__longlong_as_double(0x7ff0000000000000LL))

// Rows of [outer, D, inner] along D: row r starts at (r / inner) * D * inner + r % inner.
extern "C" __global__ void kiln_softmax(float* __restrict__ out, const float* __restrict__ x,
                                        long long rows, long long D, long long inner,
                                        int log_mode) {
  __shared__ double shared[32];
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const long long base = r / inner * D * inner + r % inner;
    double m = KILN_NEG_INF;
    for (long long k = threadIdx.x; k < D; k += blockDim.x) m = fmax(m, (double)x[base + k * inner]);
    m = kiln_block_reduce(m, true, shared);
    double s = 0;
    for (long long k = threadIdx.x; k < D; k += blockDim.x) s += exp(x[base + k * inner] - m);
    s = kiln_block_reduce(s, false, shared);
    const double lse = m + log(s);
    for (long long k = threadIdx.x; k < D; k += blockDim.x) {
      const double v = x[base + k * inner];
      out[base + k * inner] = (float)(log_mode ? v - lse : exp(v - m) / s);
    }
  }
}
// softmax: gi = y (g - sum(g y));  log_softmax: gi = g - exp(y) sum(g).
extern "C" __global__ void kiln_softmax_backward(float* __restrict__ gi,
                                                 const float* __restrict__ g,
                                                 const float* __restrict__ y, long long rows,
                                                 long long D, long long inner, int log_mode) {
  __shared__ double shared[32];
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const long long base = r / inner * D * inner + r % inner;
    double s = 0;
    for (long long k = threadIdx.x; k < D; k += blockDim.x) {
      const long long at = base + k * inner;
      s += log_mode ? (double)g[at] : (double)g[at] * y[at];
    }
    s = kiln_block_reduce(s, false, shared);
    for (long long k = threadIdx.x; k < D; k += blockDim.x) {
      const long long at = base + k * inner;
      gi[at] = (float)(log_mode ? g[at] - exp((double)y[at]) * s : y[at] * (g[at] - s));
    }
  }
}

// Logits (or log-probabilities) element (n, c, s) of sample i = n S + s at (n C + c) S + s.
struct KilnClassArgs {
  long long samples, C, S, ignore;
  double eps;  // label smoothing
  int logits;  // 1: cross_entropy from logits; 0: nll_loss from log-probabilities
};
__device__ inline double kiln_class_weight(const float* w, long long c) {
  return w ? (double)w[c] : 1.0;
}
// log-sum-exp of sample i's row (logits only).
__device__ double kiln_row_lse(const float* row, const KilnClassArgs& a, double* shared) {
  double m = KILN_NEG_INF;
  for (long long c = threadIdx.x; c < a.C; c += blockDim.x) m = fmax(m, (double)row[c * a.S]);
  m = kiln_block_reduce(m, true, shared);
  if (isinf(m)) return m;  // all -inf (or a +inf): NaN/inf losses, as in PyTorch
  double se = 0;
  for (long long c = threadIdx.x; c < a.C; c += blockDim.x) se += exp(row[c * a.S] - m);
  return m + log(kiln_block_reduce(se, false, shared));
}
// Per sample: loss[i] and weight[i] (w[t], 0 if ignored). A target outside [0, C) other than
// ignore sets bad[0] to 1 and bad[1] to it.
extern "C" __global__ void kiln_class_loss(float* __restrict__ loss, float* __restrict__ weight,
                                           const float* __restrict__ x,
                                           const long long* __restrict__ target,
                                           const float* __restrict__ w, KilnClassArgs a,
                                           unsigned long long* __restrict__ bad) {
  __shared__ double shared[32];
  for (long long i = blockIdx.x; i < a.samples; i += gridDim.x) {
    const long long t = target[i];
    if (t == a.ignore || t < 0 || t >= a.C) {
      if (threadIdx.x == 0) {
        if (t != a.ignore) {
          bad[1] = (unsigned long long)t;  // the value, then the flag
          atomicExch(bad, 1ull);
        }
        loss[i] = 0.f;
        weight[i] = 0.f;
      }
      continue;
    }
    const float* row = x + (i / a.S * a.C) * a.S + i % a.S;
    const double wt = kiln_class_weight(w, t);
    double l;
    if (!a.logits) {
      l = -wt * row[t * a.S];
    } else {
      const double lse = kiln_row_lse(row, a, shared);
      l = -wt * (row[t * a.S] - lse);
      if (a.eps > 0) {
        double smooth = 0;
        for (long long c = threadIdx.x; c < a.C; c += blockDim.x)
          smooth += kiln_class_weight(w, c) * (lse - row[c * a.S]);
        smooth = kiln_block_reduce(smooth, false, shared);
        l = (1 - a.eps) * l + a.eps / (double)a.C * smooth;
      }
    }
    if (threadIdx.x == 0) {
      loss[i] = (float)l;
      weight[i] = (float)wt;
    }
  }
}
// The gradient rows: scale = grad_output[i] (no reduction) or grad_output[0] (sum), divided by
// *denominator (mean: the sum of the samples' weights).
extern "C" __global__ void kiln_class_loss_backward(float* __restrict__ gx,
                                                    const float* __restrict__ x,
                                                    const long long* __restrict__ target,
                                                    const float* __restrict__ w,
                                                    const float* __restrict__ grad_output,
                                                    int per_sample,
                                                    const float* __restrict__ denominator,
                                                    KilnClassArgs a) {
  __shared__ double shared[32];
  double wsum = (double)a.C;  // sum of the class weights, for label smoothing
  if (w && a.eps > 0) {
    double s = 0;
    for (long long c = threadIdx.x; c < a.C; c += blockDim.x) s += w[c];
    wsum = kiln_block_reduce(s, false, shared);
  }
  for (long long i = blockIdx.x; i < a.samples; i += gridDim.x) {
    const long long offset = (i / a.S * a.C) * a.S + i % a.S;
    const float* row = x + offset;
    float* grow = gx + offset;
    const long long t = target[i];
    if (t == a.ignore || t < 0 || t >= a.C) {
      for (long long c = threadIdx.x; c < a.C; c += blockDim.x) grow[c * a.S] = 0.f;
      continue;
    }
    double scale = per_sample ? (double)grad_output[i] : (double)grad_output[0];
    if (denominator) scale /= (double)denominator[0];
    const double wt = kiln_class_weight(w, t);
    if (!a.logits) {
      for (long long c = threadIdx.x; c < a.C; c += blockDim.x)
        grow[c * a.S] = c == t ? (float)(-wt * scale) : 0.f;
      continue;
    }
    const double lse = kiln_row_lse(row, a, shared);
    const double k1 = (1 - a.eps) * wt, k2 = a.eps / (double)a.C;
    for (long long c = threadIdx.x; c < a.C; c += blockDim.x) {
      const double p = exp(row[c * a.S] - lse);
      double gv = k1 * (p - (c == t ? 1.0 : 0.0));
      if (a.eps > 0) gv += k2 * (p * wsum - kiln_class_weight(w, c));
      grow[c * a.S] = (float)(gv * scale);
    }
  }
}
)";

struct ClassArgs {
  long long samples, C, S, ignore;
  double eps;
  int logits;
};

const Kernel& loss_kernel(std::string_view op, const char* name) {
  return kernel(op, kSource, name);
}

unsigned block_for(long long d) {
  return static_cast<unsigned>(std::clamp<long long>((d + 31) / 32 * 32, 32, 256));
}
unsigned grid_for(long long rows) {
  return static_cast<unsigned>(
      std::max<long long>(1, std::min<long long>(rows, device_info().multiprocessors * 32LL)));
}

void check_float_on_device(std::string_view op, const TensorImpl& t, const char* what) {
  KILN_CHECK(t.device() == Device::CUDA && t.dtype() == DType::Float32, op, "expected ", what,
             " as float32 on cuda, got ", describe(t), " on ", device_name(t.device()));
}

// The [outer, D, inner] split of `t` at `dim`.
struct Rows {
  long long rows, D, inner;
};
Rows rows_of(const TensorImpl& t, int64_t dim, std::string_view op) {
  const int64_t d = t.dim() == 0 ? 0 : wrap_dim(dim, t.dim(), op);
  Rows r{1, t.dim() == 0 ? 1 : t.sizes()[d], 1};
  for (int64_t i = 0; i < d; ++i) r.rows *= t.sizes()[i];
  for (int64_t i = d + 1; i < t.dim(); ++i) r.inner *= t.sizes()[i];
  r.rows *= r.inner;
  return r;
}

// The geometry of a classification loss (the CPU kernel has checked the shapes).
ClassArgs class_args(const TensorImpl& input, const kernels::CrossEntropyOptions& opt,
                     bool logits) {
  ClassArgs a{};
  a.C = input.dim() == 1 ? input.sizes()[0] : input.sizes()[1];
  a.S = 1;
  for (int64_t d = 2; d < input.dim(); ++d) a.S *= input.sizes()[d];
  a.samples = input.dim() == 1 ? 1 : input.sizes()[0] * a.S;
  a.ignore = opt.ignore_index;
  a.eps = logits ? opt.label_smoothing : 0.0;
  a.logits = logits ? 1 : 0;
  return a;
}

TensorImplPtr device_target(std::string_view op, const TensorImpl& target) {
  KILN_CHECK(target.device() == Device::CUDA && target.dtype() == DType::Int64, op,
             "expected the target as int64 class indices on cuda, got ", describe(target), " on ",
             device_name(target.device()));
  return views::contiguous(target);
}

TensorImplPtr class_weights(std::string_view op, const kernels::CrossEntropyOptions& opt) {
  if (!opt.weight) return {};
  check_float_on_device(op, *opt.weight, "weight");
  return views::contiguous(*opt.weight);
}

}  // namespace

std::string softmax_loss_source() {
  return kSource;
}

void softmax_out(const TensorImpl& self, int64_t dim, bool log, TensorImpl& out) {
  const std::string_view op = log ? "log_softmax" : "softmax";
  check_float_on_device(op, self, "input");
  check_float_on_device(op, out, "out");
  KILN_CHECK(out.sizes() == self.sizes(), op, "expected out of the input's shape ", describe(self),
             ", got ", describe(out));
  const Rows r = rows_of(self, dim, op);
  if (self.numel() == 0) return;
  TensorImplPtr x = views::contiguous(self);
  TensorImplPtr y =
      out.is_contiguous() ? TensorImplPtr(&out) : empty(out.sizes(), DType::Float32, Device::CUDA);
  void *yp = y->raw_data(), *xp = x->raw_data();
  long long rows = r.rows, D = r.D, inner = r.inner;
  int log_mode = log ? 1 : 0;
  void* args[] = {&yp, &xp, &rows, &D, &inner, &log_mode};
  loss_kernel(op, "kiln_softmax").launch(op, grid_for(rows), block_for(D), args, current_stream());
  if (y.get() != &out) copy_out(out, *y);
}

void softmax_backward_out(const TensorImpl& grad_output, const TensorImpl& output, int64_t dim,
                          bool log, TensorImpl& grad_input) {
  const std::string_view op = log ? "log_softmax_backward" : "softmax_backward";
  check_float_on_device(op, grad_output, "grad_output");
  check_float_on_device(op, output, "output");
  check_float_on_device(op, grad_input, "grad_input");
  KILN_CHECK(grad_output.sizes() == output.sizes() && grad_input.sizes() == output.sizes(), op,
             "expected grad_output and grad_input of the output's shape ", describe(output),
             ", got ", describe(grad_output), " and ", describe(grad_input));
  const Rows r = rows_of(output, dim, op);
  if (output.numel() == 0) return;
  TensorImplPtr g = views::contiguous(grad_output), y = views::contiguous(output);
  TensorImplPtr gi = grad_input.is_contiguous()
                         ? TensorImplPtr(&grad_input)
                         : empty(grad_input.sizes(), DType::Float32, Device::CUDA);
  void *gip = gi->raw_data(), *gp = g->raw_data(), *yp = y->raw_data();
  long long rows = r.rows, D = r.D, inner = r.inner;
  int log_mode = log ? 1 : 0;
  void* args[] = {&gip, &gp, &yp, &rows, &D, &inner, &log_mode};
  loss_kernel(op, "kiln_softmax_backward")
      .launch(op, grid_for(rows), block_for(D), args, current_stream());
  if (gi.get() != &grad_input) copy_out(grad_input, *gi);
}

void cross_entropy_out(const TensorImpl& input, const TensorImpl& target,
                       const kernels::CrossEntropyOptions& opt, bool log_input, TensorImpl& out) {
  const std::string_view op = log_input ? "nll_loss" : "cross_entropy";
  check_float_on_device(op, input, "input");
  check_float_on_device(op, out, "out");
  TensorImplPtr t = device_target(op, target);
  TensorImplPtr w = class_weights(op, opt);
  ClassArgs a = class_args(input, opt, !log_input);
  const StreamId stream = current_stream();
  if (a.samples == 0) {  // sums of nothing are 0; means of nothing NaN (as on the CPU)
    if (out.numel() > 0) {
      const bool mean = opt.reduction == kernels::LossReduction::Mean;
      fill32(reinterpret_cast<uintptr_t>(out.raw_data()), mean ? 0x7fc00000u : 0u, out.nbytes(),
             stream);
    }
    return;
  }
  TensorImplPtr x = views::contiguous(input);
  const bool per_sample = opt.reduction == kernels::LossReduction::None;
  TensorImplPtr losses = per_sample && out.is_contiguous()
                             ? TensorImplPtr(&out)
                             : empty(Dims{a.samples}, DType::Float32, Device::CUDA);
  TensorImplPtr weights = empty(Dims{a.samples}, DType::Float32, Device::CUDA);
  const ErrorFlag bad(stream);  // a target out of range, read back after the kernel
  void *lp = losses->raw_data(), *wsp = weights->raw_data(), *xp = x->raw_data();
  void *tp = t->raw_data(), *wp = w ? w->raw_data() : nullptr;
  void* badp = bad.address();
  void* args[] = {&lp, &wsp, &xp, &tp, &wp, &a, &badp};
  loss_kernel(op, "kiln_class_loss").launch(op, grid_for(a.samples), block_for(a.C), args, stream);
  const std::optional<int64_t> seen = bad.seen();
  KILN_CHECK(!seen, op, "expected target class indices in [0, ", a.C, ") or ignore_index (",
             opt.ignore_index, "), got ", seen.value_or(0), " (out of range)");
  if (per_sample) {
    if (losses.get() != &out) {
      TensorImplPtr shaped = views::reshape(*losses, out.sizes());
      copy_out(out, *shaped);
    }
    return;
  }
  TensorImplPtr total = empty(Dims{}, DType::Float32, Device::CUDA);
  reduce_out(op, *losses, {}, false, *total);
  if (opt.reduction == kernels::LossReduction::Sum) return copy_out(out, *total);
  TensorImplPtr denominator = empty(Dims{}, DType::Float32, Device::CUDA);
  reduce_out(op, *weights, {}, false, *denominator);
  binary_out(kernels::BinaryOp::Div, total.get(), {}, denominator.get(), {}, out, 1);
}

void cross_entropy_backward_out(const TensorImpl& grad_output, const TensorImpl& input,
                                const TensorImpl& target, const kernels::CrossEntropyOptions& opt,
                                bool log_input, TensorImpl& grad_input) {
  const std::string_view op = log_input ? "nll_loss_backward" : "cross_entropy_backward";
  check_float_on_device(op, grad_output, "grad_output");
  check_float_on_device(op, input, "input");
  check_float_on_device(op, grad_input, "grad_input");
  TensorImplPtr t = device_target(op, target);
  TensorImplPtr w = class_weights(op, opt);
  ClassArgs a = class_args(input, opt, !log_input);
  const StreamId stream = current_stream();
  if (input.numel() == 0) return;
  TensorImplPtr x = views::contiguous(input), g = views::contiguous(grad_output);
  TensorImplPtr gi = grad_input.is_contiguous()
                         ? TensorImplPtr(&grad_input)
                         : empty(grad_input.sizes(), DType::Float32, Device::CUDA);
  TensorImplPtr denominator;
  if (opt.reduction == kernels::LossReduction::Mean) {
    // The samples' weights, summed: the forward's denominator (its targets checked there).
    TensorImplPtr losses = empty(Dims{a.samples}, DType::Float32, Device::CUDA);
    TensorImplPtr weights = empty(Dims{a.samples}, DType::Float32, Device::CUDA);
    ClassArgs weights_only = a;
    weights_only.logits = 0;
    weights_only.eps = 0;
    const Scratch bad(16, stream);  // the forward has checked the targets
    void *lp = losses->raw_data(), *wsp = weights->raw_data(), *xp = x->raw_data();
    void *tp = t->raw_data(), *wp = w ? w->raw_data() : nullptr;
    void* badp = bad.address();
    void* args[] = {&lp, &wsp, &xp, &tp, &wp, &weights_only, &badp};
    loss_kernel(op, "kiln_class_loss").launch(op, grid_for(a.samples), 32, args, stream);
    denominator = empty(Dims{}, DType::Float32, Device::CUDA);
    reduce_out(op, *weights, {}, false, *denominator);
  }
  void *gip = gi->raw_data(), *xp = x->raw_data(), *tp = t->raw_data();
  void *wp = w ? w->raw_data() : nullptr, *gp = g->raw_data();
  void* dp = denominator ? denominator->raw_data() : nullptr;
  int per_sample = opt.reduction == kernels::LossReduction::None ? 1 : 0;
  void* args[] = {&gip, &xp, &tp, &wp, &gp, &per_sample, &dp, &a};
  loss_kernel(op, "kiln_class_loss_backward")
      .launch(op, grid_for(a.samples), block_for(a.C), args, stream);
  if (gi.get() != &grad_input) copy_out(grad_input, *gi);
}

}  // namespace kiln::cuda
