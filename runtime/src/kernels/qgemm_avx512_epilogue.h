#pragma once
// The AVX-512 requantize epilogue of the int8 microkernels (VNNI, AMX): the same float32
// operations as requantize_value, 16 lanes at a time, narrowed with saturating down-converts.
// Include only from files built with AVX-512 (*_avx512.cpp).

#include <immintrin.h>

#include "quant_internal.h"

// GCC 12 reports the `_mm512_undefined_*` pass-through operands inside the intrinsics' own
// definitions as maybe uninitialized once the epilogue is inlined into a tile: a false positive
// (for the files that include this header: the AVX-512 VNNI and AMX tiles).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace kiln::kernels::quant_detail {

inline __m512i requantize16(__m512i acc, __m512i bias, __m512 mult, __m512 lo, __m512 hi,
                            __m512i zp) {
  __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(acc, bias)), mult);
  v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
  // Converted in the current rounding mode, as requantize_value's nearbyint rounds (half to even
  // by default): one rounding instruction, not a round then a conversion.
  return _mm512_add_epi32(_mm512_cvtps_epi32(v), zp);
}

// Stores the first n (<= 16) lanes as bytes; the values are in the output's range already.
inline void store16(__m512i v, bool out_signed, char* dst, int n) {
  const __m128i b = out_signed ? _mm512_cvtsepi32_epi8(v) : _mm512_cvtusepi32_epi8(v);
  if (n >= 16)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), b);
  else if (n > 0)
    _mm_mask_storeu_epi8(dst, static_cast<__mmask16>((1u << n) - 1), b);
}

// dequantize_acc on 16 lanes: fma(float(acc + bias), mult, fbias).
inline __m512 dequantize16(__m512i acc, __m512i bias, __m512 mult, __m512 fbias) {
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(acc, bias)), mult, fbias);
}
inline void store16_f32(__m512 v, float* dst, int n) {
  if (n >= 16)
    _mm512_storeu_ps(dst, v);
  else if (n > 0)
    _mm512_mask_storeu_ps(dst, static_cast<__mmask16>((1u << n) - 1), v);
}

// Requantizes rows r < m, columns j < n (<= 32) of a tile whose row r is acc[r * ld_acc ...]
// (two vectors of 16 lanes each, both readable) into `t` (or dequantizes them: t.float_out).
// kRows > 0: at most that many rows, the loop unrolled over them so that a tile's accumulators
// are read with constant indices.
template <int kRows = 0, typename Row>
inline void store_rows_avx512(int m, int n, const TileOut& t, Row&& row) {
  const TileOut e = t;  // a local copy: the stores below could alias its fields
  const __m512 lo = _mm512_set1_ps(e.lo), hi = _mm512_set1_ps(e.hi);
  const __m512i zp = _mm512_set1_epi32(e.zp);
  __m512 col_mult[2], col_fbias[2];
  __m512i col_bias[2];
  if (e.col_step) {
    for (int v = 0; v < 2; ++v) {
      col_mult[v] = _mm512_loadu_ps(e.mult + 16 * v);
      col_bias[v] = e.bias ? _mm512_loadu_si512(e.bias + 16 * v) : _mm512_setzero_si512();
      col_fbias[v] = e.fbias ? _mm512_loadu_ps(e.fbias + 16 * v) : _mm512_setzero_ps();
    }
  }
  auto one_row = [&](int r) {
    __m512 mult[2], fbias[2];
    __m512i bias[2];
    if (e.col_step) {
      mult[0] = col_mult[0], mult[1] = col_mult[1];
      bias[0] = col_bias[0], bias[1] = col_bias[1];
      fbias[0] = col_fbias[0], fbias[1] = col_fbias[1];
    } else {
      const int64_t c = r * e.row_step;
      mult[0] = mult[1] = _mm512_set1_ps(e.mult[c]);
      bias[0] = bias[1] = _mm512_set1_epi32(e.bias ? e.bias[c] : 0);
      fbias[0] = fbias[1] = _mm512_set1_ps(e.fbias ? e.fbias[c] : 0.0f);
    }
    __m512i acc0, acc1;
    row(r, acc0, acc1);
    if (e.float_out) {
      float* out = static_cast<float*>(e.out) + r * e.ld;
      store16_f32(dequantize16(acc0, bias[0], mult[0], fbias[0]), out, n);
      store16_f32(dequantize16(acc1, bias[1], mult[1], fbias[1]), out + 16, n - 16);
      return;
    }
    char* dst = static_cast<char*>(e.out) + r * e.ld;
    store16(requantize16(acc0, bias[0], mult[0], lo, hi, zp), e.out_signed, dst, n);
    store16(requantize16(acc1, bias[1], mult[1], lo, hi, zp), e.out_signed, dst + 16, n - 16);
  };
  if constexpr (kRows > 0) {
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r)
      if (r < m) one_row(r);
  } else {
    for (int r = 0; r < m; ++r) one_row(r);
  }
}

inline void store_tile_avx512(const int32_t* acc, int64_t ld_acc, int m, int n, const TileOut& t) {
  store_rows_avx512(m, n, t, [&](int r, __m512i& a0, __m512i& a1) {
    a0 = _mm512_loadu_si512(acc + r * ld_acc);
    a1 = _mm512_loadu_si512(acc + r * ld_acc + 16);
  });
}

}  // namespace kiln::kernels::quant_detail
