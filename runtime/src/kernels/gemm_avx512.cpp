// AVX-512 SGEMM microkernels (compiled with -mavx512f/bw/dq/vl; called only after a CPUID check in
// gemm.cpp). Register tile MR x NR = 12 x 32: 24 zmm accumulators, 2 zmm of B and one broadcast of
// A per row and k step. N edges use masked stores; M edges use a kernel instantiated for fewer
// rows, so edge tiles cost no more than their useful work.
#if defined(__x86_64__) && defined(__AVX512F__)

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "gemm_internal.h"

// GCC 12 reports the transposes' shuffles of fully initialized registers as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace kiln::kernels::gemm_detail {
namespace {

constexpr int kMR = 12;
constexpr int kNV = 2;  // zmm vectors per row of the tile
constexpr int kNR = 16 * kNV;

// A packed (a[p * kMR + r]), or read in place (kRowsA: a[r * lda + p], row-major op(A)): R rows
// (R <= kMR), NV vectors of 16 columns of B.
template <int R, int NV, bool kRowsA>
[[gnu::always_inline]] inline void accumulate(int64_t kc, const float* a, int64_t lda,
                                              const float* b, int64_t ldb, __m512 (&acc)[R][NV]) {
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
      const __m512 av = _mm512_set1_ps(kRowsA ? a[r * lda] : a[r]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
    a += kRowsA ? 1 : kMR;
    b += ldb;
  }
}

// C = alpha * acc + beta * C for the tile's first n columns (masked loads and stores), then the
// epilogue (bias, residual, relu/clamp) on the registers before the one store.
template <int R, int NV>
[[gnu::always_inline]] inline void store_tile(__m512 (&acc)[R][NV], float* c, int64_t ldc, int n,
                                              float alpha, float beta, const TileEpilogue* ep) {
  __mmask16 mask[NV];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) {
    const int rem = n - 16 * v;
    mask[v] =
        rem >= 16 ? __mmask16(0xFFFF) : (rem <= 0 ? __mmask16(0) : __mmask16((1u << rem) - 1u));
  }
  const __m512 va = _mm512_set1_ps(alpha);
  const __m512 vb = _mm512_set1_ps(beta);
  __m512 col_bias[NV];
  if (ep && ep->col_bias) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v)
      col_bias[v] = _mm512_maskz_loadu_ps(mask[v], ep->col_bias + 16 * v);
  }
  const TileEpilogue::Act act = ep ? ep->act : TileEpilogue::Act::None;
  const __m512 lo = _mm512_set1_ps(ep ? ep->lo : 0.0f), hi = _mm512_set1_ps(ep ? ep->hi : 0.0f);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    float* cr = c + r * ldc;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      __m512 x = alpha == 1.0f ? acc[r][v] : _mm512_mul_ps(acc[r][v], va);
      if (beta != 0.0f) x = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mask[v], cr + 16 * v), x);
      if (ep) {
        if (ep->row_bias) x = _mm512_add_ps(x, _mm512_set1_ps(ep->row_bias[r]));
        if (ep->col_bias) x = _mm512_add_ps(x, col_bias[v]);
        if (ep->residual)
          x = _mm512_add_ps(
              x, _mm512_maskz_loadu_ps(mask[v], ep->residual + r * ep->ld_residual + 16 * v));
        if (act == TileEpilogue::Act::Relu) {
          x = _mm512_max_ps(x, _mm512_setzero_ps());  // NaN -> 0
        } else if (act == TileEpilogue::Act::Clamp) {
          x = _mm512_min_ps(hi, _mm512_max_ps(lo, x));  // NaN propagates
        }
      }
      _mm512_mask_storeu_ps(cr + 16 * v, mask[v], x);
    }
  }
}

// One tile (the MicroKernelFn signature; m is taken by the table index instead).
template <int R, int NV>
void kernel_entry(int64_t kc, const float* a, const float* b, int64_t ldb, float* c, int64_t ldc,
                  int /*m*/, int n, float alpha, float beta, const TileEpilogue* ep) {
  __m512 acc[R][NV];
  accumulate<R, NV, false>(kc, a, 0, b, ldb, acc);
  store_tile<R, NV>(acc, c, ldc, n, alpha, beta, ep);
}

// A row of tiles with A read in place (KernelSet::kernel_row_rows): row r of the sliver at
// a + r * lda, unit stride along K. Packing one or a few rows of A costs a 16 x 16 transpose per 16
// values of K for those few rows (an RNN step's product against its packed weight). (No
// kernel_row for packed A: on full-size products a row per call measured no faster than a tile
// per call.)
template <int R>
void kernel_row_rows(int64_t kc, const float* a, int64_t lda, const float* b, int64_t b_next,
                     int64_t ldb, float* c, int64_t ldc, int /*m*/, int64_t n, float alpha,
                     float beta, const TileEpilogue* ep) {
  TileEpilogue e;
  if (ep) e = *ep;
  for (int64_t j = 0; j < n; j += kNR, b += b_next) {
    const int rest = static_cast<int>(std::min<int64_t>(kNR, n - j));
    const TileEpilogue t = columns_from(e, j);
    // Opaque per tile: otherwise GCC hoists the R row addresses out of the loop, spills them, and
    // reloads them in every tile's epilogue.
    int64_t ld = ldc;
    asm("" : "+r"(ld));
    if (rest > 16) {
      __m512 acc[R][kNV];
      accumulate<R, kNV, true>(kc, a, lda, b, ldb, acc);
      store_tile<R, kNV>(acc, c + j, ld, rest, alpha, beta, ep ? &t : nullptr);
    } else {
      __m512 acc[R][1];
      accumulate<R, 1, true>(kc, a, lda, b, ldb, acc);
      store_tile<R, 1>(acc, c + j, ld, rest, alpha, beta, ep ? &t : nullptr);
    }
  }
}

template <int NV, int... Rs>
constexpr void fill(MicroKernelFn* out, std::integer_sequence<int, Rs...>) {
  ((out[Rs + 1] = &kernel_entry<Rs + 1, NV>), ...);
}

template <int... Rs>
constexpr void fill_rows_a(MicroKernelRowAFn* out, std::integer_sequence<int, Rs...>) {
  ((out[Rs + 1] = &kernel_row_rows<Rs + 1>), ...);
}

struct Tables {
  MicroKernelFn full[kMR + 1]{};  // NV = 2
  MicroKernelFn half[kMR + 1]{};  // NV = 1, for tiles with n <= 16
  MicroKernelRowAFn rows_a[kMR + 1]{};
  constexpr Tables() {
    fill<kNV>(full, std::make_integer_sequence<int, kMR>{});
    fill<1>(half, std::make_integer_sequence<int, kMR>{});
    fill_rows_a(rows_a, std::make_integer_sequence<int, kMR>{});
  }
};
// Constant-initialized: no static constructor runs code compiled for an ISA the CPU may lack
// (this file's instructions run only after gemm.cpp's CPUID check).
constexpr Tables kTables;

void micro(int64_t kc, const float* a, const float* b, int64_t ldb, float* c, int64_t ldc, int m,
           int n, float alpha, float beta, const TileEpilogue* ep) {
  const MicroKernelFn* t = n > 16 ? kTables.full : kTables.half;
  t[m](kc, a, b, ldb, c, ldc, m, n, alpha, beta, ep);
}

void micro_row_rows(int64_t kc, const float* a, int64_t lda, const float* b, int64_t b_next,
                    int64_t ldb, float* c, int64_t ldc, int m, int64_t n, float alpha, float beta,
                    const TileEpilogue* ep) {
  kTables.rows_a[m](kc, a, lda, b, b_next, ldb, c, ldc, m, n, alpha, beta, ep);
}

// In-register transpose of a 16 x 16 block (r[i] = row i on entry, column i on exit): pairs of
// rows interleave (unpack), 4 x 4 blocks form within 128-bit lanes (shuffle_ps), then the 128-bit
// lanes are exchanged twice (shuffle_f32x4).
inline void transpose16(__m512 r[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int g = 0; g < 16; g += 4) {  // u[g + c]: column 4L + c of rows g..g+3 in lane L
    u[g + 0] = _mm512_shuffle_ps(t[g], t[g + 2], 0x44);
    u[g + 1] = _mm512_shuffle_ps(t[g], t[g + 2], 0xEE);
    u[g + 2] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0x44);
    u[g + 3] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0xEE);
  }
  for (int c = 0; c < 4; ++c) {
    t[c] = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);
    t[4 + c] = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD);
    t[8 + c] = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
    t[12 + c] = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);
  }
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0x88);
    r[8 + c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0xDD);
    r[4 + c] = _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0x88);
    r[12 + c] = _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0xDD);
  }
}

// dst[p * dst_stride + i] = src[i * lds + p] for i < rows (<= 16; zeros up to `width`), p < k:
// 16 x 16 blocks through registers, masked at the k edge. Stores `width` (16 or 12) floats per p.
inline void pack_transposed(const float* src, int64_t lds, int rows, int64_t k, float* dst,
                            int64_t dst_stride, int width) {
  const __mmask16 store_mask = width >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << width) - 1u);
  for (int64_t p = 0; p < k; p += 16) {
    const int rem = static_cast<int>(std::min<int64_t>(16, k - p));
    const __mmask16 m = rem == 16 ? __mmask16(0xFFFF) : __mmask16((1u << rem) - 1u);
    __m512 r[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i)
      r[i] = i < rows ? _mm512_maskz_loadu_ps(m, src + i * lds + p) : _mm512_setzero_ps();
    // The next 16 rows, one group ahead: short row runs that the hardware prefetcher misses.
    // (Integer address arithmetic: the next group may lie past the matrix; prefetches never fault.)
    const uintptr_t ahead = static_cast<uintptr_t>(16 * lds) * sizeof(float);
    for (int i = 0; i < 16; ++i)
      __builtin_prefetch(
          reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(src + i * lds + p) + ahead));
    transpose16(r);
    for (int q = 0; q < rem; ++q)
      _mm512_mask_storeu_ps(dst + (p + q) * dst_stride, store_mask, r[q]);
  }
}

void pack_a(bool trans, const float* A, int64_t lda, int64_t m, int64_t k, float* dst) {
  if (trans) return pack_a_generic<kMR>(trans, A, lda, m, k, dst);
  for (int64_t r0 = 0; r0 < m; r0 += kMR) {
    const int rows = static_cast<int>(std::min<int64_t>(kMR, m - r0));
    pack_transposed(A + r0 * lda, lda, rows, k, dst + r0 * k, kMR, kMR);
  }
}

void pack_b(bool trans, const float* B, int64_t ldb, int64_t k, int64_t n, float* dst) {
  if (!trans) return pack_b_generic<kNR>(trans, B, ldb, k, n, dst);
  for (int64_t j0 = 0; j0 < n; j0 += kNR) {
    const int cols = static_cast<int>(std::min<int64_t>(kNR, n - j0));
    float* d = dst + j0 * k;
    for (int h = 0; h < kNV; ++h) {
      const int rows = std::max(0, std::min(16, cols - 16 * h));
      pack_transposed(B + (j0 + 16 * h) * ldb, ldb, rows, k, d + 16 * h, kNR, 16);
    }
  }
}

// 4 rows of A against 4 rows of W: 16 zmm partial sums along K, 8 loads per 16 FMAs.
template <int MI>
void dot_tile_m(int n, int64_t K, float alpha, const float* A, int64_t lda, const float* W,
                int64_t ldw, float beta, float* C, int64_t ldc) {
  __m512 acc[MI][4];
#pragma GCC unroll 4
  for (int r = 0; r < MI; ++r) {
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) acc[r][q] = _mm512_setzero_ps();
  }
  const float* w[4];
  for (int q = 0; q < 4; ++q) w[q] = W + std::min(q, n - 1) * ldw;  // repeats the last row
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    __m512 wv[4];
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) wv[q] = _mm512_loadu_ps(w[q] + k);
#pragma GCC unroll 4
    for (int r = 0; r < MI; ++r) {
      const __m512 av = _mm512_loadu_ps(A + r * lda + k);
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) acc[r][q] = _mm512_fmadd_ps(av, wv[q], acc[r][q]);
    }
  }
  if (k < K) {
    const __mmask16 m = __mmask16((1u << (K - k)) - 1u);
    __m512 wv[4];
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) wv[q] = _mm512_maskz_loadu_ps(m, w[q] + k);
#pragma GCC unroll 4
    for (int r = 0; r < MI; ++r) {
      const __m512 av = _mm512_maskz_loadu_ps(m, A + r * lda + k);
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) acc[r][q] = _mm512_fmadd_ps(av, wv[q], acc[r][q]);
    }
  }
  // Four horizontal sums at once: interleave and add pairs, then fold the 128-bit lanes.
  for (int r = 0; r < MI; ++r) {
    const __m512 b0 = _mm512_add_ps(_mm512_unpacklo_ps(acc[r][0], acc[r][1]),
                                    _mm512_unpackhi_ps(acc[r][0], acc[r][1]));
    const __m512 b1 = _mm512_add_ps(_mm512_unpacklo_ps(acc[r][2], acc[r][3]),
                                    _mm512_unpackhi_ps(acc[r][2], acc[r][3]));
    __m512 c = _mm512_add_ps(_mm512_shuffle_ps(b0, b1, 0x44), _mm512_shuffle_ps(b0, b1, 0xEE));
    c = _mm512_add_ps(c, _mm512_shuffle_f32x4(c, c, 0x4E));
    c = _mm512_add_ps(c, _mm512_shuffle_f32x4(c, c, 0xB1));
    alignas(16) float sums[4];
    _mm_store_ps(sums, _mm512_castps512_ps128(c));
    for (int q = 0; q < n; ++q) {
      const float v = alpha * sums[q];
      float* cp = C + r * ldc + q;
      *cp = beta == 0.0f ? v : v + beta * *cp;
    }
  }
}

void dot_tile(int m, int n, int64_t K, float alpha, const float* A, int64_t lda, const float* W,
              int64_t ldw, float beta, float* C, int64_t ldc) {
  switch (m) {
    case 1:
      return dot_tile_m<1>(n, K, alpha, A, lda, W, ldw, beta, C, ldc);
    case 2:
      return dot_tile_m<2>(n, K, alpha, A, lda, W, ldw, beta, C, ldc);
    case 3:
      return dot_tile_m<3>(n, K, alpha, A, lda, W, ldw, beta, C, ldc);
    default:
      return dot_tile_m<4>(n, K, alpha, A, lda, W, ldw, beta, C, ldc);
  }
}

// Blocking 0: the GEMM driver fills it from the target description (target_params.cpp).
const KernelSet kSet{"avx512",
                     kMR,
                     kNR,
                     /*kc=*/0,
                     /*mc=*/0,
                     /*nc=*/0,
                     &micro,
                     &pack_a,
                     &pack_b,
                     &dot_tile,
                     /*kernel_row=*/nullptr,
                     &micro_row_rows};

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
