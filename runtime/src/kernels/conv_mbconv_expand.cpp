// The fused mbconv block's expansion (a 1x1 conv) written straight into the channel-interleaved
// layout its depthwise reads (conv_internal.h: expand_interleaved). A GEMM would write the
// expanded rows as NCHW planes, which the depthwise then transposes 8 channels at a time into that
// layout (with the GEMM's packing of x, a tenth of a 56x56 block). Here the register tile is 6
// pixels x 16 channels: the lanes run over channels, so each accumulator is one pixel's 8 channels,
// stored as they are into two channel blocks. x is read in place (6 neighbouring pixels of one
// channel per step, broadcast); the expansion is short (16-32 input channels), so the whole
// reduction runs in registers.
#include "simd_compat.h"

#include <limits>
#include <type_traits>

#include "conv_internal.h"

namespace kiln::kernels::conv_detail {
namespace {

constexpr int kPanel = 16;  // output channels per weight panel: two vectors

// The vector activations as one clamp to [lo, hi] (relu: [0, inf]), NaN to lo as activate()
// does; none without kClamp. Chosen once per row: activate()'s switch on every stored vector was
// a tenth of the kernel.
struct Clamp {
  float lo, hi;
};

// R pixels (x + r, channel c at x + c * x_plane) x the 16 channels of weight panel w ([C][16]):
// channels 0-7 to o0 + 8r, 8-15 to o1 + 8r (o1 null: past the last channel block).
// Not inlined: the bounds' registers must not stay live across the reduction (12 accumulators, 2
// weight vectors and a broadcast take 15 of the 16; a spilled accumulator made the kernel 1.4x
// slower).
template <int R, bool kClamp>
[[gnu::noinline]] void tile(int64_t C, const float* x, int64_t x_plane, const float* w, __m256 b0,
                            __m256 b1, const Clamp& ep, float* o0, float* o1) {
  __m256 a[R][2];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) a[r][0] = b0, a[r][1] = b1;
  for (int64_t c = 0; c < C; ++c, x += x_plane, w += kPanel) {
    const __m256 w0 = _mm256_loadu_ps(w), w1 = _mm256_loadu_ps(w + 8);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m256 xv = _mm256_broadcast_ss(x + r);
      a[r][0] = _mm256_fmadd_ps(xv, w0, a[r][0]);
      a[r][1] = _mm256_fmadd_ps(xv, w1, a[r][1]);
    }
  }
  if constexpr (kClamp) {
    const __m256 lo = _mm256_set1_ps(ep.lo), hi = _mm256_set1_ps(ep.hi);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      a[r][0] = _mm256_min_ps(_mm256_max_ps(a[r][0], lo), hi);
      a[r][1] = _mm256_min_ps(_mm256_max_ps(a[r][1], lo), hi);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) _mm256_storeu_ps(o0 + 8 * r, a[r][0]);
  if (o1) {
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) _mm256_storeu_ps(o1 + 8 * r, a[r][1]);
  }
}

}  // namespace

void pack_expand_panels(const float* we, int64_t E, int64_t C, float* out) {
  for (int64_t q = 0; q * kPanel < E; ++q)
    for (int64_t c = 0; c < C; ++c)
      for (int j = 0; j < kPanel; ++j) {
        const int64_t e = q * kPanel + j;
        out[(q * C + c) * kPanel + j] = e < E ? we[e * C + c] : 0.0f;
      }
}

namespace {

template <bool kClamp>
void expand_row(int64_t C, int64_t E, const float* x, int64_t x_plane, int64_t cols,
                const float* w_panels, const float* bias, const Clamp& ep, float* out,
                int64_t block_floats) {
  const int64_t blocks = (E + 7) / 8;
  for (int64_t q = 0; q * kPanel < E; ++q) {
    alignas(32) float lanes[kPanel];
    for (int j = 0; j < kPanel; ++j)
      lanes[j] = bias && q * kPanel + j < E ? bias[q * kPanel + j] : 0.0f;
    const __m256 b0 = _mm256_load_ps(lanes), b1 = _mm256_load_ps(lanes + 8);
    const float* w = w_panels + q * kPanel * C;
    float* o0 = out + 2 * q * block_floats;
    float* o1 = 2 * q + 1 < blocks ? o0 + block_floats : nullptr;
    int64_t p = 0;
    auto run = [&](auto rows) {
      constexpr int R = decltype(rows)::value;
      tile<R, kClamp>(C, x + p, x_plane, w, b0, b1, ep, o0 + 8 * p, o1 ? o1 + 8 * p : nullptr);
      p += R;
    };
    while (p + 6 <= cols) run(std::integral_constant<int, 6>{});
    switch (cols - p) {
      case 5:
        run(std::integral_constant<int, 5>{});
        break;
      case 4:
        run(std::integral_constant<int, 4>{});
        break;
      case 3:
        run(std::integral_constant<int, 3>{});
        break;
      case 2:
        run(std::integral_constant<int, 2>{});
        break;
      case 1:
        run(std::integral_constant<int, 1>{});
        break;
      default:
        break;
    }
  }
}

}  // namespace

void expand_interleaved(int64_t C, int64_t E, const float* x, int64_t x_plane, int64_t cols,
                        const float* w_panels, const float* bias, const ConvEpilogue& ep,
                        float* out, int64_t block_floats) {
  Clamp c{0.0f, std::numeric_limits<float>::infinity()};
  switch (ep.activation) {
    case Activation::None:
      return expand_row<false>(C, E, x, x_plane, cols, w_panels, bias, c, out, block_floats);
    case Activation::Relu6:
      c.hi = 6.0f;
      break;
    case Activation::Clamp:
      c.lo = ep.clamp_min, c.hi = ep.clamp_max;
      break;
    case Activation::Relu:
      break;
    default:
      KILN_CHECK(false, "mbconv",
                 "expected the expansion's activation to be none, relu, relu6 or "
                 "clamp, got ",
                 static_cast<int>(ep.activation));
  }
  expand_row<true>(C, E, x, x_plane, cols, w_panels, bias, c, out, block_floats);
}

}  // namespace kiln::kernels::conv_detail
