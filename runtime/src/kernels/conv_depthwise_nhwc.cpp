// Depthwise conv over a channels-last image (conv_internal.h): the channels are the vector lanes,
// so every tap is one multiply-add per 8 channels with unit-stride loads, whatever the image
// width. The fused MBConv block uses it on small maps (14x14, 7x7), where the NCHW kernel must
// interleave channels into lanes and back.
#include "simd_compat.h"

#include <algorithm>

#include "conv_internal.h"

namespace kiln::kernels::conv_detail {
namespace {

// V vectors (8V channels from c) of output pixel (oh, ow) whose taps span rows [kh0, kh1) and
// columns [kw0, kw1) of the kernel (the others fall in the padding).
template <int V>
inline void pixel(const ConvGeom& g, const float* x, const float* w, const float* bias, float* y,
                  const ConvEpilogue& ep, int64_t ih0, int64_t iw0, int64_t kh0, int64_t kh1,
                  int64_t kw0, int64_t kw1, int64_t c) {
  const int64_t C = g.C;
  __m256 acc[V];
  for (int v = 0; v < V; ++v)
    acc[v] = bias ? _mm256_loadu_ps(bias + c + 8 * v) : _mm256_setzero_ps();
  for (int64_t kh = kh0; kh < kh1; ++kh) {
    const float* xr = x + ((ih0 + kh) * g.W + iw0) * C + c;
    const float* wr = w + kh * g.KW * C + c;
    for (int64_t kw = kw0; kw < kw1; ++kw) {
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v)
        acc[v] = _mm256_fmadd_ps(_mm256_loadu_ps(wr + kw * C + 8 * v),
                                 _mm256_loadu_ps(xr + kw * C + 8 * v), acc[v]);
    }
  }
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v) _mm256_storeu_ps(y + c + 8 * v, activate(acc[v], ep));
}

// 3x3 interior: output columns [ow0, ow1) of row oh whose taps all fall inside the row, kernel
// rows [kh0, kh1) (all three when kFull: unrolled), 8 channels from c. The 9 weights stay in
// registers; 2 outputs per step share their input vectors (4 loads per kernel row at stride 1, 5
// at stride 2, for 6 multiply-adds): 16 AVX2 registers in all.
template <int SW, bool kFull>
void interior_3x3(const ConvGeom& g, const float* x, const float* w, const float* bias, float* y,
                  const ConvEpilogue& ep, int64_t oh, int64_t ow0, int64_t ow1, int64_t kh0,
                  int64_t kh1, int64_t c) {
  const int64_t C = g.C;
  __m256 wv[9];
  for (int t = 0; t < 9; ++t) wv[t] = _mm256_loadu_ps(w + t * C + c);
  const __m256 b = bias ? _mm256_loadu_ps(bias + c) : _mm256_setzero_ps();
  const int64_t ih0 = oh * g.sh - g.ph;
  const int64_t rs = g.W * C;  // input row stride
  const float* xrow = x + ih0 * rs + c;
  float* yr = y + oh * g.Wo * C + c;
  if constexpr (kFull) kh0 = 0, kh1 = 3;
  int64_t ow = ow0;
  for (; ow + 2 <= ow1; ow += 2) {
    __m256 a0 = b, a1 = b;
    const float* xo = xrow + (ow * SW - g.pw) * C;
#pragma GCC unroll 3
    for (int64_t kh = kh0; kh < kh1; ++kh) {
      const float* xr = xo + kh * rs;
      constexpr int kIn = SW + 3;  // input columns of 2 outputs
      __m256 xv[kIn];
#pragma GCC unroll 5
      for (int i = 0; i < kIn; ++i) xv[i] = _mm256_loadu_ps(xr + i * C);
#pragma GCC unroll 3
      for (int kw = 0; kw < 3; ++kw) {
        a0 = _mm256_fmadd_ps(wv[3 * kh + kw], xv[kw], a0);
        a1 = _mm256_fmadd_ps(wv[3 * kh + kw], xv[SW + kw], a1);
      }
    }
    _mm256_storeu_ps(yr + ow * C, activate(a0, ep));
    _mm256_storeu_ps(yr + (ow + 1) * C, activate(a1, ep));
  }
  if (ow < ow1) {
    __m256 a = b;
    const float* xo = xrow + (ow * SW - g.pw) * C;
    for (int64_t kh = kh0; kh < kh1; ++kh)
      for (int kw = 0; kw < 3; ++kw)
        a = _mm256_fmadd_ps(wv[3 * kh + kw], _mm256_loadu_ps(xo + kh * rs + kw * C), a);
    _mm256_storeu_ps(yr + ow * C, activate(a, ep));
  }
}

}  // namespace

void depthwise_nhwc_f32(const ConvGeom& g, const float* x, const float* w, const float* bias,
                        float* y, const ConvEpilogue& ep, int64_t p0, int64_t p1) {
  if (p1 <= p0 || g.Wo <= 0) return;
  const int64_t C = g.C;
  const bool vec_act = vector_activation(ep.activation);
  Epilogue scalar_act;  // the activation for the channels past the last whole vector
  scalar_act.activation = ep.activation;
  scalar_act.clamp_min = ep.clamp_min, scalar_act.clamp_max = ep.clamp_max;
  const ConvEpilogue none{};
  const ConvEpilogue& vep = vec_act ? ep : none;  // others: applied after, one value at a time
  const int64_t c8 = C / 8 * 8;
  // 3x3 at stride 1 or 2: the interior columns (every tap inside the row) by vectors of 8
  // channels with the weights in registers; the rest pixel by pixel below.
  const bool fast = g.KH == 3 && g.KW == 3 && (g.sw == 1 || g.sw == 2) && c8 > 0;
  // Interior: ow*sw - pw >= 0 and ow*sw - pw + 2 < W.
  const int64_t in_lo = fast ? std::min(g.Wo, (g.pw + g.sw - 1) / g.sw) : 0;
  const int64_t in_hi = fast && g.W - 3 + g.pw >= 0
                            ? std::clamp<int64_t>((g.W - 3 + g.pw) / g.sw + 1, in_lo, g.Wo)
                            : in_lo;
  for (int64_t oh = p0 / g.Wo; oh * g.Wo < p1; ++oh) {
    const int64_t ow_begin = std::max<int64_t>(0, p0 - oh * g.Wo);
    const int64_t ow_end = std::min(g.Wo, p1 - oh * g.Wo);
    const int64_t ih0 = oh * g.sh - g.ph;
    const int64_t kh0 = std::max<int64_t>(0, -ih0), kh1 = std::min(g.KH, g.H - ih0);
    const int64_t lo = std::max(in_lo, ow_begin), hi = std::min(in_hi, ow_end);
    if (fast && hi > lo) {
      const bool full = kh0 == 0 && kh1 == 3;
      for (int64_t c = 0; c < c8; c += 8) {
        if (g.sw == 1)
          full ? interior_3x3<1, true>(g, x, w, bias, y, vep, oh, lo, hi, kh0, kh1, c)
               : interior_3x3<1, false>(g, x, w, bias, y, vep, oh, lo, hi, kh0, kh1, c);
        else
          full ? interior_3x3<2, true>(g, x, w, bias, y, vep, oh, lo, hi, kh0, kh1, c)
               : interior_3x3<2, false>(g, x, w, bias, y, vep, oh, lo, hi, kh0, kh1, c);
      }
    }
    for (int64_t ow = ow_begin; ow < ow_end; ++ow) {
      const bool interior_done = fast && ow >= lo && ow < hi;
      const int64_t iw0 = ow * g.sw - g.pw;
      const int64_t kw0 = std::max<int64_t>(0, -iw0), kw1 = std::min(g.KW, g.W - iw0);
      float* yp = y + (oh * g.Wo + ow) * C;
      int64_t c = interior_done ? c8 : 0;
      for (; c + 32 <= c8; c += 32)
        pixel<4>(g, x, w, bias, yp, vep, ih0, iw0, kh0, kh1, kw0, kw1, c);
      for (; c < c8; c += 8) pixel<1>(g, x, w, bias, yp, vep, ih0, iw0, kh0, kh1, kw0, kw1, c);
      for (; c < C; ++c) {
        float acc = bias ? bias[c] : 0.0f;
        for (int64_t kh = kh0; kh < kh1; ++kh)
          for (int64_t kw = kw0; kw < kw1; ++kw)
            acc += w[(kh * g.KW + kw) * C + c] * x[((ih0 + kh) * g.W + iw0 + kw) * C + c];
        yp[c] = apply_activation(acc, scalar_act);
      }
      if (!vec_act)
        for (c = 0; c < c8; ++c) yp[c] = apply_activation(yp[c], scalar_act);
    }
  }
}

}  // namespace kiln::kernels::conv_detail
