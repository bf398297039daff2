// The AVX-512 VNNI integer microkernel on byte quads (quant_internal.h): an 8 x 32 int32 tile in
// 16 zmm accumulators. Per K quad, two loads of B (16 columns of 4 bytes each) and one broadcast
// quad of A per row; `vpdpbusd` multiplies the uint8 bytes of one operand by the int8 bytes of
// the other and adds the four products of each lane into int32, wrapping (not `vpdpbusds`): the
// sums are exact modulo 2^32 and the true result fits int32 (qgemm.cpp checks K), so the wrapped
// value is the true one. Which operand holds the uint8 activations is a template parameter (A for
// qlinear, B for qconv2d). The requantize epilogue runs on the registers (the same float32
// operations as requantize_value) and narrows with saturating down-converts.
// Built with -mavx512vnni (runtime/CMakeLists.txt); chosen only where CPUID reports it.
#include "quant_internal.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && \
    defined(__AVX512VL__) && defined(__AVX512VNNI__)

#include <immintrin.h>

namespace kiln::kernels::quant_detail {
namespace {

constexpr int kMR = 8;
constexpr int kNR = 32;

inline __m512i requantize16(__m512i acc, __m512i bias, __m512 mult, __m512 lo, __m512 hi,
                            __m512i zp) {
  __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(acc, bias)), mult);
  v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
  v = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
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

template <bool kAUnsigned>
void qkernel_vnni(int64_t words, const int32_t* a, const int32_t* b, int m, int n,
                  const TileOut& t) {
  __m512i acc[kMR][2];
  for (auto& row : acc) row[0] = row[1] = _mm512_setzero_si512();
  for (int64_t p = 0; p < words; ++p) {
    const __m512i b0 = _mm512_loadu_si512(b + p * kNR);
    const __m512i b1 = _mm512_loadu_si512(b + p * kNR + 16);
#pragma GCC unroll 8
    for (int r = 0; r < kMR; ++r) {
      const __m512i av = _mm512_set1_epi32(a[p * kMR + r]);
      if constexpr (kAUnsigned) {
        acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], av, b0);
        acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], av, b1);
      } else {
        acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], b0, av);
        acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], b1, av);
      }
    }
  }
  const TileOut e = t;  // a local copy: the stores below could alias its fields
  const __m512 lo = _mm512_set1_ps(e.lo), hi = _mm512_set1_ps(e.hi);
  const __m512i zp = _mm512_set1_epi32(e.zp);
  __m512 col_mult[2];
  __m512i col_bias[2];
  if (e.col_step) {
    for (int v = 0; v < 2; ++v) {
      col_mult[v] = _mm512_loadu_ps(e.mult + 16 * v);
      col_bias[v] = e.bias ? _mm512_loadu_si512(e.bias + 16 * v) : _mm512_setzero_si512();
    }
  }
  for (int r = 0; r < m; ++r) {
    __m512 mult[2];
    __m512i bias[2];
    if (e.col_step) {
      mult[0] = col_mult[0], mult[1] = col_mult[1];
      bias[0] = col_bias[0], bias[1] = col_bias[1];
    } else {
      const int64_t c = r * e.row_step;
      mult[0] = mult[1] = _mm512_set1_ps(e.mult[c]);
      bias[0] = bias[1] = _mm512_set1_epi32(e.bias ? e.bias[c] : 0);
    }
    char* dst = static_cast<char*>(e.out) + r * e.ld;
    store16(requantize16(acc[r][0], bias[0], mult[0], lo, hi, zp), e.out_signed, dst, n);
    store16(requantize16(acc[r][1], bias[1], mult[1], lo, hi, zp), e.out_signed, dst + 16, n - 16);
  }
}

}  // namespace

const QFamily* qgemm_avx512vnni_family() {
  static const QFamily f{"avx512-vnni", kMR, kNR, 4, qkernel_vnni<true>, qkernel_vnni<false>};
  return &f;
}

}  // namespace kiln::kernels::quant_detail

#else

namespace kiln::kernels::quant_detail {
const QFamily* qgemm_avx512vnni_family() {
  return nullptr;
}
}  // namespace kiln::kernels::quant_detail

#endif
