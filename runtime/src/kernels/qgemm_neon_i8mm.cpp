// The arm64 integer microkernel on byte quads with the I8MM mixed-sign dot products (Armv8.6;
// Neoverse V1/N2, Graviton 3, Apple M2 and later) (quant_internal.h): an 8 x 8 int32 tile in 16
// q-register accumulators. Per K quad, two loads of B (4 columns of 4 bytes each) and two of A
// (8 quads), then per row one indexed dot product per half: `usdot` multiplies the uint8 bytes of
// B by a signed quad of A (qconv2d: A holds the int8 weights), `sudot` the signed bytes of B by an
// unsigned quad of A (qlinear: A holds the uint8 activations); four products per lane summed
// into int32 wrapping, exact as in the x86 byte-quad kernels (qgemm.cpp bounds K). The tile is
// requantized by the scalar epilogue. Built with +i8mm (runtime/CMakeLists.txt); chosen only
// where HWCAP2 reports i8mm.
#include "quant_internal.h"

#if defined(__aarch64__) && defined(__ARM_FEATURE_MATMUL_INT8)

#include <arm_neon.h>

namespace kiln::kernels::quant_detail {
namespace {

constexpr int kMR = 8;
constexpr int kNR = 8;

// acc[r][h] += the dot products of row r (A quad `lane` of register a) with B half h.
template <bool kAUnsigned, int kLane>
inline void row_dot(int32x4_t& c0, int32x4_t& c1, uint8x16_t b0, uint8x16_t b1, uint8x16_t a) {
  if constexpr (kAUnsigned) {
    c0 = vsudotq_laneq_s32(c0, vreinterpretq_s8_u8(b0), a, kLane);
    c1 = vsudotq_laneq_s32(c1, vreinterpretq_s8_u8(b1), a, kLane);
  } else {
    c0 = vusdotq_laneq_s32(c0, b0, vreinterpretq_s8_u8(a), kLane);
    c1 = vusdotq_laneq_s32(c1, b1, vreinterpretq_s8_u8(a), kLane);
  }
}

// The first kRows rows of the tile (with_tile_rows; the others stay 0 and are not stored).
template <bool kAUnsigned, int kRows>
void qtile_i8mm(int64_t words, const int32_t* a, const int32_t* b, int m, int n, const TileOut& t) {
  int32x4_t acc[kMR][2];
  for (auto& row : acc) row[0] = row[1] = vdupq_n_s32(0);
  const uint8_t* ap = reinterpret_cast<const uint8_t*>(a);
  const uint8_t* bp = reinterpret_cast<const uint8_t*>(b);
  for (int64_t p = 0; p < words; ++p) {
    const uint8x16_t b0 = vld1q_u8(bp + p * kNR * 4), b1 = vld1q_u8(bp + p * kNR * 4 + 16);
    const uint8x16_t a0 = vld1q_u8(ap + p * kMR * 4);
    const uint8x16_t a1 = kRows > 4 ? vld1q_u8(ap + p * kMR * 4 + 16) : a0;
    if constexpr (kRows > 0) row_dot<kAUnsigned, 0>(acc[0][0], acc[0][1], b0, b1, a0);
    if constexpr (kRows > 1) row_dot<kAUnsigned, 1>(acc[1][0], acc[1][1], b0, b1, a0);
    if constexpr (kRows > 2) row_dot<kAUnsigned, 2>(acc[2][0], acc[2][1], b0, b1, a0);
    if constexpr (kRows > 3) row_dot<kAUnsigned, 3>(acc[3][0], acc[3][1], b0, b1, a0);
    if constexpr (kRows > 4) row_dot<kAUnsigned, 0>(acc[4][0], acc[4][1], b0, b1, a1);
    if constexpr (kRows > 5) row_dot<kAUnsigned, 1>(acc[5][0], acc[5][1], b0, b1, a1);
    if constexpr (kRows > 6) row_dot<kAUnsigned, 2>(acc[6][0], acc[6][1], b0, b1, a1);
    if constexpr (kRows > 7) row_dot<kAUnsigned, 3>(acc[7][0], acc[7][1], b0, b1, a1);
  }
  int32_t out[kMR][kNR];
  for (int r = 0; r < kMR; ++r) {
    vst1q_s32(out[r], acc[r][0]);
    vst1q_s32(out[r] + 4, acc[r][1]);
  }
  store_tile_scalar(&out[0][0], kNR, m, n, t);
}

template <bool kAUnsigned>
void qkernel_i8mm(int64_t words, const int32_t* a, const int32_t* b, int m, int n,
                  const TileOut& t) {
  with_tile_rows<kMR>(m, [&](auto rows) { qtile_i8mm<kAUnsigned, rows>(words, a, b, m, n, t); });
}

}  // namespace

const QFamily* qgemm_neon_i8mm_family() {
  static const QFamily f{"neon-i8mm", kMR, kNR, 4, qkernel_i8mm<true>, qkernel_i8mm<false>};
  return &f;
}

}  // namespace kiln::kernels::quant_detail

#else

namespace kiln::kernels::quant_detail {
const QFamily* qgemm_neon_i8mm_family() {
  return nullptr;
}
}  // namespace kiln::kernels::quant_detail

#endif
