// AVX2 + FMA SGEMM microkernels (the x86-64-v3 baseline, so callable on any x86 build of kiln).
// Register tile MR x NR = 6 x 16: 12 ymm accumulators, 2 ymm of B, one broadcast of A (15 of the
// 16 ymm registers). M edges use a kernel instantiated for fewer rows; N edges go through a small
// stack tile.
#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)

#include <immintrin.h>

#include <utility>

#include "gemm_internal.h"

namespace kiln::kernels::gemm_detail {
namespace {

constexpr int kMR = 6;
constexpr int kNV = 2;
constexpr int kNR = 8 * kNV;

template <int R, int NV>
void kernel_rn(int64_t kc, const float* a, const float* b, int64_t ldb, float* c, int64_t ldc,
               int m, int n, float alpha, float beta, const TileEpilogue* ep) {
  __m256 acc[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_setzero_ps();
  }
  for (int64_t p = 0; p < kc; ++p) {
    __m256 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = _mm256_loadu_ps(b + 8 * v);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + r);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
    }
    a += kMR;
    b += ldb;
  }

  const __m256 va = _mm256_set1_ps(alpha);
  const __m256 vb = _mm256_set1_ps(beta);
  if (n >= 8 * NV) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      float* cr = c + r * ldc;
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        __m256 x = _mm256_mul_ps(acc[r][v], va);
        if (beta != 0.0f) x = _mm256_fmadd_ps(vb, _mm256_loadu_ps(cr + 8 * v), x);
        _mm256_storeu_ps(cr + 8 * v, x);
      }
    }
  } else {
    alignas(32) float tile[R][8 * NV];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) _mm256_store_ps(&tile[r][8 * v], _mm256_mul_ps(acc[r][v], va));
    }
    for (int r = 0; r < R; ++r) {
      float* cr = c + r * ldc;
      if (beta != 0.0f) {
        for (int j = 0; j < n; ++j) cr[j] = tile[r][j] + beta * cr[j];
      } else {
        for (int j = 0; j < n; ++j) cr[j] = tile[r][j];
      }
    }
  }
  if (ep) apply_tile_epilogue(c, ldc, m, n, *ep);
}

template <int NV, int... Rs>
constexpr void fill(MicroKernelFn* out, std::integer_sequence<int, Rs...>) {
  ((out[Rs + 1] = &kernel_rn<Rs + 1, NV>), ...);
}

struct Tables {
  MicroKernelFn full[kMR + 1]{};
  MicroKernelFn half[kMR + 1]{};  // n <= 8
  constexpr Tables() {
    fill<kNV>(full, std::make_integer_sequence<int, kMR>{});
    fill<1>(half, std::make_integer_sequence<int, kMR>{});
  }
};
// Constant-initialized: no static constructor runs code compiled for an ISA the CPU may lack
// (this file's instructions run only after gemm.cpp's CPUID check).
constexpr Tables kTables;

void micro(int64_t kc, const float* a, const float* b, int64_t ldb, float* c, int64_t ldc, int m,
           int n, float alpha, float beta, const TileEpilogue* ep) {
  const MicroKernelFn* t = n > 8 ? kTables.full : kTables.half;
  t[m](kc, a, b, ldb, c, ldc, m, n, alpha, beta, ep);
}

void pack_a(bool trans, const float* A, int64_t lda, int64_t m, int64_t k, float* dst) {
  pack_a_generic<kMR>(trans, A, lda, m, k, dst);
}

void pack_b(bool trans, const float* B, int64_t ldb, int64_t k, int64_t n, float* dst) {
  pack_b_generic<kNR>(trans, B, ldb, k, n, dst);
}

const KernelSet kSet{"avx2",     kMR,    kNR,     /*kc=*/256, /*mc=*/1536,
                     /*nc=*/512, &micro, &pack_a, &pack_b,    nullptr};

}  // namespace

const KernelSet* avx2_kernels() {
  return &kSet;
}

}  // namespace kiln::kernels::gemm_detail

#else

#include "gemm_internal.h"

namespace kiln::kernels::gemm_detail {
const KernelSet* avx2_kernels() {
  return nullptr;
}
}  // namespace kiln::kernels::gemm_detail

#endif
