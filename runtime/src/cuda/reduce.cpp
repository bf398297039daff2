// Sums and means over any dims on CUDA (see kiln/runtime/cuda/eager.h: reduce_out): one block per
// output element (grid-stride over outputs); its threads stride over the reduced elements, then
// a warp-shuffle and shared-memory tree combines them. Accumulates in float32, like PyTorch's
// float sum on CUDA.

#include <algorithm>
#include <cstring>

#include "kiln/runtime/cuda/compile.h"
#include "kiln/runtime/cuda/cuda.h"
#include "kiln/runtime/cuda/eager.h"
#include "kiln/runtime/error.h"

namespace kiln::cuda {

namespace {

constexpr int kMaxRank = 8;

constexpr const char* kReduceSource = R"(
struct KilnReduceGeom {
  long long kept_sizes[8], kept_strides[8], red_sizes[8], red_strides[8];
  int kept_rank, red_rank;
};
extern "C" __global__ void kiln_reduce_sum(float* __restrict__ out, const float* __restrict__ x,
                                           KilnReduceGeom g, long long outputs, long long count,
                                           float scale) {
  __shared__ float partial[32];
  for (long long o = blockIdx.x; o < outputs; o += gridDim.x) {
    long long base = 0, rem = o;
    for (int d = g.kept_rank - 1; d >= 0; --d) {
      base += (rem % g.kept_sizes[d]) * g.kept_strides[d];
      rem /= g.kept_sizes[d];
    }
    float acc = 0.f;
    for (long long r = threadIdx.x; r < count; r += blockDim.x) {
      long long off = 0, q = r;
      for (int d = g.red_rank - 1; d >= 0; --d) {
        off += (q % g.red_sizes[d]) * g.red_strides[d];
        q /= g.red_sizes[d];
      }
      acc += x[base + off];
    }
    for (int s = 16; s > 0; s >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, s);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x < 32) {
      acc = threadIdx.x < (blockDim.x >> 5) ? partial[threadIdx.x] : 0.f;
      for (int s = 16; s > 0; s >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, s);
      if (threadIdx.x == 0) out[o] = acc * scale;
    }
    __syncthreads();
  }
}
)";

struct ReduceGeom {
  long long kept_sizes[kMaxRank], kept_strides[kMaxRank], red_sizes[kMaxRank],
      red_strides[kMaxRank];
  int kept_rank, red_rank;
};

}  // namespace

std::string reduce_source() {
  return kReduceSource;
}

void reduce_out(std::string_view op, const TensorImpl& x, std::span<const int64_t> dims, bool mean,
                TensorImpl& out) {
  check_same_device(op, x, "self", out, "out");
  KILN_CHECK(x.dtype() == DType::Float32 && out.dtype() == DType::Float32, op,
             "the CUDA backend runs float32 only so far, got ", describe(x));
  KILN_CHECK(out.is_contiguous(), op, "expected a contiguous output, got ", describe(out));
  KILN_CHECK(x.dim() <= kMaxRank, op, "expected at most ", kMaxRank, " dims on cuda, got ",
             x.dim());
  uint64_t reduced = 0;
  for (int64_t d : dims) reduced |= uint64_t{1} << wrap_dim(d, x.dim(), op);
  if (dims.empty()) reduced = ~uint64_t{0};  // all dims
  ReduceGeom g{};
  long long outputs = 1, count = 1;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (reduced >> d & 1) {
      g.red_sizes[g.red_rank] = x.sizes()[d];
      g.red_strides[g.red_rank++] = x.strides()[d];
      count *= x.sizes()[d];
    } else {
      g.kept_sizes[g.kept_rank] = x.sizes()[d];
      g.kept_strides[g.kept_rank++] = x.strides()[d];
      outputs *= x.sizes()[d];
    }
  }
  KILN_CHECK(out.numel() == outputs, op, "expected an output of ", outputs, " elements, got ",
             describe(out));
  if (outputs == 0) return;
  const StreamId stream = current_stream();
  if (count == 0) {  // sums of nothing are 0; means of nothing NaN (as on the CPU and in PyTorch)
    fill32(reinterpret_cast<uintptr_t>(out.raw_data()), mean ? 0x7fc00000u : 0u, out.nbytes(),
           stream);
    return;
  }
  // Enough threads for the reduction, at most 256; whole warps for the shuffle tree.
  const unsigned block =
      static_cast<unsigned>(std::clamp<long long>((count + 31) / 32 * 32, 32, 256));
  const unsigned grid =
      static_cast<unsigned>(std::min<long long>(outputs, device_info().multiprocessors * 16LL));
  void* out_ptr = out.raw_data();
  void* x_ptr = x.raw_data();
  float scale = mean ? static_cast<float>(1.0 / static_cast<double>(count)) : 1.0f;
  void* args[] = {&out_ptr, &x_ptr, &g, &outputs, &count, &scale};
  static const Kernel& k = kernel("sum", kReduceSource, "kiln_reduce_sum");
  k.launch(op, grid, block, args, stream);
}

}  // namespace kiln::cuda
