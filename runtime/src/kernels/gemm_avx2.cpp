// AVX2 + FMA SGEMM microkernels (the x86-64-v3 baseline, so callable on any x86 build of kiln).
// Register tile MR x NR = 6 x 16: 12 ymm accumulators, 2 ymm of B, one broadcast of A (15 of the
// 16 ymm registers). M edges use a kernel instantiated for fewer rows; N edges masked loads and
// stores.
#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)

#include <immintrin.h>

#include <utility>

#include "gemm_internal.h"
#include "simd_util.h"

namespace kiln::kernels::gemm_detail {
namespace {

constexpr int kMR = 6;
constexpr int kNV = 2;
constexpr int kNR = 8 * kNV;

// R rows (R <= kMR; the packed sliver stride is always kMR), NV vectors of 8 columns. The epilogue
// (bias, residual, relu/clamp) runs on the registers before the one store: a second pass over the
// stored tile cost 4x the product itself for K = 16 (MobileNetV2's 16 -> 96 expansion). N edges
// use masked loads and stores (kMasked; whole tiles take the plain ones).
template <int R, int NV, bool kMasked>
[[gnu::always_inline]] inline void store_tile(__m256 (&acc)[R][NV], float* c, int64_t ldc, int n,
                                              float alpha, float beta, const TileEpilogue* ep) {
  __m256i mask[NV];
  if constexpr (kMasked) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) mask[v] = simd::tail_mask(n - 8 * v);
  }
  auto load = [&](const float* p, int v) {
    if constexpr (kMasked)
      return _mm256_maskload_ps(p, mask[v]);
    else
      return _mm256_loadu_ps(p);
  };
  // Each step over the whole tile under one test: the epilogue's fields are read once (C's
  // stores could alias them, so per-element tests would reload them).
  auto each = [&](auto&& f) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) f(r, v, acc[r][v]);
    }
  };
  if (alpha != 1.0f) {
    const __m256 va = _mm256_set1_ps(alpha);
    each([&](int, int, __m256& x) { x = _mm256_mul_ps(x, va); });
  }
  if (beta != 0.0f) {
    const __m256 vb = _mm256_set1_ps(beta);
    each(
        [&](int r, int v, __m256& x) { x = _mm256_fmadd_ps(vb, load(c + r * ldc + 8 * v, v), x); });
  }
  if (ep) {
    const TileEpilogue e = *ep;
    if (e.row_bias)
      each([&](int r, int, __m256& x) {
        x = _mm256_add_ps(x, _mm256_broadcast_ss(e.row_bias + r));
      });
    if (e.col_bias) {
      __m256 cb[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) cb[v] = load(e.col_bias + 8 * v, v);
      each([&](int, int v, __m256& x) { x = _mm256_add_ps(x, cb[v]); });
    }
    if (e.residual)
      each([&](int r, int v, __m256& x) {
        x = _mm256_add_ps(x, load(e.residual + r * e.ld_residual + 8 * v, v));
      });
    if (e.act == TileEpilogue::Act::Relu) {
      each([&](int, int, __m256& x) { x = _mm256_max_ps(x, _mm256_setzero_ps()); });  // NaN -> 0
    } else if (e.act == TileEpilogue::Act::Clamp) {
      const __m256 lo = _mm256_set1_ps(e.lo), hi = _mm256_set1_ps(e.hi);
      each([&](int, int, __m256& x) { x = _mm256_min_ps(hi, _mm256_max_ps(lo, x)); });  // NaN stays
    }
  }
  each([&](int r, int v, __m256& x) {
    if constexpr (kMasked)
      _mm256_maskstore_ps(c + r * ldc + 8 * v, mask[v], x);
    else
      _mm256_storeu_ps(c + r * ldc + 8 * v, x);
  });
}

// A packed (a[p * kMR + r]), or read in place (kRowsA: a[r * lda + p], row-major op(A)).
template <int R, int NV, bool kRowsA = false>
[[gnu::always_inline]] inline void accumulate(int64_t kc, const float* a, int64_t lda,
                                              const float* b, int64_t ldb, __m256 (&acc)[R][NV]) {
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
      const __m256 av = _mm256_broadcast_ss(kRowsA ? a + r * lda : a + r);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
    }
    a += kRowsA ? 1 : kMR;
    b += ldb;
  }
}

template <int R, int NV>
void kernel_rn(int64_t kc, const float* a, const float* b, int64_t ldb, float* c, int64_t ldc,
               int /*m*/, int n, float alpha, float beta, const TileEpilogue* ep) {
  __m256 acc[R][NV];
  accumulate<R, NV>(kc, a, 0, b, ldb, acc);
  if (n >= 8 * NV)
    store_tile<R, NV, false>(acc, c, ldc, n, alpha, beta, ep);
  else
    store_tile<R, NV, true>(acc, c, ldc, n, alpha, beta, ep);
}

// A row of tiles (KernelSet::kernel_row): one call per A sliver instead of one per tile, so that
// the call, the epilogue's setup and the driver's bookkeeping are paid once per row (bench_gemm's
// conv shapes 2-12% faster, paired).
// kRowsA: A read in place, row r of the sliver at a + r * lda (KernelSet::kernel_row_rows).
template <int R, bool kRowsA>
void kernel_row_impl(int64_t kc, const float* a, int64_t lda, const float* b, int64_t b_next,
                     int64_t ldb, float* c, int64_t ldc, int64_t n, float alpha, float beta,
                     const TileEpilogue* ep) {
  TileEpilogue e;
  if (ep) e = *ep;
  int64_t j = 0;
  for (; j + kNR <= n; j += kNR, b += b_next) {
    __m256 acc[R][kNV];
    accumulate<R, kNV, kRowsA>(kc, a, lda, b, ldb, acc);
    const TileEpilogue t = columns_from(e, j);
    // Opaque per tile: otherwise GCC hoists the R row addresses (and the residual's) out of the
    // loop, spills them, and reloads them in every tile's epilogue.
    int64_t ld = ldc;
    asm("" : "+r"(ld));
    store_tile<R, kNV, false>(acc, c + j, ld, kNR, alpha, beta, ep ? &t : nullptr);
  }
  if (j < n) {
    const TileEpilogue t = columns_from(e, j);
    const int rest = static_cast<int>(n - j);
    if (rest > 8) {
      __m256 acc[R][kNV];
      accumulate<R, kNV, kRowsA>(kc, a, lda, b, ldb, acc);
      store_tile<R, kNV, true>(acc, c + j, ldc, rest, alpha, beta, ep ? &t : nullptr);
    } else {
      __m256 acc[R][1];
      accumulate<R, 1, kRowsA>(kc, a, lda, b, ldb, acc);
      store_tile<R, 1, true>(acc, c + j, ldc, rest, alpha, beta, ep ? &t : nullptr);
    }
  }
}

template <int R>
void kernel_row(int64_t kc, const float* a, const float* b, int64_t b_next, int64_t ldb, float* c,
                int64_t ldc, int /*m*/, int64_t n, float alpha, float beta,
                const TileEpilogue* ep) {
  kernel_row_impl<R, false>(kc, a, 0, b, b_next, ldb, c, ldc, n, alpha, beta, ep);
}

template <int R>
void kernel_row_rows(int64_t kc, const float* a, int64_t lda, const float* b, int64_t b_next,
                     int64_t ldb, float* c, int64_t ldc, int /*m*/, int64_t n, float alpha,
                     float beta, const TileEpilogue* ep) {
  kernel_row_impl<R, true>(kc, a, lda, b, b_next, ldb, c, ldc, n, alpha, beta, ep);
}

template <int NV, int... Rs>
constexpr void fill(MicroKernelFn* out, std::integer_sequence<int, Rs...>) {
  ((out[Rs + 1] = &kernel_rn<Rs + 1, NV>), ...);
}

template <int... Rs>
constexpr void fill_rows(MicroKernelRowFn* out, std::integer_sequence<int, Rs...>) {
  ((out[Rs + 1] = &kernel_row<Rs + 1>), ...);
}

template <int... Rs>
constexpr void fill_rows_a(MicroKernelRowAFn* out, std::integer_sequence<int, Rs...>) {
  ((out[Rs + 1] = &kernel_row_rows<Rs + 1>), ...);
}

struct Tables {
  MicroKernelFn full[kMR + 1]{};
  MicroKernelFn half[kMR + 1]{};  // n <= 8
  MicroKernelRowFn rows[kMR + 1]{};
  MicroKernelRowAFn rows_a[kMR + 1]{};
  constexpr Tables() {
    fill<kNV>(full, std::make_integer_sequence<int, kMR>{});
    fill<1>(half, std::make_integer_sequence<int, kMR>{});
    fill_rows(rows, std::make_integer_sequence<int, kMR>{});
    fill_rows_a(rows_a, std::make_integer_sequence<int, kMR>{});
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

void micro_row(int64_t kc, const float* a, const float* b, int64_t b_next, int64_t ldb, float* c,
               int64_t ldc, int m, int64_t n, float alpha, float beta, const TileEpilogue* ep) {
  kTables.rows[m](kc, a, b, b_next, ldb, c, ldc, m, n, alpha, beta, ep);
}

void micro_row_rows(int64_t kc, const float* a, int64_t lda, const float* b, int64_t b_next,
                    int64_t ldb, float* c, int64_t ldc, int m, int64_t n, float alpha, float beta,
                    const TileEpilogue* ep) {
  kTables.rows_a[m](kc, a, lda, b, b_next, ldb, c, ldc, m, n, alpha, beta, ep);
}

void pack_a(bool trans, const float* A, int64_t lda, int64_t m, int64_t k, float* dst) {
  if (trans) return pack_a_generic<kMR>(trans, A, lda, m, k, dst);
  // Row-major A (against a packed B only under KILN_GEMM_PACK_A=1: kernel_row_rows reads it in
  // place): whole slivers 8 columns at a time through an 8 x 8 transpose (rows 6 and 7 zero); the
  // scalar interleave of 6 row streams was a tenth of a channels-last mbconv block.
  const __m256i six = simd::tail_mask(kMR);
  int64_t r0 = 0;
  for (; r0 + kMR <= m; r0 += kMR) {
    const float* s = A + r0 * lda;
    float* d = dst + r0 * k;
    int64_t p = 0;
    for (; p + 8 <= k; p += 8) {
      __m256 r[8];
      for (int i = 0; i < kMR; ++i) r[i] = _mm256_loadu_ps(s + i * lda + p);
      r[6] = r[7] = _mm256_setzero_ps();
      simd::transpose8(r);
      float* o = d + p * kMR;
      // Column q's 6 values at o + 6q: 8-float stores in order, each overwritten past its 6 by
      // the next; the last one masked.
      for (int q = 0; q < 7; ++q) _mm256_storeu_ps(o + q * kMR, r[q]);
      _mm256_maskstore_ps(o + 7 * kMR, six, r[7]);
    }
    for (; p < k; ++p)
      for (int i = 0; i < kMR; ++i) d[p * kMR + i] = s[i * lda + p];
  }
  if (r0 < m) pack_a_generic<kMR>(false, A + r0 * lda, lda, m - r0, k, dst + r0 * k);
}

void pack_b(bool trans, const float* B, int64_t ldb, int64_t k, int64_t n, float* dst) {
  // Whole panels of a row-major B: two vector copies per row.
  const int64_t whole = trans ? 0 : n / kNR * kNR;
  for (int64_t j0 = 0; j0 < whole; j0 += kNR) {
    const float* s = B + j0;
    float* d = dst + j0 * k;
    for (int64_t p = 0; p < k; ++p) {
      _mm256_storeu_ps(d + p * kNR, _mm256_loadu_ps(s + p * ldb));
      _mm256_storeu_ps(d + p * kNR + 8, _mm256_loadu_ps(s + p * ldb + 8));
    }
  }
  if (whole < n)
    pack_b_generic<kNR>(trans, trans ? B + whole * ldb : B + whole, ldb, k, n - whole,
                        dst + whole * k);
}

// Blocking 0: the GEMM driver fills it from the target description (target_params.cpp).
const KernelSet kSet{"avx2", kMR,     kNR,     /*kc=*/0, /*mc=*/0,   /*nc=*/0,
                     &micro, &pack_a, &pack_b, nullptr,  &micro_row, &micro_row_rows};

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
