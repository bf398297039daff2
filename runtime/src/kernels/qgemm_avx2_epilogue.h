#pragma once
// The AVX2 requantize epilogue of the int8 microkernels (AVX2 int16 pairs, AVX-VNNI byte quads):
// requantize_value on 8 lanes, the same float32 operations in the same order, narrowed with
// saturating packs (the values are already in range), one 16-byte store per row. Include only
// from files built with AVX2.

#include <immintrin.h>

#include <cstring>

#include "quant_internal.h"

namespace kiln::kernels::quant_detail {

inline __m256i requantize8(__m256i acc, __m256i bias, __m256 mult, __m256 lo, __m256 hi,
                           __m256i zp) {
  __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(acc, bias)), mult);
  v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
  // Converted in the current rounding mode, as requantize_value's nearbyint rounds (half to even
  // by default): one rounding instruction, not a round then a conversion.
  return _mm256_add_epi32(_mm256_cvtps_epi32(v), zp);
}

// The first n (<= 16) of 16 int32 lanes as bytes.
inline void store_row16(__m256i v0, __m256i v1, bool out_signed, void* dst, int n) {
  // packs_epi32 interleaves 128-bit lanes: [v0 0-3, v1 0-3, v0 4-7, v1 4-7]; put them in order.
  const __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(v0, v1), 0xD8);
  const __m128i lo = _mm256_castsi256_si128(w), hi = _mm256_extracti128_si256(w, 1);
  const __m128i b = out_signed ? _mm_packs_epi16(lo, hi) : _mm_packus_epi16(lo, hi);
  if (n == 16) {
    _mm_storeu_si128(static_cast<__m128i*>(dst), b);
  } else {
    alignas(16) uint8_t tmp[16];
    _mm_store_si128(reinterpret_cast<__m128i*>(tmp), b);
    std::memcpy(dst, tmp, n);
  }
}

// dequantize_acc on 8 lanes: fma(float(acc + bias), mult, fbias).
inline __m256 dequantize8(__m256i acc, __m256i bias, __m256 mult, __m256 fbias) {
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(acc, bias)), mult, fbias);
}
// The first n (<= 16) of 16 float32 lanes.
inline void store_row16_f32(__m256 v0, __m256 v1, float* dst, int n) {
  if (n == 16) {
    _mm256_storeu_ps(dst, v0);
    _mm256_storeu_ps(dst + 8, v1);
  } else {
    alignas(32) float tmp[16];
    _mm256_store_ps(tmp, v0);
    _mm256_store_ps(tmp + 8, v1);
    std::memcpy(dst, tmp, n * sizeof(float));
  }
}

// Requantizes rows r < m, columns j < n (<= 16) of a 16-column tile into `t` (or dequantizes
// them: t.float_out); row(r, a0, a1) gives row r's two vectors of accumulators.
template <typename Row>
inline void store_rows_avx2(int m, int n, const TileOut& t, Row&& row) {
  const TileOut e = t;  // a local copy: the stores below could alias its fields
  const __m256 lo = _mm256_set1_ps(e.lo), hi = _mm256_set1_ps(e.hi);
  const __m256i zp = _mm256_set1_epi32(e.zp);
  __m256 col_mult[2], col_fbias[2];
  __m256i col_bias[2];
  if (e.col_step) {
    for (int v = 0; v < 2; ++v) {
      col_mult[v] = _mm256_loadu_ps(e.mult + 8 * v);
      col_bias[v] = e.bias ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(e.bias + 8 * v))
                           : _mm256_setzero_si256();
      col_fbias[v] = e.fbias ? _mm256_loadu_ps(e.fbias + 8 * v) : _mm256_setzero_ps();
    }
  }
  for (int r = 0; r < m; ++r) {
    __m256 mult[2], fbias[2];
    __m256i bias[2];
    if (e.col_step) {
      mult[0] = col_mult[0], mult[1] = col_mult[1];
      bias[0] = col_bias[0], bias[1] = col_bias[1];
      fbias[0] = col_fbias[0], fbias[1] = col_fbias[1];
    } else {
      const int64_t c = r * e.row_step;
      mult[0] = mult[1] = _mm256_set1_ps(e.mult[c]);
      bias[0] = bias[1] = _mm256_set1_epi32(e.bias ? e.bias[c] : 0);
      fbias[0] = fbias[1] = _mm256_set1_ps(e.fbias ? e.fbias[c] : 0.0f);
    }
    __m256i a0, a1;
    row(r, a0, a1);
    if (e.float_out) {
      store_row16_f32(dequantize8(a0, bias[0], mult[0], fbias[0]),
                      dequantize8(a1, bias[1], mult[1], fbias[1]),
                      static_cast<float*>(e.out) + r * e.ld, n);
      continue;
    }
    const __m256i v0 = requantize8(a0, bias[0], mult[0], lo, hi, zp);
    const __m256i v1 = requantize8(a1, bias[1], mult[1], lo, hi, zp);
    store_row16(v0, v1, e.out_signed, static_cast<char*>(e.out) + r * e.ld, n);
  }
}

}  // namespace kiln::kernels::quant_detail
