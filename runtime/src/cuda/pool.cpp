// Pooling on CUDA tensors (see kiln/runtime/cuda/nn.h): one thread per output element, windows
// as the CPU kernels define them (kernels/pool_internal.h); the backward passes scatter each
// output's gradient into its window with atomic adds after zeroing the input gradient.
#include <algorithm>
#include <optional>

#include "kiln/runtime/cuda/compile.h"
#include "kiln/runtime/cuda/cuda.h"
#include "kiln/runtime/cuda/eager.h"
#include "kiln/runtime/cuda/nn.h"
#include "kiln/runtime/error.h"
#include "kiln/runtime/views.h"
#include "scratch.h"

namespace kiln::cuda {

namespace {

constexpr const char* kPoolSource = R"(
struct KilnPoolGeom {
  long long planes;
  int H, W, OH, OW, kh, kw, sh, sw, ph, pw, dh, dw;
  int divisor_override, count_include_pad, adaptive;
};
// The window of output (oh, ow) of an average pool, clamped to the input, and its divisor.
__device__ inline void kiln_avg_window(const KilnPoolGeom& g, int oh, int ow, int& hs, int& he,
                                       int& ws, int& we, float& divisor) {
  if (g.adaptive) {
    hs = (int)((long long)oh * g.H / g.OH);
    he = (int)(((long long)(oh + 1) * g.H + g.OH - 1) / g.OH);
    ws = (int)((long long)ow * g.W / g.OW);
    we = (int)(((long long)(ow + 1) * g.W + g.OW - 1) / g.OW);
    divisor = (float)((he - hs) * (we - ws));
    return;
  }
  hs = oh * g.sh - g.ph;
  ws = ow * g.sw - g.pw;
  he = min(hs + g.kh, g.H + g.ph);
  we = min(ws + g.kw, g.W + g.pw);
  const int pool_size = (he - hs) * (we - ws);
  hs = max(hs, 0);
  ws = max(ws, 0);
  he = min(he, g.H);
  we = min(we, g.W);
  divisor = (float)(g.divisor_override ? g.divisor_override
                                       : g.count_include_pad ? pool_size : (he - hs) * (we - ws));
}
// Output o's column, row and plane: 32-bit division where the sizes allow (64-bit division is
// emulated and would dominate these memory-bound kernels).
__device__ inline long long kiln_pool_position(long long o, const KilnPoolGeom& g, bool narrow,
                                               int& oh, int& ow) {
  if (narrow) {
    const unsigned u = (unsigned)o, rows = u / (unsigned)g.OW;
    ow = (int)(u - rows * (unsigned)g.OW);
    oh = (int)(rows % (unsigned)g.OH);
    return rows / (unsigned)g.OH;
  }
  ow = (int)(o % g.OW);
  oh = (int)(o / g.OW % g.OH);
  return o / ((long long)g.OW * g.OH);
}
extern "C" __global__ void kiln_max_pool2d(float* __restrict__ out, long long* __restrict__ indices,
                                           const float* __restrict__ x, KilnPoolGeom g) {
  const long long total = g.planes * g.OH * g.OW;
  const bool narrow = total <= 0xffffffffLL;
  for (long long o = blockIdx.x * (long long)blockDim.x + threadIdx.x; o < total;
       o += (long long)gridDim.x * blockDim.x) {
    int oh, ow;
    const float* xp = x + kiln_pool_position(o, g, narrow, oh, ow) * g.H * g.W;
    int hs = oh * g.sh - g.ph, ws = ow * g.sw - g.pw;
    const int he = min(hs + (g.kh - 1) * g.dh + 1, g.H), we = min(ws + (g.kw - 1) * g.dw + 1, g.W);
    while (hs < 0) hs += g.dh;
    while (ws < 0) ws += g.dw;
    // Taken when greater or NaN: the first maximum, or the last NaN (PyTorch's scan).
    float best = __int_as_float(0xff800000);  // -infinity
    long long at = (long long)hs * g.W + ws;
    for (int ih = hs; ih < he; ih += g.dh)
      for (int iw = ws; iw < we; iw += g.dw) {
        const float v = xp[ih * g.W + iw];
        if (v > best || v != v) {
          best = v;
          at = (long long)ih * g.W + iw;
        }
      }
    out[o] = best;
    if (indices) indices[o] = at;
  }
}
// grad_input (zeroed) += grad_output at each output's index; an index outside the plane sets
// bad[0] to 1 and bad[1] to the index instead.
extern "C" __global__ void kiln_max_pool2d_backward(float* __restrict__ grad_input,
                                                    const float* __restrict__ grad_output,
                                                    const long long* __restrict__ indices,
                                                    long long planes, long long plane_in,
                                                    long long plane_out,
                                                    unsigned long long* __restrict__ bad) {
  const long long total = planes * plane_out;
  for (long long o = blockIdx.x * (long long)blockDim.x + threadIdx.x; o < total;
       o += (long long)gridDim.x * blockDim.x) {
    const long long k = indices[o];
    if (k < 0 || k >= plane_in) {
      bad[1] = (unsigned long long)k;  // the value, then the flag
      atomicExch(bad, 1ull);
      continue;
    }
    atomicAdd(grad_input + o / plane_out * plane_in + k, grad_output[o]);
  }
}
extern "C" __global__ void kiln_avg_pool2d(float* __restrict__ out, const float* __restrict__ x,
                                           KilnPoolGeom g) {
  const long long total = g.planes * g.OH * g.OW;
  const bool narrow = total <= 0xffffffffLL;
  for (long long o = blockIdx.x * (long long)blockDim.x + threadIdx.x; o < total;
       o += (long long)gridDim.x * blockDim.x) {
    int oh, ow;
    const float* xp = x + kiln_pool_position(o, g, narrow, oh, ow) * g.H * g.W;
    int hs, he, ws, we;
    float divisor;
    kiln_avg_window(g, oh, ow, hs, he, ws, we, divisor);
    float s = 0.f;
    for (int ih = hs; ih < he; ++ih)
      for (int iw = ws; iw < we; ++iw) s += xp[ih * g.W + iw];
    out[o] = hs < he && ws < we ? s / divisor : 0.f;
  }
}
extern "C" __global__ void kiln_avg_pool2d_backward(float* __restrict__ grad_input,
                                                    const float* __restrict__ grad_output,
                                                    KilnPoolGeom g) {
  const long long total = g.planes * g.OH * g.OW;
  const bool narrow = total <= 0xffffffffLL;
  for (long long o = blockIdx.x * (long long)blockDim.x + threadIdx.x; o < total;
       o += (long long)gridDim.x * blockDim.x) {
    int oh, ow;
    float* gp = grad_input + kiln_pool_position(o, g, narrow, oh, ow) * g.H * g.W;
    int hs, he, ws, we;
    float divisor;
    kiln_avg_window(g, oh, ow, hs, he, ws, we, divisor);
    const float v = grad_output[o] / divisor;
    for (int ih = hs; ih < he; ++ih)
      for (int iw = ws; iw < we; ++iw) atomicAdd(gp + ih * g.W + iw, v);
  }
}
)";

struct PoolGeom {
  long long planes;
  int H, W, OH, OW, kh, kw, sh, sw, ph, pw, dh, dw;
  int divisor_override, count_include_pad, adaptive;
};

void check_on_device(std::string_view op, const TensorImpl& t, const char* what, DType dtype) {
  KILN_CHECK(t.device() == Device::CUDA, op, "expected ", what, " on cuda, got ", describe(t),
             " on ", device_name(t.device()));
  KILN_CHECK(t.dtype() == dtype, op, "expected ", what, " of ", dtype_name(dtype), " on cuda, got ",
             describe(t));
}

// The geometry of input [.., H, W] pooled to out [.., OH, OW] (planes: the leading dims).
PoolGeom geometry(std::string_view op, const TensorImpl& input, const TensorImpl& out,
                  const kernels::Pool2dParams* p) {
  KILN_CHECK(input.dim() >= 3 && out.dim() == input.dim(), op,
             "expected (N, C, H, W) or (C, H, W) tensors, got ", describe(input), " and ",
             describe(out));
  PoolGeom g{};
  g.planes = input.numel() > 0
                 ? input.numel() / (input.sizes()[input.dim() - 1] * input.sizes()[input.dim() - 2])
                 : 0;
  g.H = static_cast<int>(input.sizes()[input.dim() - 2]);
  g.W = static_cast<int>(input.sizes()[input.dim() - 1]);
  g.OH = static_cast<int>(out.sizes()[out.dim() - 2]);
  g.OW = static_cast<int>(out.sizes()[out.dim() - 1]);
  // The kernels index within a plane in 32 bits.
  KILN_CHECK(input.sizes()[input.dim() - 2] * input.sizes()[input.dim() - 1] < (int64_t{1} << 31) &&
                 out.sizes()[out.dim() - 2] * out.sizes()[out.dim() - 1] < (int64_t{1} << 31),
             op, "expected planes of fewer than 2^31 elements on cuda, got ", describe(input),
             " and ", describe(out));
  if (p) {
    g.kh = static_cast<int>(p->kernel_h);
    g.kw = static_cast<int>(p->kernel_w);
    g.sh = static_cast<int>(p->stride_h ? p->stride_h : p->kernel_h);
    g.sw = static_cast<int>(p->stride_w ? p->stride_w : p->kernel_w);
    g.ph = static_cast<int>(p->pad_h);
    g.pw = static_cast<int>(p->pad_w);
    g.dh = static_cast<int>(p->dilation_h);
    g.dw = static_cast<int>(p->dilation_w);
    g.divisor_override = static_cast<int>(p->divisor_override);
    g.count_include_pad = p->count_include_pad;
  } else {
    g.adaptive = 1;
  }
  return g;
}

unsigned grid_for(long long work) {
  const long long blocks = (work + 255) / 256;
  return static_cast<unsigned>(
      std::max<long long>(1, std::min<long long>(blocks, device_info().multiprocessors * 16LL)));
}

const Kernel& pool_kernel(std::string_view op, const char* name) {
  return kernel(op, kPoolSource, name);
}

void zero(TensorImpl& t) {
  fill32(reinterpret_cast<uintptr_t>(t.raw_data()), 0, t.nbytes(), current_stream());
}

void avg_forward(std::string_view op, const TensorImpl& input, const kernels::Pool2dParams* p,
                 TensorImpl& out) {
  check_on_device(op, input, "input", DType::Float32);
  check_on_device(op, out, "out", DType::Float32);
  PoolGeom g = geometry(op, input, out, p);
  if (out.numel() == 0) return;
  TensorImplPtr x = views::contiguous(input);
  ContiguousOutput y(out);
  void* yp = y.get().raw_data();
  void* xp = x->raw_data();
  void* args[] = {&yp, &xp, &g};
  pool_kernel(op, "kiln_avg_pool2d").launch(op, grid_for(out.numel()), 256, args, current_stream());
  y.finish();
}

void avg_backward(std::string_view op, const TensorImpl& grad_output,
                  const kernels::Pool2dParams* p, TensorImpl& grad_input) {
  check_on_device(op, grad_output, "grad_output", DType::Float32);
  check_on_device(op, grad_input, "grad_input", DType::Float32);
  PoolGeom g = geometry(op, grad_input, grad_output, p);
  if (grad_input.numel() == 0) return;
  TensorImplPtr gy = views::contiguous(grad_output);
  ContiguousOutput gx(grad_input);
  zero(gx.get());
  if (grad_output.numel() > 0) {
    void* gxp = gx.get().raw_data();
    void* gyp = gy->raw_data();
    void* args[] = {&gxp, &gyp, &g};
    pool_kernel(op, "kiln_avg_pool2d_backward")
        .launch(op, grid_for(grad_output.numel()), 256, args, current_stream());
  }
  gx.finish();
}

}  // namespace

std::string pool_source() {
  return kPoolSource;
}

void max_pool2d_out(const TensorImpl& input, const kernels::Pool2dParams& p, TensorImpl& out,
                    TensorImpl* indices) {
  constexpr std::string_view op = "max_pool2d";
  check_on_device(op, input, "input", DType::Float32);
  check_on_device(op, out, "out", DType::Float32);
  if (indices) {
    check_on_device(op, *indices, "indices", DType::Int64);
    KILN_CHECK(indices->sizes() == out.sizes() && indices->is_contiguous(), op,
               "expected contiguous indices of the output's shape ", describe(out), ", got ",
               describe(*indices));
  }
  PoolGeom g = geometry(op, input, out, &p);
  if (out.numel() == 0) return;
  TensorImplPtr x = views::contiguous(input);
  ContiguousOutput y(out);
  void* yp = y.get().raw_data();
  void* ip = indices ? indices->raw_data() : nullptr;
  void* xp = x->raw_data();
  void* args[] = {&yp, &ip, &xp, &g};
  pool_kernel(op, "kiln_max_pool2d").launch(op, grid_for(out.numel()), 256, args, current_stream());
  y.finish();
}

void max_pool2d_backward_out(const TensorImpl& grad_output, const TensorImpl& indices,
                             TensorImpl& grad_input) {
  constexpr std::string_view op = "max_pool2d_backward";
  check_on_device(op, grad_output, "grad_output", DType::Float32);
  check_on_device(op, indices, "indices", DType::Int64);
  check_on_device(op, grad_input, "grad_input", DType::Float32);
  KILN_CHECK(indices.sizes() == grad_output.sizes(), op, "expected indices of grad_output's shape ",
             describe(grad_output), ", got ", describe(indices));
  KILN_CHECK(grad_input.dim() == grad_output.dim() && grad_input.dim() >= 3, op,
             "expected grad_input of grad_output's rank, got ", describe(grad_input), " and ",
             describe(grad_output));
  if (grad_input.numel() == 0) return;
  const int64_t rank = grad_input.dim();
  long long plane_in = grad_input.sizes()[rank - 1] * grad_input.sizes()[rank - 2];
  long long plane_out = grad_output.sizes()[rank - 1] * grad_output.sizes()[rank - 2];
  long long planes = grad_input.numel() / plane_in;
  KILN_CHECK(plane_out == 0 || grad_output.numel() / plane_out == planes, op,
             "expected grad_output of ", planes, " planes, got ", describe(grad_output));
  const StreamId stream = current_stream();
  TensorImplPtr gy = views::contiguous(grad_output);
  KILN_CHECK(indices.is_contiguous(), op, "expected contiguous indices, got ", describe(indices));
  ContiguousOutput gx(grad_input);
  zero(gx.get());
  if (grad_output.numel() > 0) {
    const ErrorFlag bad(stream);  // an out-of-plane index, read back after the kernel
    void* gxp = gx.get().raw_data();
    void* gyp = gy->raw_data();
    void* ip = indices.raw_data();
    void* badp = bad.address();
    void* args[] = {&gxp, &gyp, &ip, &planes, &plane_in, &plane_out, &badp};
    pool_kernel(op, "kiln_max_pool2d_backward")
        .launch(op, grid_for(grad_output.numel()), 256, args, stream);
    const std::optional<int64_t> seen = bad.seen();
    KILN_CHECK(!seen, op, "index ", seen.value_or(0), " is outside the input plane of ", plane_in,
               " elements");
  }
  gx.finish();
}

void avg_pool2d_out(const TensorImpl& input, const kernels::Pool2dParams& p, TensorImpl& out) {
  avg_forward("avg_pool2d", input, &p, out);
}
void avg_pool2d_backward_out(const TensorImpl& grad_output, const kernels::Pool2dParams& p,
                             TensorImpl& grad_input) {
  avg_backward("avg_pool2d_backward", grad_output, &p, grad_input);
}
void adaptive_avg_pool2d_out(const TensorImpl& input, TensorImpl& out) {
  avg_forward("adaptive_avg_pool2d", input, nullptr, out);
}
void adaptive_avg_pool2d_backward_out(const TensorImpl& grad_output, TensorImpl& grad_input) {
  avg_backward("adaptive_avg_pool2d_backward", grad_output, nullptr, grad_input);
}

}  // namespace kiln::cuda
