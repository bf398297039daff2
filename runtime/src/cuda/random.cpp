// Random fills and dropout on CUDA tensors (see kiln/runtime/cuda/random.h): the CPU's
// Philox4x32-10 streams (kernels/random.h) computed on the device, one thread per counter block,
// each element reading the same block and word as on the CPU.

#include "kiln/runtime/cuda/random.h"

#include <algorithm>
#include <cmath>

#include "kiln/runtime/cuda/compile.h"
#include "kiln/runtime/cuda/cuda.h"
#include "kiln/runtime/cuda/eager.h"
#include "kiln/runtime/error.h"
#include "kiln/runtime/views.h"

namespace kiln::cuda {

namespace {

constexpr const char* kSource = R"(
// One Philox4x32-10 block: counter (block, 0), key (seed), as kiln::philox4x32_10.
__device__ inline uint4 kiln_philox(unsigned long long block, unsigned long long seed) {
  unsigned c0 = (unsigned)block, c1 = (unsigned)(block >> 32), c2 = 0u, c3 = 0u;
  unsigned k0 = (unsigned)seed, k1 = (unsigned)(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const unsigned hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    const unsigned hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
  }
  return make_uint4(c0, c1, c2, c3);
}
// [0, 1) from the top 24 bits.
__device__ inline float kiln_u24(unsigned w) { return (float)(w >> 8) * 5.9604644775390625e-8f; }

// kind 0: uniform [a, b); 1: normal (mean a, std b) by Box-Muller on word pairs; 2: float
// bernoulli (w < threshold); 3: byte keep-mask (w >= threshold); 4: byte bernoulli.
// Block `blk` of the fill covers elements 4 blk .. 4 blk + 3.
extern "C" __global__ void kiln_random_fill(float* __restrict__ out, unsigned char* __restrict__ bytes,
                                            long long n, unsigned long long base,
                                            unsigned long long seed, int kind, float a, float b,
                                            unsigned long long threshold) {
  const long long blocks = (n + 3) / 4;
  for (long long blk = blockIdx.x * (long long)blockDim.x + threadIdx.x; blk < blocks;
       blk += (long long)gridDim.x * blockDim.x) {
    const uint4 r = kiln_philox(base + (unsigned long long)blk, seed);
    const unsigned w[4] = {r.x, r.y, r.z, r.w};
    const long long first = blk * 4;
    const int count = (int)min(4LL, n - first);
    for (int k = 0; k < count; ++k) {
      if (kind == 0) {
        float x = __fadd_rn(a, __fmul_rn(__fsub_rn(b, a), kiln_u24(w[k])));
        if (x >= b && b > a) x = nextafterf(b, a);
        out[first + k] = x;
      } else if (kind == 1) {
        const int p = k & ~1;  // the pair's first word: u1 in (0, 1], then the angle
        const float u1 = (float)(((double)w[p] + 1.0) * 2.3283064365386963e-10);
        const float radius = sqrtf(__fmul_rn(-2.0f, logf(u1)));
        const float angle = __fmul_rn(6.28318548202514648f, kiln_u24(w[p + 1]));
        const float v = (k & 1) ? sinf(angle) : cosf(angle);
        out[first + k] = __fadd_rn(a, __fmul_rn(__fmul_rn(b, radius), v));
      } else if (kind == 2) {
        out[first + k] = (unsigned long long)w[k] < threshold ? 1.f : 0.f;
      } else if (kind == 3) {
        bytes[first + k] = (unsigned long long)w[k] >= threshold ? 1 : 0;
      } else {
        bytes[first + k] = (unsigned long long)w[k] < threshold ? 1 : 0;
      }
    }
  }
}
// out = x * scale where the mask byte is set, else 0.
extern "C" __global__ void kiln_dropout(float* __restrict__ out, const float* __restrict__ x,
                                        const unsigned char* __restrict__ mask, long long n,
                                        float scale) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    out[i] = mask[i] ? x[i] * scale : 0.f;
}
)";

enum Kind { kUniform = 0, kNormal = 1, kBernoulliFloat = 2, kKeepMask = 3, kBernoulliBytes = 4 };

// 1 with probability p from one 32-bit word (as the CPU's threshold()).
uint64_t threshold(double p) {
  return static_cast<uint64_t>(std::ldexp(p, 32));
}

unsigned grid_for(long long work) {
  return static_cast<unsigned>(std::max<long long>(
      1, std::min<long long>((work + 255) / 256, device_info().multiprocessors * 16LL)));
}

void fill(std::string_view op, TensorImpl& t, Generator& g, Kind kind, float a, float b,
          uint64_t thr) {
  const bool bytes = kind == kKeepMask || kind == kBernoulliBytes;
  KILN_CHECK(t.device() == Device::CUDA, op, "expected a cuda tensor, got ", describe(t));
  if (bytes) {
    KILN_CHECK(t.dtype() == DType::Bool || t.dtype() == DType::UInt8, op,
               "expected a bool or uint8 tensor on cuda, got ", describe(t));
    KILN_CHECK(t.is_contiguous(), op, "expected a contiguous mask on cuda, got ", describe(t));
  } else {
    KILN_CHECK(t.dtype() == DType::Float32, op,
               "the CUDA backend fills float32 tensors only so far, got ", describe(t));
  }
  long long n = t.numel();
  if (n == 0) return;
  const uint64_t blocks = static_cast<uint64_t>((n + 3) / 4);
  unsigned long long base = g.reserve(blocks);  // the CPU's counter consumption
  unsigned long long seed = g.seed();
  TensorImplPtr buffer =
      t.is_contiguous() ? TensorImplPtr() : empty(t.sizes(), DType::Float32, Device::CUDA);
  TensorImpl& target = buffer ? *buffer : t;
  void* out = bytes ? nullptr : target.raw_data();
  void* byte_out = bytes ? target.raw_data() : nullptr;
  int k = kind;
  unsigned long long th = thr;
  void* args[] = {&out, &byte_out, &n, &base, &seed, &k, &a, &b, &th};
  static const Kernel& kernel_ref = kernel("random", kSource, "kiln_random_fill");
  kernel_ref.launch(op, grid_for(static_cast<long long>(blocks)), 256, args, current_stream());
  if (buffer) copy_out(t, *buffer);
}

}  // namespace

std::string random_source() {
  return kSource;
}

void uniform_(TensorImpl& t, double lo, double hi, Generator& g) {
  fill("uniform_", t, g, kUniform, static_cast<float>(lo), static_cast<float>(hi), 0);
}
void normal_(TensorImpl& t, double mean, double std, Generator& g) {
  fill("normal_", t, g, kNormal, static_cast<float>(mean), static_cast<float>(std), 0);
}
void bernoulli_(TensorImpl& t, double p, Generator& g) {
  const bool bytes = t.dtype() == DType::Bool || t.dtype() == DType::UInt8;
  fill("bernoulli_", t, g, bytes ? kBernoulliBytes : kBernoulliFloat, 0, 0, threshold(p));
}
void dropout_mask_out(double p, TensorImpl& mask, Generator& g) {
  fill("dropout_mask", mask, g, kKeepMask, 0, 0, threshold(p));
}

void dropout_out(std::string_view op, const TensorImpl& input, const TensorImpl& mask, double p,
                 TensorImpl& out) {
  for (const TensorImpl* t : {&input, &mask, static_cast<const TensorImpl*>(&out)}) {
    KILN_CHECK(t->device() == Device::CUDA, op, "expected every tensor on cuda, got ", describe(*t),
               " on ", device_name(t->device()));
  }
  KILN_CHECK(input.dtype() == DType::Float32 && out.dtype() == DType::Float32, op,
             "the CUDA backend runs float32 only so far, got ", describe(input));
  KILN_CHECK(mask.sizes() == input.sizes() && mask.is_contiguous(), op,
             "expected a contiguous mask of the input's shape ", describe(input), " on cuda, got ",
             describe(mask));
  long long n = input.numel();
  if (n == 0) return;
  TensorImplPtr x = views::contiguous(input);
  TensorImplPtr y =
      out.is_contiguous() ? TensorImplPtr(&out) : empty(out.sizes(), DType::Float32, Device::CUDA);
  float scale = p >= 1.0 ? 0.0f : static_cast<float>(1.0 / (1.0 - p));
  void *yp = y->raw_data(), *xp = x->raw_data(), *mp = mask.raw_data();
  void* args[] = {&yp, &xp, &mp, &n, &scale};
  static const Kernel& k = kernel("dropout", kSource, "kiln_dropout");
  k.launch(op, grid_for(n), 256, args, current_stream());
  if (y.get() != &out) copy_out(out, *y);
}

}  // namespace kiln::cuda
