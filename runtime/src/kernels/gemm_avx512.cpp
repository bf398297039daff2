// AVX-512 SGEMM microkernels (compiled with -mavx512f/bw/dq/vl; called only after a CPUID check in
// gemm.cpp). Register tile MR x NR = 12 x 32: 24 zmm accumulators, 2 zmm of B and one broadcast of
// A per row and k step. N edges use masked stores; M edges use a kernel instantiated for fewer
// rows, so edge tiles cost no more than their useful work.
#if defined(__x86_64__) && defined(__AVX512F__)

#include <immintrin.h>

#include <utility>

#include "gemm_internal.h"

namespace kiln::kernels::gemm_detail {
namespace {

constexpr int kMR = 12;
constexpr int kNV = 2;  // zmm vectors per row of the tile
constexpr int kNR = 16 * kNV;

// R rows (R <= kMR; the packed sliver stride is always kMR), NV vectors of 16 columns.
template <int R, int NV>
void kernel_rn(int64_t kc, const float* a, const float* b, int64_t ldb, float* c, int64_t ldc,
               int n, float alpha, float beta) {
  __m512 acc[R][NV];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < kc; ++p) {
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(b + 16 * v);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(a[r]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
    a += kMR;
    b += ldb;
  }

  const __m512 va = _mm512_set1_ps(alpha);
  const __m512 vb = _mm512_set1_ps(beta);
  if (n >= 16 * NV) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      float* cr = c + r * ldc;
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        __m512 x = _mm512_mul_ps(acc[r][v], va);
        if (beta != 0.0f) x = _mm512_fmadd_ps(vb, _mm512_loadu_ps(cr + 16 * v), x);
        _mm512_storeu_ps(cr + 16 * v, x);
      }
    }
  } else {
    __mmask16 mask[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const int rem = n - 16 * v;
      mask[v] =
          rem >= 16 ? __mmask16(0xFFFF) : (rem <= 0 ? __mmask16(0) : __mmask16((1u << rem) - 1u));
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      float* cr = c + r * ldc;
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        __m512 x = _mm512_mul_ps(acc[r][v], va);
        if (beta != 0.0f) x = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mask[v], cr + 16 * v), x);
        _mm512_mask_storeu_ps(cr + 16 * v, mask[v], x);
      }
    }
  }
}

// Wrapper with the MicroKernelFn signature (m is taken by the table index instead).
template <int R, int NV>
void kernel_entry(int64_t kc, const float* a, const float* b, int64_t ldb, float* c, int64_t ldc,
                  int m, int n, float alpha, float beta) {
  kernel_rn<R, NV>(kc, a, b, ldb, c, ldc, n, alpha, beta);
}

template <int NV, int... Rs>
constexpr void fill(MicroKernelFn* out, std::integer_sequence<int, Rs...>) {
  ((out[Rs + 1] = &kernel_entry<Rs + 1, NV>), ...);
}

struct Tables {
  MicroKernelFn full[kMR + 1];  // NV = 2
  MicroKernelFn half[kMR + 1];  // NV = 1, for tiles with n <= 16
  Tables() {
    fill<kNV>(full, std::make_integer_sequence<int, kMR>{});
    fill<1>(half, std::make_integer_sequence<int, kMR>{});
  }
};
const Tables kTables;

void micro(int64_t kc, const float* a, const float* b, int64_t ldb, float* c, int64_t ldc, int m,
           int n, float alpha, float beta) {
  const MicroKernelFn* t = n > 16 ? kTables.full : kTables.half;
  t[m](kc, a, b, ldb, c, ldc, m, n, alpha, beta);
}

void pack_a(bool trans, const float* A, int64_t lda, int64_t m, int64_t k, float* dst) {
  pack_a_generic<kMR>(trans, A, lda, m, k, dst);
}

void pack_b(bool trans, const float* B, int64_t ldb, int64_t k, int64_t n, float* dst) {
  pack_b_generic<kNR>(trans, B, ldb, k, n, dst);
}

const KernelSet kSet{"avx512",   kMR,    kNR,     /*kc=*/384, /*mc=*/1536,
                     /*nc=*/512, &micro, &pack_a, &pack_b};

}  // namespace

const KernelSet* avx512_kernels() {
  return &kSet;
}

}  // namespace kiln::kernels::gemm_detail

#else

#include "gemm_internal.h"

namespace kiln::kernels::gemm_detail {
const KernelSet* avx512_kernels() {
  return nullptr;
}
}  // namespace kiln::kernels::gemm_detail

#endif
