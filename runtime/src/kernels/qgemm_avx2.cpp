// The AVX2 integer microkernel (the x86-64-v3 baseline) on int16 pairs (quant_internal.h): a
// 6 x 16 int32 tile in 12 ymm accumulators. Per K pair, two loads of B (8 columns of int16 pairs
// each) and one broadcast pair of A per row; `vpmaddwd` multiplies the int16 pairs exactly and sums
// each pair into int32 (no `vpmaddubsw` saturation: the operands were widened to int16 when
// packed). The requantize epilogue runs on the registers: float32 multiply, clamp, round half to
// even, zero point, narrow with saturating packs (the values are already in range), one 16-byte
// store per row.
#include "quant_internal.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)  // FMA: the float epilogue

#include <immintrin.h>

#include "qgemm_avx2_epilogue.h"

namespace kiln::kernels::quant_detail {
namespace {

constexpr int kMR = 6;
constexpr int kNR = 16;

// The first kRows rows of the tile (with_tile_rows).
template <int kRows>
void qtile_avx2(int64_t words, const int32_t* a, const int32_t* b, int m, int n, const TileOut& t) {
  __m256i acc[kRows][2];
  for (auto& row : acc) row[0] = row[1] = _mm256_setzero_si256();
  for (int64_t p = 0; p < words; ++p) {
    const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + p * kNR));
    const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + p * kNR + 8));
#pragma GCC unroll 6
    for (int r = 0; r < kRows; ++r) {
      const __m256i av = _mm256_set1_epi32(a[p * kMR + r]);
      acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(av, b0));
      acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(av, b1));
    }
  }
  store_rows_avx2(m, n, t, [&](int r, __m256i& a0, __m256i& a1) {
    const int i = r < kRows ? r : kRows - 1;  // r < m <= kRows; said so for the compiler
    a0 = acc[i][0];
    a1 = acc[i][1];
  });
}

void qkernel_avx2(int64_t words, const int32_t* a, const int32_t* b, int m, int n,
                  const TileOut& t) {
  with_tile_rows<kMR>(m, [&](auto rows) { qtile_avx2<rows>(words, a, b, m, n, t); });
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
