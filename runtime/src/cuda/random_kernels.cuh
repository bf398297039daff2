// The device code of runtime/src/cuda/random.cpp: CUDA C that NVRTC compiles at run time (its
// text is embedded at build time), and that tests/cuda/test_cuda_random_host.cpp also compiles
// as host C++ under a small shim of the CUDA built-ins, to check it against the CPU's fills
// without a device.

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
