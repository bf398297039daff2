// transpose_bytes.h: 16 x 16 blocks of bytes in SSE2 registers (four rounds of interleaving:
// bytes, pairs, quads, halves), the edges scalar.
#include "transpose_bytes.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace kiln::kernels {

void transpose_bytes(const uint8_t* s, int64_t ls, uint8_t* d, int64_t ld, int64_t rows,
                     int64_t cols, uint8_t flip) {
  int64_t r0 = 0;
#if defined(__SSE2__)
  const __m128i f = _mm_set1_epi8(static_cast<char>(flip));
  for (; r0 + 16 <= rows; r0 += 16) {
    int64_t c0 = 0;
    for (; c0 + 16 <= cols; c0 += 16) {
      __m128i a[16], b[16], c[16];
      for (int i = 0; i < 16; ++i)
        a[i] = _mm_xor_si128(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + (r0 + i) * ls + c0)), f);
      for (int g = 0; g < 8; ++g) {  // b[2g + h]: rows 2g, 2g + 1, columns 8h..8h + 7
        b[2 * g] = _mm_unpacklo_epi8(a[2 * g], a[2 * g + 1]);
        b[2 * g + 1] = _mm_unpackhi_epi8(a[2 * g], a[2 * g + 1]);
      }
      for (int h = 0; h < 4; ++h)  // c[4h + k]: rows 4h..4h + 3, columns 4k..4k + 3
        for (int half = 0; half < 2; ++half) {
          c[4 * h + 2 * half] = _mm_unpacklo_epi16(b[4 * h + half], b[4 * h + 2 + half]);
          c[4 * h + 2 * half + 1] = _mm_unpackhi_epi16(b[4 * h + half], b[4 * h + 2 + half]);
        }
      for (int e = 0; e < 2; ++e)  // a[8e + j]: rows 8e..8e + 7, columns 2j, 2j + 1
        for (int k = 0; k < 4; ++k) {
          a[8 * e + 2 * k] = _mm_unpacklo_epi32(c[8 * e + k], c[8 * e + 4 + k]);
          a[8 * e + 2 * k + 1] = _mm_unpackhi_epi32(c[8 * e + k], c[8 * e + 4 + k]);
        }
      for (int j = 0; j < 8; ++j) {  // columns 2j and 2j + 1, all 16 rows
        _mm_storeu_si128(reinterpret_cast<__m128i*>(d + (c0 + 2 * j) * ld + r0),
                         _mm_unpacklo_epi64(a[j], a[8 + j]));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(d + (c0 + 2 * j + 1) * ld + r0),
                         _mm_unpackhi_epi64(a[j], a[8 + j]));
      }
    }
    for (int64_t c = c0; c < cols; ++c)
      for (int64_t r = r0; r < r0 + 16; ++r) d[c * ld + r] = s[r * ls + c] ^ flip;
  }
#endif
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t r = r0; r < rows; ++r) d[c * ld + r] = s[r * ls + c] ^ flip;
}

}  // namespace kiln::kernels
