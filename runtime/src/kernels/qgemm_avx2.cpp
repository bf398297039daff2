// The AVX2 integer microkernel (the x86-64-v3 baseline) on int16 pairs (quant_internal.h): a
// 6 x 16 int32 tile in 12 ymm accumulators. Per K pair, two loads of B (8 columns of int16 pairs
// each) and one broadcast pair of A per row; `vpmaddwd` multiplies the int16 pairs exactly and sums
// each pair into int32 (no `vpmaddubsw` saturation: the operands were widened to int16 when
// packed). The requantize epilogue runs on the registers: float32 multiply, clamp, round half to
// even, zero point, narrow with saturating packs (the values are already in range), one 16-byte
// store per row.
#include "quant_internal.h"

#if defined(__x86_64__) && defined(__AVX2__)

#include <immintrin.h>

#include <cstring>

namespace kiln::kernels::quant_detail {
namespace {

constexpr int kMR = 6;
constexpr int kNR = 16;

// requantize_value on 8 lanes: the same float32 operations in the same order.
inline __m256i requantize8(__m256i acc, __m256i bias, __m256 mult, __m256 lo, __m256 hi,
                           __m256i zp) {
  __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(acc, bias)), mult);
  v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
  v = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return _mm256_add_epi32(_mm256_cvtps_epi32(v), zp);
}

void store_row(__m256i v0, __m256i v1, bool out_signed, void* dst, int n) {
  // packs_epi32 interleaves 128-bit lanes: [v0 0-3, v1 0-3, v0 4-7, v1 4-7]; put them in order.
  const __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(v0, v1), 0xD8);
  const __m128i lo = _mm256_castsi256_si128(w), hi = _mm256_extracti128_si256(w, 1);
  const __m128i b = out_signed ? _mm_packs_epi16(lo, hi) : _mm_packus_epi16(lo, hi);
  if (n == kNR) {
    _mm_storeu_si128(static_cast<__m128i*>(dst), b);
  } else {
    alignas(16) uint8_t tmp[kNR];
    _mm_store_si128(reinterpret_cast<__m128i*>(tmp), b);
    std::memcpy(dst, tmp, n);
  }
}

void qkernel_avx2(int64_t words, const int32_t* a, const int32_t* b, int m, int n,
                  const TileOut& t) {
  __m256i acc[kMR][2];
  for (auto& row : acc) row[0] = row[1] = _mm256_setzero_si256();
  for (int64_t p = 0; p < words; ++p) {
    const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + p * kNR));
    const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + p * kNR + 8));
#pragma GCC unroll 6
    for (int r = 0; r < kMR; ++r) {
      const __m256i av = _mm256_set1_epi32(a[p * kMR + r]);
      acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(av, b0));
      acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(av, b1));
    }
  }
  const TileOut e = t;  // a local copy: the stores below could alias its fields
  const __m256 lo = _mm256_set1_ps(e.lo), hi = _mm256_set1_ps(e.hi);
  const __m256i zp = _mm256_set1_epi32(e.zp);
  __m256 col_mult[2];
  __m256i col_bias[2];
  if (e.col_step) {
    for (int v = 0; v < 2; ++v) {
      col_mult[v] = _mm256_loadu_ps(e.mult + 8 * v);
      col_bias[v] = e.bias ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(e.bias + 8 * v))
                           : _mm256_setzero_si256();
    }
  }
  for (int r = 0; r < m; ++r) {
    __m256 mult[2];
    __m256i bias[2];
    if (e.col_step) {
      mult[0] = col_mult[0], mult[1] = col_mult[1];
      bias[0] = col_bias[0], bias[1] = col_bias[1];
    } else {
      const int64_t c = r * e.row_step;
      mult[0] = mult[1] = _mm256_set1_ps(e.mult[c]);
      bias[0] = bias[1] = _mm256_set1_epi32(e.bias ? e.bias[c] : 0);
    }
    const __m256i v0 = requantize8(acc[r][0], bias[0], mult[0], lo, hi, zp);
    const __m256i v1 = requantize8(acc[r][1], bias[1], mult[1], lo, hi, zp);
    store_row(v0, v1, e.out_signed, static_cast<char*>(e.out) + r * e.ld, n);
  }
}

}  // namespace

const QFamily* qgemm_avx2_family() {
  static const QFamily f{"avx2", kMR, kNR, 2, qkernel_avx2};
  return &f;
}

}  // namespace kiln::kernels::quant_detail

#else

namespace kiln::kernels::quant_detail {
const QFamily* qgemm_avx2_family() {
  return nullptr;
}
}  // namespace kiln::kernels::quant_detail

#endif
