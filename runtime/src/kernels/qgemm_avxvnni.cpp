// The AVX-VNNI integer microkernel (256-bit `vpdpbusd`: Alder Lake and later cores, Zen 5, and the
// Xeons that have it beside AVX-512) on byte quads (quant_internal.h): a 6 x 16 int32 tile in 12
// ymm accumulators. Per K quad, two loads of B (8 columns of 4 bytes each) and one broadcast quad
// of A per row; the uint8 bytes of one operand times the int8 bytes of the other, four products
// per lane summed into int32 wrapping, exact as in the AVX-512 VNNI kernel (qgemm.cpp bounds K).
// The requantize epilogue is the AVX2 family's. Built with -mavxvnni (runtime/CMakeLists.txt);
// chosen only where CPUID reports avx_vnni.
#include "quant_internal.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__AVXVNNI__)

#include <immintrin.h>

#include "qgemm_avx2_epilogue.h"

namespace kiln::kernels::quant_detail {
namespace {

constexpr int kMR = 6;
constexpr int kNR = 16;

// The first kRows rows of the tile (with_tile_rows).
template <bool kAUnsigned, int kRows>
void qtile_avxvnni(int64_t words, const int32_t* a, const int32_t* b, int m, int n,
                   const TileOut& t) {
  __m256i acc[kRows][2];
  for (auto& row : acc) row[0] = row[1] = _mm256_setzero_si256();
  for (int64_t p = 0; p < words; ++p) {
    const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + p * kNR));
    const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + p * kNR + 8));
#pragma GCC unroll 6
    for (int r = 0; r < kRows; ++r) {
      const __m256i av = _mm256_set1_epi32(a[p * kMR + r]);
      if constexpr (kAUnsigned) {
        acc[r][0] = _mm256_dpbusd_avx_epi32(acc[r][0], av, b0);
        acc[r][1] = _mm256_dpbusd_avx_epi32(acc[r][1], av, b1);
      } else {
        acc[r][0] = _mm256_dpbusd_avx_epi32(acc[r][0], b0, av);
        acc[r][1] = _mm256_dpbusd_avx_epi32(acc[r][1], b1, av);
      }
    }
  }
  store_rows_avx2(m, n, t, [&](int r, __m256i& a0, __m256i& a1) {
    const int i = r < kRows ? r : kRows - 1;  // r < m <= kRows; said so for the compiler
    a0 = acc[i][0];
    a1 = acc[i][1];
  });
}

template <bool kAUnsigned>
void qkernel_avxvnni(int64_t words, const int32_t* a, const int32_t* b, int m, int n,
                     const TileOut& t) {
  with_tile_rows<kMR>(m, [&](auto rows) { qtile_avxvnni<kAUnsigned, rows>(words, a, b, m, n, t); });
}

}  // namespace

const QFamily* qgemm_avxvnni_family() {
  static const QFamily f{"avx-vnni", kMR, kNR, 4, qkernel_avxvnni<true>, qkernel_avxvnni<false>};
  return &f;
}

}  // namespace kiln::kernels::quant_detail

#else

namespace kiln::kernels::quant_detail {
const QFamily* qgemm_avxvnni_family() {
  return nullptr;
}
}  // namespace kiln::kernels::quant_detail

#endif
