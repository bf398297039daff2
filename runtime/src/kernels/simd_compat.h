#pragma once
// The 8-float AVX2 intrinsics the x86-tuned kernels use without a scalar twin (conv, depthwise
// conv, the NN row sums). On x86-64 this is just <immintrin.h>. Elsewhere (arm64 cross builds)
// it defines the same names, with x86 semantics, on GCC/Clang vector extensions, which the
// compiler lowers to pairs of NEON instructions: one kernel source for both, no second copy of
// the tuning to keep in step. Only what the kernels call is here; a new use fails to compile on
// arm64 (scripts/build_runtime_aarch64.sh) rather than silently doing something else.

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__)
#include <immintrin.h>
#else

#include <cmath>
#include <cstdint>
#include <cstring>

typedef float __m256 __attribute__((vector_size(32), __may_alias__));
typedef double __m256d __attribute__((vector_size(32), __may_alias__));
typedef int32_t __m256i __attribute__((vector_size(32), __may_alias__));

#define _MM_SHUFFLE(z, y, x, w) (((z) << 6) | ((y) << 4) | ((x) << 2) | (w))

inline __m256 _mm256_loadu_ps(const float* p) {
  __m256 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline __m256 _mm256_load_ps(const float* p) {
  return _mm256_loadu_ps(p);
}
inline void _mm256_storeu_ps(float* p, __m256 v) {
  std::memcpy(p, &v, sizeof v);
}
inline void _mm256_store_ps(float* p, __m256 v) {
  std::memcpy(p, &v, sizeof v);
}

inline __m256 _mm256_setzero_ps() {
  return __m256{};
}
inline __m256 _mm256_set1_ps(float x) {
  return __m256{x, x, x, x, x, x, x, x};
}
inline __m256 _mm256_setr_ps(float e0, float e1, float e2, float e3, float e4, float e5, float e6,
                             float e7) {
  return __m256{e0, e1, e2, e3, e4, e5, e6, e7};
}
inline __m256 _mm256_broadcast_ss(const float* p) {
  return _mm256_set1_ps(*p);
}

inline __m256 _mm256_add_ps(__m256 a, __m256 b) {
  return a + b;
}
inline __m256 _mm256_sub_ps(__m256 a, __m256 b) {
  return a - b;
}
inline __m256 _mm256_mul_ps(__m256 a, __m256 b) {
  return a * b;
}
// Fused, as on x86 (one rounding): the kernels' results then match the host bit for bit.
inline __m256 _mm256_fmadd_ps(__m256 a, __m256 b, __m256 c) {
  __m256 r;
  for (int i = 0; i < 8; ++i) r[i] = std::fma(a[i], b[i], c[i]);
  return r;
}
inline __m256 _mm256_fnmadd_ps(__m256 a, __m256 b, __m256 c) {  // -(a * b) + c, one rounding
  __m256 r;
  for (int i = 0; i < 8; ++i) r[i] = std::fma(-a[i], b[i], c[i]);
  return r;
}
// x86 max/min return the second operand when either is NaN (or both are zero).
inline __m256 _mm256_max_ps(__m256 a, __m256 b) {
  return a > b ? a : b;
}
inline __m256 _mm256_min_ps(__m256 a, __m256 b) {
  return a < b ? a : b;
}

// Within each 128-bit half: r = {a[i0], a[i1], b[i2], b[i3]} with i* from imm's 2-bit fields.
inline __m256 _mm256_shuffle_ps(__m256 a, __m256 b, int imm) {
  __m256 r;
  for (int h = 0; h < 8; h += 4) {
    r[h + 0] = a[h + ((imm >> 0) & 3)];
    r[h + 1] = a[h + ((imm >> 2) & 3)];
    r[h + 2] = b[h + ((imm >> 4) & 3)];
    r[h + 3] = b[h + ((imm >> 6) & 3)];
  }
  return r;
}
inline __m256 _mm256_unpacklo_ps(__m256 a, __m256 b) {
  return __m256{a[0], b[0], a[1], b[1], a[4], b[4], a[5], b[5]};
}
inline __m256 _mm256_unpackhi_ps(__m256 a, __m256 b) {
  return __m256{a[2], b[2], a[3], b[3], a[6], b[6], a[7], b[7]};
}
// Each result half picks a.lo, a.hi, b.lo or b.hi (imm bits 1:0 and 5:4), or zero (bits 3, 7).
inline __m256 _mm256_permute2f128_ps(__m256 a, __m256 b, int imm) {
  __m256 r;
  for (int h = 0; h < 2; ++h) {
    const int sel = (imm >> (4 * h)) & 0xf;
    const __m256& src = (sel & 2) ? b : a;
    const int off = (sel & 1) * 4;
    for (int i = 0; i < 4; ++i) r[4 * h + i] = (sel & 8) ? 0.0f : src[off + i];
  }
  return r;
}
inline __m256d _mm256_castps_pd(__m256 a) {
  __m256d r;
  std::memcpy(&r, &a, sizeof r);
  return r;
}
inline __m256 _mm256_castpd_ps(__m256d a) {
  __m256 r;
  std::memcpy(&r, &a, sizeof r);
  return r;
}
inline __m256d _mm256_permute4x64_pd(__m256d a, int imm) {
  return __m256d{a[imm & 3], a[(imm >> 2) & 3], a[(imm >> 4) & 3], a[(imm >> 6) & 3]};
}

inline __m256i _mm256_set1_epi32(int x) {
  return __m256i{x, x, x, x, x, x, x, x};
}
inline __m256i _mm256_setr_epi32(int e0, int e1, int e2, int e3, int e4, int e5, int e6, int e7) {
  return __m256i{e0, e1, e2, e3, e4, e5, e6, e7};
}
inline __m256i _mm256_cmpgt_epi32(__m256i a, __m256i b) {
  return a > b;
}
// Lanes whose mask has the sign bit set are loaded/stored; the others read as 0 / are untouched
// (and, as on x86, their memory is never accessed).
inline __m256 _mm256_maskload_ps(const float* p, __m256i mask) {
  __m256 r{};
  for (int i = 0; i < 8; ++i)
    if (mask[i] < 0) r[i] = p[i];
  return r;
}
inline void _mm256_maskstore_ps(float* p, __m256i mask, __m256 v) {
  for (int i = 0; i < 8; ++i)
    if (mask[i] < 0) p[i] = v[i];
}

#endif
