// The AVX-512 VNNI integer microkernel on byte quads (quant_internal.h): an 8 x 32 int32 tile in
// 16 zmm accumulators. Per K quad, two loads of B (16 columns of 4 bytes each) and one broadcast
// quad of A per row; `vpdpbusd` multiplies the uint8 bytes of one operand by the int8 bytes of
// the other and adds the four products of each lane into int32, wrapping (not `vpdpbusds`): the
// sums are exact modulo 2^32 and the true result fits int32 (qgemm.cpp checks K), so the wrapped
// value is the true one. Which operand holds the uint8 activations is a template parameter (A for
// qlinear, B for qconv2d). The requantize epilogue runs on the registers (the same float32
// operations as requantize_value) and narrows with saturating down-converts.
// The direct convolution's tile reads the same quads from the channels-last image in place.
// Built with -mavx512vnni (runtime/CMakeLists.txt); chosen only where CPUID reports it.
#include "quant_internal.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && \
    defined(__AVX512VL__) && defined(__AVX512VNNI__)

#include <immintrin.h>

#include <cstring>

#include "qgemm_avx512_epilogue.h"

namespace kiln::kernels::quant_detail {
namespace {

constexpr int kMR = 8;
constexpr int kNR = 32;

// acc + the dot products of u8 quads with s8 quads, as _mm512_dpbusd_epi32(acc, u8, s8). Written
// as an instruction: GCC 12's pattern for the intrinsic (shared with 256-bit AVX-VNNI, whose VEX
// encoding reaches only 16 registers) keeps its operands in zmm0-15, so a tile of 16
// accumulators plus its operands was copied between register halves on every step (two of them
// spilled), which cost more than the products themselves.
inline __m512i dpbusd(__m512i acc, __m512i u8, __m512i s8) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u8), "v"(s8));
  return acc;
}

// Requantizes the first m rows of a kRows-row tile of accumulators into t.
template <int kRows>
void store_tile(const __m512i (&acc)[kRows][2], int m, int n, const TileOut& t) {
  store_rows_avx512<kRows>(m, n, t, [&](int r, __m512i& a0, __m512i& a1) {
    a0 = acc[r][0];
    a1 = acc[r][1];
  });
}

// One K word of a tile: B's word panel (32 columns from b_word) times each row's quad(r),
// accumulated into acc; kAUnsigned: the rows' quads are the uint8 operand.
template <bool kAUnsigned, int kRows, typename Quad>
inline void dot_word(__m512i (&acc)[kRows][2], const int32_t* b_word, Quad&& quad) {
  const __m512i b0 = _mm512_loadu_si512(b_word);
  const __m512i b1 = _mm512_loadu_si512(b_word + 16);
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
    const __m512i av = _mm512_set1_epi32(quad(r));
    if constexpr (kAUnsigned) {
      acc[r][0] = dpbusd(acc[r][0], av, b0);
      acc[r][1] = dpbusd(acc[r][1], av, b1);
    } else {
      acc[r][0] = dpbusd(acc[r][0], b0, av);
      acc[r][1] = dpbusd(acc[r][1], b1, av);
    }
  }
}

// The 4 bytes at p as one word.
inline int32_t quad_at(const uint8_t* p) {
  int32_t quad;
  std::memcpy(&quad, p, 4);
  return quad;
}

// The first kRows rows of the tile (with_tile_rows): a one-row product costs two `vpdpbusd` per
// K quad, not sixteen.
template <bool kAUnsigned, int kRows>
void qtile_vnni(int64_t words, const int32_t* a, const int32_t* b, int m, int n, const TileOut& t) {
  __m512i acc[kRows][2];
  for (auto& row : acc) row[0] = row[1] = _mm512_setzero_si512();
  for (int64_t p = 0; p < words; ++p)
    dot_word<kAUnsigned>(acc, b + p * kNR, [&](int r) { return a[p * kMR + r]; });
  store_tile(acc, m, n, t);
}

// qtile_vnni<true> with the sliver's quads read from row-major rows `a_stride` bytes apart
// (QRowsKernelFn): the same products without packing the activations. kFull: m == kRows, each
// row addressed from a and the stride; otherwise a row past m re-reads row m - 1 (its results
// are not stored).
template <int kRows, bool kFull>
void qtile_vnni_rows(int64_t words, const uint8_t* a, int64_t a_stride, const int32_t* b, int m,
                     int n, const TileOut& t) {
  __m512i acc[kRows][2];
  for (auto& row : acc) row[0] = row[1] = _mm512_setzero_si512();
  const uint8_t* rows[kRows];
  if constexpr (!kFull)
    for (int r = 0; r < kRows; ++r) rows[r] = a + (r < m ? r : m - 1) * a_stride;
  for (int64_t p = 0; p < words; ++p)
    dot_word<true>(acc, b + p * kNR,
                   [&](int r) { return quad_at((kFull ? a + r * a_stride : rows[r]) + 4 * p); });
  store_tile(acc, m, n, t);
}

void qkernel_vnni_rows(int64_t words, const uint8_t* a, int64_t a_stride, const int32_t* b, int m,
                       int n, const TileOut& t) {
  if (m == kMR) return qtile_vnni_rows<kMR, true>(words, a, a_stride, b, m, n, t);
  with_tile_rows<kMR>(
      m, [&](auto rows) { qtile_vnni_rows<rows, false>(words, a, a_stride, b, m, n, t); });
}

// The direct convolution's tile (QDirectKernelFn): per K block (16 quads of one filter row) the
// kRows rows' quads come from the image at that block's offset, rows `a_stride` bytes apart;
// the activations are the uint8 operand, as in qkernel_vnni<true>.
template <int kRows>
void qdirect_tile_vnni(int64_t words, const uint8_t* a, int64_t a_stride, const int64_t* a_offsets,
                       const int32_t* b, int m, int n, const TileOut& t) {
  constexpr int kBlockWords = kDirectBlockBytes / 4;
  __m512i acc[kRows][2];
  for (auto& row : acc) row[0] = row[1] = _mm512_setzero_si512();
  for (int64_t p = 0, block = 0; p < words; p += kBlockWords, ++block) {
    const uint8_t* ak = a + a_offsets[block];
    const int32_t* bk = b + p * kNR;
    for (int w = 0; w < kBlockWords; ++w)
      dot_word<true>(acc, bk + w * kNR, [&](int r) { return quad_at(ak + r * a_stride + 4 * w); });
  }
  store_tile(acc, m, n, t);
}

void qconv_direct_vnni(int64_t words, const uint8_t* a, int64_t a_stride, const int64_t* a_offsets,
                       const int32_t* b, int m, int n, const TileOut& t) {
  with_tile_rows<kMR>(
      m, [&](auto rows) { qdirect_tile_vnni<rows>(words, a, a_stride, a_offsets, b, m, n, t); });
}

template <bool kAUnsigned>
void qkernel_vnni(int64_t words, const int32_t* a, const int32_t* b, int m, int n,
                  const TileOut& t) {
  with_tile_rows<kMR>(m, [&](auto rows) { qtile_vnni<kAUnsigned, rows>(words, a, b, m, n, t); });
}

}  // namespace

const QFamily* qgemm_avx512vnni_family() {
  static const QFamily f{
      "avx512-vnni", kMR, kNR, 4, qkernel_vnni<true>, qkernel_vnni<false>, 0, false,
      qconv_direct_vnni,
      // Between the ratios bench_conv's int8 rows ran faster direct (1) and slower (the stem's K
      // ratio 2.3; 24 and 16 channels' column ratios 1.33 and 2), on Zen 4, the one VNNI-only
      // CPU measured so far (bench/README.md): to re-measure on the next.
      1.2, 1.2, qkernel_vnni_rows};
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
