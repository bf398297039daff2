// The arm64 integer microkernel on byte quads with the Armv8.2 dot products (`sdot`; Cortex-A76,
// A77, A78, Neoverse N1, Graviton 2, Apple M1: cores without I8MM) (quant_internal.h): an 8 x 8
// int32 tile in 16 q-register accumulators. Per K quad, two loads of B (4 columns of 4 bytes
// each) and two of A (8 quads), then per row one indexed `sdot` per half. The tile is requantized
// by the scalar epilogue. Built with +dotprod (runtime/CMakeLists.txt); chosen only where HWCAP
// reports asimddp, and below the I8MM family where both are present.
//
// Signedness. `sdot` multiplies signed by signed bytes (`udot` unsigned by unsigned); the int8
// weights are signed, the byte-quad activations of the other families unsigned (int8 ones offset
// by +128). This family is `signed_quads`: qgemm.cpp packs its activations as int8 instead,
// uint8 ones offset by -128 (x - 128 = x ^ 0x80, in range), int8 ones as they are, and its conv
// padding is that offset zero point; the activations' zero point enters the bias as for every
// byte-quad family, -zp * sum_k w with zp = x_zp - 128 (uint8) or x_zp (int8). So:
//   - the flip costs nothing in the kernel: it is one byte operation per activation while packing
//     (which already rewrites every byte, and int8 activations now need none), where flipping
//     per load would add two `eor`s per K quad to the sixteen `sdot`s on the same vector pipes;
//   - both operands being int8, `sdot` is symmetric: one kernel serves both operand orders
//     (qconv2d: A the weights, B the activations; qlinear: A the activations, B the weights);
//   - nothing in the int8 weights' packing or in prepared weights depends on the offset.
// Exactness. Each lane sums four int8 x int8 products (|p| <= 2^14) into an int32 that wraps like
// the other byte-quad families' sums, and the bias correction wraps the same way (qgemm.cpp's
// quad_bias), so acc + bias equals the reference's value modulo 2^32, i.e. exactly (the epilogue
// adds them modulo 2^32, as the reference does). The offset needs no tighter bound on K:
// qgemm.cpp admits K <= (2^31 - 1) / (x_bound * w_bound) with x_bound >= 128 (the farther end of
// an 8-bit range from any zero point) and w_bound = 128 (int8, zero point 0), and the signed
// lane sums are at most 128 * 128 * K in magnitude: they never even wrap, where the uint8 sums of
// the other families can (tests/runtime/test_qgemm.cpp's wrapped and largest-K cases).
#include "quant_internal.h"

#if defined(__aarch64__) && defined(__ARM_FEATURE_DOTPROD)

#include <arm_neon.h>

namespace kiln::kernels::quant_detail {
namespace {

constexpr int kMR = 8;
constexpr int kNR = 8;

// acc[r][h] += the dot products of row r (A quad `lane` of register a) with B half h.
template <int kLane>
inline void row_dot(int32x4_t& c0, int32x4_t& c1, int8x16_t b0, int8x16_t b1, int8x16_t a) {
  c0 = vdotq_laneq_s32(c0, b0, a, kLane);
  c1 = vdotq_laneq_s32(c1, b1, a, kLane);
}

// The first kRows rows of the tile (with_tile_rows; the others stay 0 and are not stored).
template <int kRows>
void qtile_dot(int64_t words, const int32_t* a, const int32_t* b, int m, int n, const TileOut& t) {
  int32x4_t acc[kMR][2];
  for (auto& row : acc) row[0] = row[1] = vdupq_n_s32(0);
  const int8_t* ap = reinterpret_cast<const int8_t*>(a);
  const int8_t* bp = reinterpret_cast<const int8_t*>(b);
  for (int64_t p = 0; p < words; ++p) {
    const int8x16_t b0 = vld1q_s8(bp + p * kNR * 4), b1 = vld1q_s8(bp + p * kNR * 4 + 16);
    const int8x16_t a0 = vld1q_s8(ap + p * kMR * 4);
    const int8x16_t a1 = kRows > 4 ? vld1q_s8(ap + p * kMR * 4 + 16) : a0;
    if constexpr (kRows > 0) row_dot<0>(acc[0][0], acc[0][1], b0, b1, a0);
    if constexpr (kRows > 1) row_dot<1>(acc[1][0], acc[1][1], b0, b1, a0);
    if constexpr (kRows > 2) row_dot<2>(acc[2][0], acc[2][1], b0, b1, a0);
    if constexpr (kRows > 3) row_dot<3>(acc[3][0], acc[3][1], b0, b1, a0);
    if constexpr (kRows > 4) row_dot<0>(acc[4][0], acc[4][1], b0, b1, a1);
    if constexpr (kRows > 5) row_dot<1>(acc[5][0], acc[5][1], b0, b1, a1);
    if constexpr (kRows > 6) row_dot<2>(acc[6][0], acc[6][1], b0, b1, a1);
    if constexpr (kRows > 7) row_dot<3>(acc[7][0], acc[7][1], b0, b1, a1);
  }
  int32_t out[kMR][kNR];
  for (int r = 0; r < kMR; ++r) {
    vst1q_s32(out[r], acc[r][0]);
    vst1q_s32(out[r] + 4, acc[r][1]);
  }
  store_tile_scalar(&out[0][0], kNR, m, n, t);
}

// Both operands are int8 quads: the same kernel for either operand order.
void qkernel_dot(int64_t words, const int32_t* a, const int32_t* b, int m, int n,
                 const TileOut& t) {
  with_tile_rows<kMR>(m, [&](auto rows) { qtile_dot<rows>(words, a, b, m, n, t); });
}

}  // namespace

const QFamily* qgemm_neon_dot_family() {
  static const QFamily f{"neon-dot", kMR, kNR, 4, qkernel_dot, qkernel_dot, 0, true};
  return &f;
}

}  // namespace kiln::kernels::quant_detail

#else

namespace kiln::kernels::quant_detail {
const QFamily* qgemm_neon_dot_family() {
  return nullptr;
}
}  // namespace kiln::kernels::quant_detail

#endif
