#pragma once
// 8-float SIMD helpers shared by the x86-tuned kernels (conv, depthwise, GEMM packing), on
// simd_compat.h's AVX2 names (NEON on arm64).

#include "simd_compat.h"

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace kiln::kernels::simd {

// In-register transpose of an 8 x 8 block: r_i = row i on entry, column i on exit.
inline void transpose8(__m256& r0, __m256& r1, __m256& r2, __m256& r3, __m256& r4, __m256& r5,
                       __m256& r6, __m256& r7) {
  const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
  const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
  const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
  const __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  r0 = _mm256_permute2f128_ps(u0, u4, 0x20);
  r1 = _mm256_permute2f128_ps(u1, u5, 0x20);
  r2 = _mm256_permute2f128_ps(u2, u6, 0x20);
  r3 = _mm256_permute2f128_ps(u3, u7, 0x20);
  r4 = _mm256_permute2f128_ps(u0, u4, 0x31);
  r5 = _mm256_permute2f128_ps(u1, u5, 0x31);
  r6 = _mm256_permute2f128_ps(u2, u6, 0x31);
  r7 = _mm256_permute2f128_ps(u3, u7, 0x31);
}

inline void transpose8(__m256 (&r)[8]) {
  transpose8(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
}

// even = s[0], s[2], ..., s[14] and odd = s[1], s[3], ..., s[15]: a stride-2 row split into its
// two column phases (stride-2 convs read each phase with unit-stride loads).
inline void deinterleave2(const float* s, __m256& even, __m256& odd) {
  const __m256 a = _mm256_loadu_ps(s), c = _mm256_loadu_ps(s + 8);
  // shuffle_ps works within 128-bit halves: the 64-bit permute puts the halves' pairs in order.
  const __m256 e = _mm256_shuffle_ps(a, c, _MM_SHUFFLE(2, 0, 2, 0));
  const __m256 o = _mm256_shuffle_ps(a, c, _MM_SHUFFLE(3, 1, 3, 1));
  even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0)));
  odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), _MM_SHUFFLE(3, 1, 2, 0)));
}

// Lanes [0, n) set (n clamped to [0, 8]): masks for loads and stores at row ends.
inline __m256i tail_mask(int64_t n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n < 0 ? 0 : n > 8 ? 8 : n)), idx);
}

// Bytes base[at, at + n) (n <= 8) in the low bytes of a word; bytes past n hold any value. Reads
// only within base[0, total): 8 bytes from `at` where they exist, else the 8 ending at at + n
// (shifted down), else byte by byte. No partial copy through memory: a vector load of narrower
// stores stalls on store forwarding.
template <typename Byte>
inline uint64_t load8_bytes(const Byte* base, int64_t at, int64_t n, int64_t total) {
  static_assert(sizeof(Byte) == 1);
  uint64_t bits = 0;
  if (at + 8 <= total) {
    std::memcpy(&bits, base + at, 8);
  } else if (at + n >= 8) {
    std::memcpy(&bits, base + at + n - 8, 8);
    bits >>= 8 * (8 - n);
  } else {
    for (int64_t k = 0; k < n; ++k)
      bits |= static_cast<uint64_t>(static_cast<uint8_t>(base[at + k])) << (8 * k);
  }
  return bits;
}

#if defined(__x86_64__) || defined(_M_X64)
// The low 8 bytes of `b` (uint8 or int8 as Byte), each minus zp, as floats.
template <typename Byte>
inline __m256 widen_minus_zero_point(__m128i b, __m256i zp) {
  const __m256i v = std::is_signed_v<Byte> ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
  return _mm256_cvtepi32_ps(_mm256_sub_epi32(v, zp));
}
#endif

// The same bytes, each minus zp, as floats.
template <typename Byte>
inline __m256 bytes_minus_zero_point(const Byte* base, int64_t at, int64_t n, int64_t total,
                                     int32_t zp) {
  const uint64_t bits = load8_bytes(base, at, n, total);
#if defined(__x86_64__) || defined(_M_X64)
  return widen_minus_zero_point<Byte>(_mm_cvtsi64_si128(static_cast<long long>(bits)),
                                      _mm256_set1_epi32(zp));
#else
  alignas(32) float f[8];
  for (int k = 0; k < 8; ++k) {
    const auto byte = static_cast<Byte>(static_cast<uint8_t>(bits >> (8 * k)));
    f[k] = static_cast<float>(static_cast<int32_t>(byte) - zp);
  }
  return _mm256_load_ps(f);
#endif
}

}  // namespace kiln::kernels::simd
