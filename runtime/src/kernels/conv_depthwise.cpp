// Direct depthwise conv2d (groups == C_in == C_out), float32, vectorized over the output width.
//
// Per (image, channel) plane the input is copied once into a zero-padded buffer that is also
// split into `stride_w` column phases: phase r holds padded columns r, r+sw, r+2sw, ... Then for
// any stride and dilation, output column ow reads tap (kh, kw) at
//     phase[(kw*dw) % sw][oh*sh + kh*dh][ow + (kw*dw) / sw]
// i.e. contiguous unit-stride loads: no gathers and no bounds checks in the inner loop. The
// padding border of the buffer is zeroed once per thread chunk and never written again. The
// inner loop keeps 4 AVX2 accumulators per output row chunk and runs all taps over them
// (3x3 is a compile-time specialization so the 9 taps are unrolled).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "conv_internal.h"
#include "kiln/runtime/allocator.h"
#include "kiln/runtime/thread_pool.h"

namespace kiln::kernels::conv_detail {
namespace {

constexpr int64_t kV = 8;  // floats per AVX2 vector

struct PlaneBuf {
  int64_t rows = 0;   // padded rows kept: (Ho-1)*sh + (KH-1)*dh + 1
  int64_t pitch = 0;  // floats per phase row (multiple of 8, covers the widest vector read)
  int64_t phases = 1;
  float* data = nullptr;
  float* phase(int64_t r) const { return data + r * rows * pitch; }
};

inline __m256 activate(__m256 v, const ConvEpilogue& ep) {
  switch (ep.activation) {
    case Activation::Relu:
      return _mm256_max_ps(v, _mm256_setzero_ps());
    case Activation::Relu6:
      return _mm256_min_ps(_mm256_max_ps(v, _mm256_setzero_ps()), _mm256_set1_ps(6.0f));
    case Activation::Clamp:
      return _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(ep.clamp_min)),
                           _mm256_set1_ps(ep.clamp_max));
    default:
      return v;
  }
}

inline bool vector_activation(Activation a) {
  return a == Activation::None || a == Activation::Relu || a == Activation::Relu6 ||
         a == Activation::Clamp;
}

inline __m256i tail_mask(int64_t n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), idx);
}

// Copies plane x[H, W] into the interior of the phase buffer (border already zero).
void fill_plane(const ConvGeom& g, const float* x, const PlaneBuf& b) {
  const int64_t sw = g.sw;
  const int64_t rows_in = std::min(g.H, b.rows - g.ph);  // input rows the outputs can reach
  for (int64_t ih = 0; ih < rows_in; ++ih) {
    const float* src = x + ih * g.W;
    const int64_t prow = (ih + g.ph) * b.pitch;
    if (sw == 1) {
      const int64_t n = std::min(g.W, b.pitch - g.pw);
      float* dst = b.data + prow + g.pw;
      if (n >= 64) {
        std::memcpy(dst, src, sizeof(float) * n);
      } else {
        for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
      }
    } else if (sw == 2) {
      // Evens of x go to phase pw%2 at offset pw/2, odds to phase (pw+1)%2 at (pw+1)/2.
      float* __restrict ev = b.phase(g.pw % 2) + prow + g.pw / 2;
      float* __restrict od = b.phase((g.pw + 1) % 2) + prow + (g.pw + 1) / 2;
      const int64_t ne = std::min((g.W + 1) / 2, b.pitch - g.pw / 2);
      const int64_t no = std::min(g.W / 2, b.pitch - (g.pw + 1) / 2);
      int64_t t = 0;
      for (; t + kV <= std::min(ne, no) && 2 * t + 2 * kV <= g.W; t += kV) {
        const __m256 a = _mm256_loadu_ps(src + 2 * t);
        const __m256 c = _mm256_loadu_ps(src + 2 * t + kV);
        const __m256 e = _mm256_shuffle_ps(a, c, _MM_SHUFFLE(2, 0, 2, 0));
        const __m256 o = _mm256_shuffle_ps(a, c, _MM_SHUFFLE(3, 1, 3, 1));
        _mm256_storeu_ps(ev + t, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e),
                                                                        _MM_SHUFFLE(3, 1, 2, 0))));
        _mm256_storeu_ps(od + t, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o),
                                                                        _MM_SHUFFLE(3, 1, 2, 0))));
      }
      for (int64_t k = t; k < ne; ++k) ev[k] = src[2 * k];
      for (int64_t k = t; k < no; ++k) od[k] = src[2 * k + 1];
    } else {
      for (int64_t iw = 0; iw < g.W; ++iw) {
        const int64_t jp = iw + g.pw;
        if (jp / sw < b.pitch) b.phase(jp % sw)[prow + jp / sw] = src[iw];
      }
    }
  }
}

// One output row: y[ow] = Σ_t w[t] * src[t][ow] (+ bias, residual, activation).
template <int kTaps>
void row_kernel(int64_t Wo, int ntaps_dyn, const float* const* src, const float* wt, float bias,
                const float* res, float* y, const ConvEpilogue& ep, bool vec_act) {
  const int ntaps = kTaps > 0 ? kTaps : ntaps_dyn;
  const __m256 vb = _mm256_set1_ps(bias);
  int64_t ow = 0;
  for (; ow + 4 * kV <= Wo; ow += 4 * kV) {
    __m256 a0 = vb, a1 = vb, a2 = vb, a3 = vb;
    for (int t = 0; t < ntaps; ++t) {
      const __m256 w = _mm256_broadcast_ss(wt + t);
      const float* s = src[t] + ow;
      a0 = _mm256_fmadd_ps(w, _mm256_loadu_ps(s), a0);
      a1 = _mm256_fmadd_ps(w, _mm256_loadu_ps(s + kV), a1);
      a2 = _mm256_fmadd_ps(w, _mm256_loadu_ps(s + 2 * kV), a2);
      a3 = _mm256_fmadd_ps(w, _mm256_loadu_ps(s + 3 * kV), a3);
    }
    if (res) {
      a0 = _mm256_add_ps(a0, _mm256_loadu_ps(res + ow));
      a1 = _mm256_add_ps(a1, _mm256_loadu_ps(res + ow + kV));
      a2 = _mm256_add_ps(a2, _mm256_loadu_ps(res + ow + 2 * kV));
      a3 = _mm256_add_ps(a3, _mm256_loadu_ps(res + ow + 3 * kV));
    }
    if (vec_act) {
      a0 = activate(a0, ep), a1 = activate(a1, ep), a2 = activate(a2, ep), a3 = activate(a3, ep);
    }
    _mm256_storeu_ps(y + ow, a0);
    _mm256_storeu_ps(y + ow + kV, a1);
    _mm256_storeu_ps(y + ow + 2 * kV, a2);
    _mm256_storeu_ps(y + ow + 3 * kV, a3);
  }
  // Remaining columns one vector at a time; the last one masked (the buffer is wide enough to
  // read a full vector, only the store is masked).
  for (; ow < Wo; ow += kV) {
    __m256 a = vb;
    for (int t = 0; t < ntaps; ++t)
      a = _mm256_fmadd_ps(_mm256_broadcast_ss(wt + t), _mm256_loadu_ps(src[t] + ow), a);
    const int64_t n = std::min<int64_t>(kV, Wo - ow);
    if (n == kV) {
      if (res) a = _mm256_add_ps(a, _mm256_loadu_ps(res + ow));
      if (vec_act) a = activate(a, ep);
      _mm256_storeu_ps(y + ow, a);
    } else {
      const __m256i m = tail_mask(n);
      if (res) a = _mm256_add_ps(a, _mm256_maskload_ps(res + ow, m));
      if (vec_act) a = activate(a, ep);
      _mm256_maskstore_ps(y + ow, m, a);
    }
  }
  if (!vec_act) {
    Epilogue e;
    e.activation = ep.activation;
    for (int64_t i = 0; i < Wo; ++i) y[i] = apply_activation(y[i], e);
  }
}

// tap_off[t]: offset of tap t = (kh, kw) in the phase buffer relative to the row start
// oh*sh*pitch (precomputed once: no divisions in the row loop).
template <int kTaps>
void plane(const ConvGeom& g, const PlaneBuf& b, const int64_t* tap_off, const float* wc,
           float bias, const float* res, float* y, const ConvEpilogue& ep, bool vec_act) {
  const int ntaps = kTaps > 0 ? kTaps : static_cast<int>(g.KH * g.KW);
  const float* src[kTaps > 0 ? kTaps : 64];
  std::vector<const float*> src_heap;
  const float** sp = src;
  if (kTaps == 0 && ntaps > 64) {
    src_heap.resize(static_cast<size_t>(ntaps));
    sp = src_heap.data();
  }
  const int64_t row_step = g.sh * b.pitch;
  for (int64_t oh = 0; oh < g.Ho; ++oh) {
    const float* base = b.data + oh * row_step;
    for (int t = 0; t < ntaps; ++t) sp[t] = base + tap_off[t];
    row_kernel<kTaps>(g.Wo, ntaps, sp, wc, bias, res ? res + oh * g.Wo : nullptr, y + oh * g.Wo, ep,
                      vec_act);
  }
}

}  // namespace

void depthwise_conv2d_f32(const ConvGeom& g, const float* x, const float* w, const float* bias,
                          const float* residual, float* y, const ConvEpilogue& ep) {
  PlaneBuf proto;
  proto.rows = (g.Ho - 1) * g.sh + (g.KH - 1) * g.dh + 1;
  proto.phases = g.sw;
  const int64_t max_q = (g.KW - 1) * g.dw / g.sw;          // largest column offset of a tap
  const int64_t need = (g.Wo + kV - 1) / kV * kV + max_q;  // widest vector read + 1
  proto.pitch = (need + kV - 1) / kV * kV;
  const int64_t buf_elems = proto.phases * proto.rows * proto.pitch;
  const int64_t planes = g.N * g.C, howo = g.HoWo(), KK = g.KH * g.KW;
  const bool vec_act = vector_activation(ep.activation);
  const bool k3x3 = g.KH == 3 && g.KW == 3;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(howo * KK, 1));
  std::vector<int64_t> tap_off(static_cast<size_t>(KK));
  for (int64_t kh = 0; kh < g.KH; ++kh)
    for (int64_t kw = 0; kw < g.KW; ++kw) {
      const int64_t c = kw * g.dw;
      tap_off[kh * g.KW + kw] =
          (c % g.sw) * proto.rows * proto.pitch + kh * g.dh * proto.pitch + c / g.sw;
    }

  parallel_for(0, planes, grain, [&](int64_t p0, int64_t p1) {
    const size_t bytes = static_cast<size_t>(buf_elems) * sizeof(float);
    PlaneBuf b = proto;
    b.data = static_cast<float*>(cpu_allocator().allocate(bytes));
    std::memset(b.data, 0, bytes);
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t c = p % g.C;
      fill_plane(g, x + p * g.HW(), b);
      const float* wc = w + c * KK;
      const float bv = bias ? bias[c] : 0.0f;
      const float* res = residual ? residual + p * howo : nullptr;
      if (k3x3) {
        plane<9>(g, b, tap_off.data(), wc, bv, res, y + p * howo, ep, vec_act);
      } else {
        plane<0>(g, b, tap_off.data(), wc, bv, res, y + p * howo, ep, vec_act);
      }
    }
    cpu_allocator().deallocate(b.data, bytes);
  });
}

}  // namespace kiln::kernels::conv_detail
