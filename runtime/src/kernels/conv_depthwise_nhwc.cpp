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

// NO consecutive outputs from column ow of row oh, 8 channels from c, kernel rows [kh0, kh1) (all
// three when kFull: unrolled). One accumulator per output, so that the multiply-adds of different
// outputs overlap (2 outputs, each a chain of 9 dependent multiply-adds, ran at a third of the FMA
// rate). Per kernel row its 3 weights sit in registers and each input column is loaded once, by a
// pointer stepping C floats (offsets (o * SW + kw) * C for a runtime C were spilled to the stack),
// and feeds the up to 3 outputs it is a tap of.
template <int SW, int NO, bool kFull>
[[gnu::always_inline]] inline void interior_step(const float* xo, int64_t C, int64_t rs,
                                                 const float* wc, __m256 b, float* yo,
                                                 const ConvEpilogue& ep, int64_t kh0, int64_t kh1) {
  constexpr int kCols = (NO - 1) * SW + 3;  // input columns of NO outputs
  __m256 acc[NO];
#pragma GCC unroll 8
  for (int o = 0; o < NO; ++o) acc[o] = b;
  if constexpr (kFull) kh0 = 0, kh1 = 3;
#pragma GCC unroll 3
  for (int64_t kh = kh0; kh < kh1; ++kh) {
    const float* wr = wc + 3 * kh * C;
    const __m256 w0 = _mm256_loadu_ps(wr), w1 = _mm256_loadu_ps(wr + C),
                 w2 = _mm256_loadu_ps(wr + 2 * C);
    const float* xp = xo + kh * rs;
#pragma GCC unroll 32
    for (int j = 0; j < kCols; ++j, xp += C) {
      __m256 xv = _mm256_loadu_ps(xp);
#if defined(__x86_64__)
      asm("" : "+x"(xv));  // one load per column: GCC would fold it into each of its 3 FMAs
#endif
      // Column j is tap kw of output (j - kw) / SW.
      if (j % SW == 0 && j / SW < NO) acc[j / SW] = _mm256_fmadd_ps(w0, xv, acc[j / SW]);
      if (j >= 1 && (j - 1) % SW == 0 && (j - 1) / SW < NO)
        acc[(j - 1) / SW] = _mm256_fmadd_ps(w1, xv, acc[(j - 1) / SW]);
      if (j >= 2 && (j - 2) % SW == 0 && (j - 2) / SW < NO)
        acc[(j - 2) / SW] = _mm256_fmadd_ps(w2, xv, acc[(j - 2) / SW]);
    }
  }
#pragma GCC unroll 8
  for (int o = 0; o < NO; ++o, yo += C) _mm256_storeu_ps(yo, activate(acc[o], ep));
}

// 3x3 interior: output columns [ow0, ow1) of row oh whose taps all fall inside the row, kernel
// rows [kh0, kh1), 8 channels from c: steps of 8 outputs, then 4, 2, 1.
template <int SW, bool kFull>
void interior_3x3(const ConvGeom& g, const float* x, const float* w, const float* bias, float* y,
                  const ConvEpilogue& ep, int64_t oh, int64_t ow0, int64_t ow1, int64_t kh0,
                  int64_t kh1, int64_t c) {
  const int64_t C = g.C;
  const __m256 b = bias ? _mm256_loadu_ps(bias + c) : _mm256_setzero_ps();
  const int64_t rs = g.W * C;  // input row stride
  const float* xrow = x + (oh * g.sh - g.ph) * rs + c;
  const float* wc = w + c;
  float* yr = y + oh * g.Wo * C + c;
  int64_t ow = ow0;
  auto at = [&](int64_t o) { return xrow + (o * SW - g.pw) * C; };
  for (; ow + 8 <= ow1; ow += 8)
    interior_step<SW, 8, kFull>(at(ow), C, rs, wc, b, yr + ow * C, ep, kh0, kh1);
  if (ow + 4 <= ow1) {
    interior_step<SW, 4, kFull>(at(ow), C, rs, wc, b, yr + ow * C, ep, kh0, kh1);
    ow += 4;
  }
  if (ow + 2 <= ow1) {
    interior_step<SW, 2, kFull>(at(ow), C, rs, wc, b, yr + ow * C, ep, kh0, kh1);
    ow += 2;
  }
  if (ow < ow1) interior_step<SW, 1, kFull>(at(ow), C, rs, wc, b, yr + ow * C, ep, kh0, kh1);
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
