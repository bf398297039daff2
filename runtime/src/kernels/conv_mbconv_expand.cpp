// The fused mbconv block's expansion (a 1x1 conv) written straight into the channel-interleaved
// layout its depthwise reads (conv_internal.h: expand_interleaved). A GEMM would write the
// expanded rows as NCHW planes, which the depthwise then transposes 8 channels at a time into that
// layout (with the GEMM's packing of x, a tenth of a 56x56 block). Here the register tile is 6
// pixels x 16 channels: the lanes run over channels, so each accumulator is one pixel's 8 channels,
// stored as they are into two channel blocks. x is read in place (6 neighbouring pixels of one
// channel per step, broadcast); the expansion is short (16-32 input channels), so the whole
// reduction runs in registers.
#include "simd_compat.h"

#include "conv_internal.h"

namespace kiln::kernels::conv_detail {
namespace {

constexpr int kPanel = 16;  // output channels per weight panel: two vectors

// R pixels (x + r, channel c at x + c * x_plane) x the 16 channels of weight panel w ([C][16]):
// channels 0-7 to o0 + 8r, 8-15 to o1 + 8r (o1 null: past the last channel block).
template <int R>
void tile(int64_t C, const float* x, int64_t x_plane, const float* w, __m256 b0, __m256 b1,
          const ConvEpilogue& ep, float* o0, float* o1) {
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
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) _mm256_storeu_ps(o0 + 8 * r, activate(a[r][0], ep));
  if (o1) {
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) _mm256_storeu_ps(o1 + 8 * r, activate(a[r][1], ep));
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

void expand_interleaved(int64_t C, int64_t E, const float* x, int64_t x_plane, int64_t cols,
                        const float* w_panels, const float* bias, const ConvEpilogue& ep,
                        float* out, int64_t block_floats) {
  const int64_t blocks = (E + 7) / 8;
  for (int64_t q = 0; q * kPanel < E; ++q) {
    alignas(32) float lanes[kPanel];
    for (int j = 0; j < kPanel; ++j)
      lanes[j] = bias && q * kPanel + j < E ? bias[q * kPanel + j] : 0.0f;
    const __m256 b0 = _mm256_load_ps(lanes), b1 = _mm256_load_ps(lanes + 8);
    const float* w = w_panels + q * kPanel * C;
    float* o0 = out + 2 * q * block_floats;
    float* o1 = 2 * q + 1 < blocks ? o0 + block_floats : nullptr;
    auto at = [&](float* o, int64_t p) { return o ? o + 8 * p : nullptr; };
    int64_t p = 0;
    for (; p + 6 <= cols; p += 6) tile<6>(C, x + p, x_plane, w, b0, b1, ep, o0 + 8 * p, at(o1, p));
    switch (cols - p) {
      case 5:
        tile<5>(C, x + p, x_plane, w, b0, b1, ep, o0 + 8 * p, at(o1, p));
        break;
      case 4:
        tile<4>(C, x + p, x_plane, w, b0, b1, ep, o0 + 8 * p, at(o1, p));
        break;
      case 3:
        tile<3>(C, x + p, x_plane, w, b0, b1, ep, o0 + 8 * p, at(o1, p));
        break;
      case 2:
        tile<2>(C, x + p, x_plane, w, b0, b1, ep, o0 + 8 * p, at(o1, p));
        break;
      case 1:
        tile<1>(C, x + p, x_plane, w, b0, b1, ep, o0 + 8 * p, at(o1, p));
        break;
      default:
        break;
    }
  }
}

}  // namespace kiln::kernels::conv_detail
