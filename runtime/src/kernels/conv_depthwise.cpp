// Direct depthwise conv2d (groups == C_in == C_out), float32, AVX2.
//
// Wide outputs (Wo > 32; 3x3 stride <= 2: Wo > 128): vectorized over the output width, as follows.
// Per (image, channel) plane the input is copied once into a zero-padded buffer that is also
// split into `stride_w` column phases: phase r holds padded columns r, r+sw, r+2sw, ... Then for
// any stride and dilation, output column ow reads tap (kh, kw) at
//     phase[(kw*dw) % sw][oh*sh + kh*dh][ow + (kw*dw) / sw]
// i.e. contiguous unit-stride loads: no gathers and no bounds checks in the inner loop. The
// padding border of the buffer is zeroed once per thread chunk and never written again. The
// inner loop keeps 4 AVX2 accumulators per output row chunk and runs all taps over them
// (3x3 is a compile-time specialization so the 9 taps are unrolled).
#include "simd_compat.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "conv_internal.h"
#include "kiln/runtime/allocator.h"
#include "kiln/runtime/checked_math.h"
#include "kiln/runtime/target.h"
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

using simd::tail_mask;
using simd::transpose8;

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
        __m256 e, o;
        simd::deinterleave2(src + 2 * t, e, o);
        _mm256_storeu_ps(ev + t, e);
        _mm256_storeu_ps(od + t, o);
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

// ---- Channel-interleaved path for narrow outputs (Wo <= kNarrowWo) ----
// A row of 7 or 14 outputs fills one AVX2 vector badly and per-row overhead dominates. Instead, 8
// channels are processed together with the lanes over channels: the (padded) input of 8 planes is
// transposed into B[row][col][8], each output pixel is Σ_t w_t (8 channels' tap t, kept in
// registers) * B[pixel + tap offset], and the [pixel][8] results are transposed back.
// Measured on the MobileNetV2 layers: 2-3x faster than the width-vectorized path for Wo = 7 and
// 14, ~1.4x for Wo = 28; 3x3 convs (narrow_compute_3x3) also up to Wo = kNarrow3x3Wo.

constexpr int64_t kNarrowWo = 32;
// With narrow_compute_3x3 the interleaved path also wins for wider 3x3 outputs (MobileNetV2, one
// thread: 56 wide 1.55x, 112 wide 1.3x); beyond this the band buffer B outgrows L2.
constexpr int64_t kNarrow3x3Wo = 128;

// Per-thread plane buffers are bounded: padding and dilation from an artifact can make the padded
// plane of a 1x1 output 2^61 floats (whose byte count wraps). The bound follows the input plane
// (with legal-sized padding the buffers are 1-8 planes: large images keep this path) with a floor
// of 2^26 floats; beyond it the caller takes the im2col path, whose buffers follow the output.
constexpr int64_t kMinPlaneBound = int64_t(1) << 26;

// a * b * c when it is at most the bound for g's input plane, else -1.
int64_t plane_floats(const ConvGeom& g, int64_t a, int64_t b, int64_t c) {
  int64_t bound = 0, r = 0;
  if (!mul_ok(g.HW(), 16, bound)) bound = std::numeric_limits<int64_t>::max();
  bound = std::max(bound, kMinPlaneBound);
  if (!mul_ok(a, b, r) || !mul_ok(r, c, r) || r > bound) return -1;
  return r;
}
// Spare pixels after B and O for narrow_compute_3x3's whole steps of 4 outputs.
constexpr int64_t kNarrowSlack = 8;

struct NarrowGeom {
  int64_t Hb = 0, Wb = 0;  // padded rows / cols kept in B
};

// dst[k*8 .. k*8+8) = r[k] for k < n <= 8. Written out: as a loop GCC turns it into a spill of r
// and a `rep movsq` copy, whose start-up cost made the fill 40% of a 14x14 depthwise conv.
inline void store_first(float* dst, const __m256* r, int64_t n) {
  switch (n) {
    case 8:
      _mm256_storeu_ps(dst + 7 * kV, r[7]);
      [[fallthrough]];
    case 7:
      _mm256_storeu_ps(dst + 6 * kV, r[6]);
      [[fallthrough]];
    case 6:
      _mm256_storeu_ps(dst + 5 * kV, r[5]);
      [[fallthrough]];
    case 5:
      _mm256_storeu_ps(dst + 4 * kV, r[4]);
      [[fallthrough]];
    case 4:
      _mm256_storeu_ps(dst + 3 * kV, r[3]);
      [[fallthrough]];
    case 3:
      _mm256_storeu_ps(dst + 2 * kV, r[2]);
      [[fallthrough]];
    case 2:
      _mm256_storeu_ps(dst + 1 * kV, r[1]);
      [[fallthrough]];
    case 1:
      _mm256_storeu_ps(dst, r[0]);
      [[fallthrough]];
    default:
      break;
  }
}

// B[(ih+ph)*Wb + iw+pw][j] = x_j[ih][iw] for the cb <= 8 planes of an input whose element `at`
// load(at, n, mask) reads as floats (n <= 8 of them), channel j's row ih at start + j * plane +
// ih * width. One instantiation per input type: no per-vector dispatch in the copy.
template <typename Load>
void narrow_fill_with(const ConvGeom& g, const NarrowGeom& ng, int64_t start, int64_t plane,
                      int64_t width, int cb, float* B, Load load) {
  const int64_t rows = std::min(g.H, ng.Hb - g.ph), cols = std::min(g.W, ng.Wb - g.pw);
  const __m256 zero = _mm256_setzero_ps();
  for (int64_t ih = 0; ih < rows; ++ih) {
    float* brow = B + ((ih + g.ph) * ng.Wb + g.pw) * kV;
    for (int64_t iw = 0; iw < cols; iw += kV) {
      const int64_t n = std::min<int64_t>(kV, cols - iw);
      const __m256i m = tail_mask(n);
      __m256 r[8];
      for (int j = 0; j < 8; ++j)
        r[j] = j >= cb ? zero : load(start + j * plane + ih * width + iw, n, m);
      transpose8(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
      store_first(brow + iw * kV, r, n);
    }
  }
}

#if defined(__x86_64__) || defined(_M_X64)
// narrow_fill_with for bytes (the int8 kernel's input): 8 bytes of each of the 8 planes are
// transposed as bytes (three rounds of unpacks, one 8 x 8 byte block in four registers), then
// each pixel's 8 channel bytes widened, minus the zero point, converted. Converting each plane's
// 8 pixels first and transposing floats took three times the shuffles and spilled the block to
// the stack: the fill was two thirds of a stride-2 int8 layer.
template <typename Byte>
void narrow_fill_bytes(const ConvGeom& g, const NarrowGeom& ng, const Byte* x, int64_t total,
                       int32_t zero_point, int64_t start, int64_t plane, int64_t width, int cb,
                       float* B) {
  const int64_t rows = std::min(g.H, ng.Hb - g.ph), cols = std::min(g.W, ng.Wb - g.pw);
  const __m256i zp = _mm256_set1_epi32(zero_point);
  for (int64_t ih = 0; ih < rows; ++ih) {
    float* brow = B + ((ih + g.ph) * ng.Wb + g.pw) * kV;
    const int64_t row_at = start + ih * width;
    for (int64_t iw = 0; iw < cols; iw += kV) {
      const int64_t n = std::min<int64_t>(kV, cols - iw);
      __m128i r[8];
      const Byte* const at = x + row_at + iw;
      if (cb == 8 && n == kV && row_at + 7 * plane + iw + 8 <= total) {  // whole 8-byte loads
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j)
          r[j] = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(at + j * plane));
      } else {
        for (int j = 0; j < 8; ++j)
          r[j] = j < cb ? _mm_cvtsi64_si128(static_cast<long long>(
                              simd::load8_bytes(x, row_at + j * plane + iw, n, total)))
                        : _mm_setzero_si128();
      }
      // Byte pairs of channels (0,1), (2,3), ... per pixel; then quads; then each pixel's 8
      // channels as one 64-bit half: c[k] holds pixels 2k and 2k + 1.
      const __m128i a0 = _mm_unpacklo_epi8(r[0], r[1]), a1 = _mm_unpacklo_epi8(r[2], r[3]);
      const __m128i a2 = _mm_unpacklo_epi8(r[4], r[5]), a3 = _mm_unpacklo_epi8(r[6], r[7]);
      const __m128i b0 = _mm_unpacklo_epi16(a0, a1), b1 = _mm_unpackhi_epi16(a0, a1);
      const __m128i b2 = _mm_unpacklo_epi16(a2, a3), b3 = _mm_unpackhi_epi16(a2, a3);
      const __m128i c[4] = {_mm_unpacklo_epi32(b0, b2), _mm_unpackhi_epi32(b0, b2),
                            _mm_unpacklo_epi32(b1, b3), _mm_unpackhi_epi32(b1, b3)};
      __m256 px[8];
      for (int k = 0; k < 4; ++k) {
        px[2 * k] = simd::widen_minus_zero_point<Byte>(c[k], zp);
        px[2 * k + 1] = simd::widen_minus_zero_point<Byte>(_mm_unpackhi_epi64(c[k], c[k]), zp);
      }
      store_first(brow + iw * kV, px, n);
    }
  }
}
#endif

// The band's rows of the cb <= 8 planes of `in` from plane0, row `first` on, into B.
void narrow_fill(const ConvGeom& g, const NarrowGeom& ng, const DepthwiseInput& in, int64_t plane0,
                 int64_t first, int cb, float* B) {
  const int64_t start = plane0 * in.plane + first * in.width;
  if (in.f32) {
    const float* x = in.f32;
    narrow_fill_with(g, ng, start, in.plane, in.width, cb, B,
                     [x](int64_t at, int64_t n, __m256i m) {
                       return n == kV ? _mm256_loadu_ps(x + at) : _mm256_maskload_ps(x + at, m);
                     });
#if defined(__x86_64__) || defined(_M_X64)
  } else if (in.u8) {
    narrow_fill_bytes(g, ng, in.u8, in.count, in.zero_point, start, in.plane, in.width, cb, B);
  } else {
    narrow_fill_bytes(g, ng, in.s8, in.count, in.zero_point, start, in.plane, in.width, cb, B);
  }
#else
  } else if (in.u8) {
    narrow_fill_with(g, ng, start, in.plane, in.width, cb, B,
                     [&in](int64_t at, int64_t n, __m256i) {
                       return simd::bytes_minus_zero_point(in.u8, at, n, in.count, in.zero_point);
                     });
  } else {
    narrow_fill_with(g, ng, start, in.plane, in.width, cb, B,
                     [&in](int64_t at, int64_t n, __m256i) {
                       return simd::bytes_minus_zero_point(in.s8, at, n, in.count, in.zero_point);
                     });
  }
#endif
}

template <int kTaps>
void narrow_compute(const ConvGeom& g, const NarrowGeom& ng, const float* B, const __m256* wv,
                    int ntaps_dyn, const int64_t* tap_off8, __m256 bias, float* O) {
  const int ntaps = kTaps > 0 ? kTaps : ntaps_dyn;
  const int64_t px_step = g.sw * kV;
  for (int64_t oh = 0; oh < g.Ho; ++oh) {
    const float* rb = B + oh * g.sh * ng.Wb * kV;
    float* orow = O + oh * g.Wo * kV;
    int64_t ow = 0;
    for (; ow + 4 <= g.Wo; ow += 4) {
      __m256 a0 = bias, a1 = bias, a2 = bias, a3 = bias;
      const float* p = rb + ow * px_step;
      for (int t = 0; t < ntaps; ++t) {
        const float* q = p + tap_off8[t];
        a0 = _mm256_fmadd_ps(wv[t], _mm256_loadu_ps(q), a0);
        a1 = _mm256_fmadd_ps(wv[t], _mm256_loadu_ps(q + px_step), a1);
        a2 = _mm256_fmadd_ps(wv[t], _mm256_loadu_ps(q + 2 * px_step), a2);
        a3 = _mm256_fmadd_ps(wv[t], _mm256_loadu_ps(q + 3 * px_step), a3);
      }
      _mm256_storeu_ps(orow + ow * kV, a0);
      _mm256_storeu_ps(orow + (ow + 1) * kV, a1);
      _mm256_storeu_ps(orow + (ow + 2) * kV, a2);
      _mm256_storeu_ps(orow + (ow + 3) * kV, a3);
    }
    for (; ow < g.Wo; ++ow) {
      __m256 a = bias;
      const float* p = rb + ow * px_step;
      for (int t = 0; t < ntaps; ++t)
        a = _mm256_fmadd_ps(wv[t], _mm256_loadu_ps(p + tap_off8[t]), a);
      _mm256_storeu_ps(orow + ow * kV, a);
    }
  }
}

// 3x3, dilation 1, column stride SW (1 or 2): the 9 channel-vectors of weights stay in
// registers and the taps are immediate displacements from three row pointers (the generic loop
// above reloads both per tap). Four outputs per step, also past the end of a row: the surplus
// lands in the next row's slots of O, which that row then overwrites, and reads up to 3*SW pixels
// past a row of B (both buffers carry kNarrowSlack spare pixels). No single-output tail, whose 9
// dependent FMAs were latency-bound.
template <int SW>
void narrow_compute_3x3(const ConvGeom& g, const NarrowGeom& ng, const float* B, const __m256* wv,
                        __m256 bias, float* O) {
  const __m256 w0 = wv[0], w1 = wv[1], w2 = wv[2], w3 = wv[3], w4 = wv[4], w5 = wv[5], w6 = wv[6],
               w7 = wv[7], w8 = wv[8];
  const int64_t row = ng.Wb * kV;
  for (int64_t oh = 0; oh < g.Ho; ++oh) {
    const float* r0 = B + oh * g.sh * row;
    float* orow = O + oh * g.Wo * kV;
    for (int64_t ow = 0; ow < g.Wo; ow += 4) {
      const float* p0 = r0 + ow * SW * kV;
      const float* p1 = p0 + row;
      const float* p2 = p1 + row;
      __m256 acc[4];
      for (int j = 0; j < 4; ++j) {
        const int64_t o = j * SW * kV;
        __m256 a = _mm256_fmadd_ps(w0, _mm256_loadu_ps(p0 + o), bias);
        a = _mm256_fmadd_ps(w1, _mm256_loadu_ps(p0 + o + kV), a);
        a = _mm256_fmadd_ps(w2, _mm256_loadu_ps(p0 + o + 2 * kV), a);
        a = _mm256_fmadd_ps(w3, _mm256_loadu_ps(p1 + o), a);
        a = _mm256_fmadd_ps(w4, _mm256_loadu_ps(p1 + o + kV), a);
        a = _mm256_fmadd_ps(w5, _mm256_loadu_ps(p1 + o + 2 * kV), a);
        a = _mm256_fmadd_ps(w6, _mm256_loadu_ps(p2 + o), a);
        a = _mm256_fmadd_ps(w7, _mm256_loadu_ps(p2 + o + kV), a);
        acc[j] = _mm256_fmadd_ps(w8, _mm256_loadu_ps(p2 + o + 2 * kV), a);
      }
      for (int j = 0; j < 4; ++j) _mm256_storeu_ps(orow + (ow + j) * kV, acc[j]);
    }
  }
}

// Where narrow_store writes channel j of pixel p: dst + j * cstride + p (NCHW planes), or with
// nr > 0 dst + j * cstride + p / nr * panel + p % nr (a GEMM's packed right operand: cstride = nr).
struct NarrowOut {
  float* dst;
  int64_t cstride, nr = 0, panel = 0;
  float* at(int64_t p) const { return dst + (nr > 0 ? p / nr * panel + p % nr : p); }
};

// out(j, p) = act(O[p][j]) for p < count and the cb channels j (`act`: a vector activation applied
// on the way out, or none). Runs of 8 pixels never cross a panel (nr is a multiple of 8).
void narrow_store(int64_t count, const NarrowOut& out, const float* O, int cb,
                  const ConvEpilogue* act) {
  for (int64_t p = 0; p < count; p += kV) {
    const int64_t n = std::min<int64_t>(kV, count - p);
    __m256 r[8];
    for (int k = 0; k < 8; ++k)
      r[k] = _mm256_loadu_ps(O + (p + k) * kV);  // O: count rounded up to 8
    if (act)
      for (int k = 0; k < 8; ++k) r[k] = activate(r[k], *act);
    transpose8(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
    const __m256i m = tail_mask(n);
    float* base = out.at(p);
    for (int j = 0; j < cb; ++j) {
      float* q = base + j * out.cstride;
      if (n == kV) {
        _mm256_storeu_ps(q, r[j]);
      } else {
        _mm256_maskstore_ps(q, m, r[j]);
      }
    }
  }
}

// residual add + activation over a finished plane (the narrow path's epilogue).
void plane_epilogue(float* y, const float* res, int64_t n, const ConvEpilogue& ep) {
  const bool vec_act = vector_activation(ep.activation);
  int64_t i = 0;
  if (vec_act) {
    for (; i + kV <= n; i += kV) {
      __m256 v = _mm256_loadu_ps(y + i);
      if (res) v = _mm256_add_ps(v, _mm256_loadu_ps(res + i));
      _mm256_storeu_ps(y + i, activate(v, ep));
    }
  }
  Epilogue e;
  e.activation = ep.activation;
  e.clamp_min = ep.clamp_min;
  e.clamp_max = ep.clamp_max;
  for (; i < n; ++i) y[i] = apply_activation(y[i] + (res ? res[i] : 0.0f), e);
}

// Output rows per band: B's band (rows x Wb x 8 floats) near the target's depthwise_band_bytes,
// so that B and O stay in L2 for wide planes (112 x 112: 15 of 112 rows); narrow planes are one
// band.
int64_t narrow_band_rows(const ConvGeom& g, const NarrowGeom& ng) {
  const int64_t eff_h = (g.KH - 1) * g.dh + 1;
  const int64_t fit = rt::target_params().depthwise_band_bytes / 4 / (ng.Wb * kV);
  return std::clamp<int64_t>(fit > eff_h ? (fit - eff_h) / g.sh + 1 : 1, 1, g.Ho);
}

// The narrow path over every 8-channel block of `in` (or, with `xi`, of the already interleaved
// and padded input: `in` is not read), in bands of R output rows, each band's sums handed to
// `sink`.
// A template over the sink: the float path's (FloatSink, final) is called directly and inlined
// as the store was before the sinks; the int8 kernel's through DepthwiseSink, once per band.
template <typename Sink>
bool narrow_blocks(const ConvGeom& g, const DepthwiseInput& in, const float* w, const float* bias,
                   bool one_band, const float* xi, int64_t xi_block, const Sink& sink) {
  NarrowGeom ng;
  // Both within the padded input (make_geom): no overflow.
  ng.Hb = (g.Ho - 1) * g.sh + (g.KH - 1) * g.dh + 1;
  ng.Wb = (g.Wo - 1) * g.sw + (g.KW - 1) * g.dw + 1;
  // The whole padded plane is bounded (which also keeps every band product below in range),
  // though only a band of it is allocated.
  if (plane_floats(g, ng.Hb, ng.Wb, kV) < 0) return false;
  // Bands of R output rows: a band is a conv of its own (rows [lo, lo + Hb_band) of the padded
  // input, top padding only where lo < 0), run through the same fill/compute/store.
  // Panels: one band (a panel's pixels may span two bands' rows). The mbconv block's bands are
  // already small.
  const int64_t R = one_band || xi ? g.Ho : narrow_band_rows(g, ng);
  const int64_t band_hb = (R - 1) * g.sh + (g.KH - 1) * g.dh + 1;
  const int64_t b_floats = band_hb * ng.Wb * kV;
  const int64_t howo = g.HoWo(), KK = g.KH * g.KW;
  const int64_t band_px = (R * g.Wo + kV - 1) / kV * kV;
  std::vector<int64_t> tap_off8(static_cast<size_t>(KK));
  for (int64_t kh = 0; kh < g.KH; ++kh)
    for (int64_t kw = 0; kw < g.KW; ++kw)
      tap_off8[kh * g.KW + kw] = (kh * g.dh * ng.Wb + kw * g.dw) * kV;
  const int64_t cblocks = (g.C + kV - 1) / kV, blocks = g.N * cblocks;
  const bool k3x3 = g.KH == 3 && g.KW == 3 && g.dh == 1 && g.dw == 1;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(kV * howo * KK, 1));
  parallel_for(0, blocks, grain, [&](int64_t b0, int64_t b1) {
    const size_t b_bytes =
        xi ? 0 : static_cast<size_t>(b_floats + kNarrowSlack * kV) * sizeof(float);
    const size_t o_bytes = static_cast<size_t>((band_px + kNarrowSlack) * kV) * sizeof(float);
    float* B = xi ? nullptr : static_cast<float*>(cpu_allocator().allocate(b_bytes));
    float* O = static_cast<float*>(cpu_allocator().allocate(o_bytes));
    if (B) std::memset(B, 0, b_bytes);  // the left/right padding columns stay zero
    std::memset(O, 0, o_bytes);
    std::vector<__m256> wv(static_cast<size_t>(KK));
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t n = blk / cblocks, c0 = (blk % cblocks) * kV;
      const int cb = static_cast<int>(std::min<int64_t>(kV, g.C - c0));
      alignas(32) float lane[8];
      for (int64_t t = 0; t < KK; ++t) {
        // Whole blocks gather in registers: a vector load of 8 scalar stores stalls on store
        // forwarding (5% of a 14x14 layer).
        const float* wt = w + c0 * KK + t;
        if (cb == kV) {
          wv[t] = _mm256_setr_ps(wt[0], wt[KK], wt[2 * KK], wt[3 * KK], wt[4 * KK], wt[5 * KK],
                                 wt[6 * KK], wt[7 * KK]);
          continue;
        }
        for (int j = 0; j < 8; ++j) lane[j] = j < cb ? wt[j * KK] : 0.0f;
        wv[t] = _mm256_load_ps(lane);
      }
      for (int j = 0; j < 8; ++j) lane[j] = (bias && j < cb) ? bias[c0 + j] : 0.0f;
      const __m256 bv = _mm256_load_ps(lane);
      const int64_t plane0 = n * g.C + c0;
      for (int64_t oh0 = 0; oh0 < g.Ho; oh0 += R) {
        // The band as a conv: input rows [lo, lo + hb) of the padded input; those outside the
        // image are zero rows of B (written: B holds the previous band).
        ConvGeom gb = g;
        gb.Ho = std::min(R, g.Ho - oh0);
        NarrowGeom nb = ng;
        nb.Hb = (gb.Ho - 1) * g.sh + (g.KH - 1) * g.dh + 1;
        const int64_t lo = oh0 * g.sh - g.ph;
        const int64_t first = std::max<int64_t>(lo, 0), last = std::min(lo + nb.Hb, g.H);
        gb.ph = first - lo;
        gb.H = std::max<int64_t>(last - first, 0);
        const float* Bb = xi ? xi + (blk % cblocks) * xi_block : B;
        if (!xi) {
          if (gb.ph > 0) std::memset(B, 0, sizeof(float) * gb.ph * nb.Wb * kV);
          const int64_t below = gb.ph + gb.H;
          if (below < nb.Hb)
            std::memset(B + below * nb.Wb * kV, 0, sizeof(float) * (nb.Hb - below) * nb.Wb * kV);
          if (gb.H > 0) narrow_fill(gb, nb, in, plane0, first, cb, B);
        }
        if (k3x3 && g.sw == 1) {
          narrow_compute_3x3<1>(gb, nb, Bb, wv.data(), bv, O);
        } else if (k3x3 && g.sw == 2) {
          narrow_compute_3x3<2>(gb, nb, Bb, wv.data(), bv, O);
        } else if (KK == 9) {
          narrow_compute<9>(gb, nb, Bb, wv.data(), 9, tap_off8.data(), bv, O);
        } else {
          narrow_compute<0>(gb, nb, Bb, wv.data(), static_cast<int>(KK), tap_off8.data(), bv, O);
        }
        sink.store(plane0, c0, cb, oh0 * g.Wo, gb.Ho * g.Wo, O);
      }
    }
    if (B) cpu_allocator().deallocate(B, b_bytes);
    cpu_allocator().deallocate(O, o_bytes);
  });
  return true;
}

// Float results to NCHW planes (with the residual and activation) or, with nr > 0 (g.N == 1, no
// residual, a vector activation or none), to panels of nr pixels (depthwise_to_panels).
class FloatSink final : public DepthwiseSink {
 public:
  FloatSink(const ConvGeom& g, const float* residual, float* y, const ConvEpilogue& ep, int64_t nr)
      : g_(g), residual_(residual), y_(y), ep_(ep), nr_(nr) {
    // Without a residual a vector activation is applied in registers on the way out; otherwise
    // residual and activation run over each finished band.
    act_in_store_ = !residual && vector_activation(ep.activation);
    has_epi_ = !act_in_store_ && (residual || ep.activation != Activation::None);
  }
  void store(int64_t plane0, int64_t c0, int cb, int64_t off, int64_t count,
             const float* O) const override {
    const int64_t howo = g_.HoWo();
    const NarrowOut out = nr_ > 0 ? NarrowOut{y_ + c0 * nr_, nr_, nr_, g_.C * nr_}
                                  : NarrowOut{y_ + plane0 * howo + off, howo};
    narrow_store(count, out, O, cb, act_in_store_ ? &ep_ : nullptr);
    if (has_epi_)
      for (int j = 0; j < cb; ++j)
        plane_epilogue(y_ + (plane0 + j) * howo + off,
                       residual_ ? residual_ + (plane0 + j) * howo + off : nullptr, count, ep_);
  }

 private:
  const ConvGeom& g_;
  const float* residual_;
  float* y_;
  const ConvEpilogue& ep_;
  int64_t nr_;
  bool act_in_store_ = false, has_epi_ = false;
};

DepthwiseInput float_input(const ConvGeom& g, const float* x) {
  DepthwiseInput in;
  in.f32 = x;
  in.plane = g.XPlane();
  in.width = g.W;
  return in;
}

// y = depthwise(x), or with nr > 0 the output in panels (FloatSink). With `xi`, the input is
// already channel-interleaved and padded (depthwise_interleaved_to_panels): x is not read.
bool depthwise_narrow(const ConvGeom& g, const float* x, const float* w, const float* bias,
                      const float* residual, float* y, const ConvEpilogue& ep, int64_t nr = 0,
                      const float* xi = nullptr, int64_t xi_block = 0) {
  return narrow_blocks(g, float_input(g, x), w, bias, nr > 0, xi, xi_block,
                       FloatSink(g, residual, y, ep, nr));
}

}  // namespace

bool depthwise_narrow_fits(const ConvGeom& g) {
  const bool fast_3x3 = g.KH == 3 && g.KW == 3 && g.dh == 1 && g.dw == 1 && g.sw <= 2;
  return g.Wo <= kNarrowWo || (fast_3x3 && g.Wo <= kNarrow3x3Wo);
}

bool depthwise_narrow_to(const ConvGeom& g, const DepthwiseInput& x, const float* w,
                         const float* bias, const DepthwiseSink& sink) {
  return depthwise_narrow_fits(g) && narrow_blocks(g, x, w, bias, false, nullptr, 0, sink);
}

bool depthwise_panels_fit(const ConvGeom& g, const ConvEpilogue& ep, int64_t nr) {
  return depthwise_narrow_fits(g) && g.N == 1 && nr > 0 && nr % kV == 0 &&
         vector_activation(ep.activation);
}

bool depthwise_to_panels(const ConvGeom& g, const float* x, const float* w, const float* bias,
                         const ConvEpilogue& ep, int64_t nr, float* panels) {
  return depthwise_panels_fit(g, ep, nr) &&
         depthwise_narrow(g, x, w, bias, nullptr, panels, ep, nr);
}

bool depthwise_interleaved_to_panels(const ConvGeom& g, const float* xi, int64_t block_floats,
                                     const float* w, const float* bias, const ConvEpilogue& ep,
                                     int64_t nr, float* panels) {
  const int64_t wb = (g.Wo - 1) * g.sw + (g.KW - 1) * g.dw + 1;
  KILN_CHECK(g.ph == 0 && g.H == (g.Ho - 1) * g.sh + (g.KH - 1) * g.dh + 1 &&
                 block_floats >= (g.H * wb + kNarrowSlack) * kV,
             "depthwise", "expected an interleaved input of ", (g.Ho - 1) * g.sh + g.KH,
             " unpadded rows of ", wb, " padded columns, got ", g.H, " rows (padding ", g.ph,
             ") in blocks of ", block_floats, " floats");
  return depthwise_panels_fit(g, ep, nr) &&
         depthwise_narrow(g, nullptr, w, bias, nullptr, panels, ep, nr, xi, block_floats);
}

bool depthwise_conv2d_f32(const ConvGeom& g, const float* x, const float* w, const float* bias,
                          const float* residual, float* y, const ConvEpilogue& ep) {
  if (depthwise_narrow_fits(g)) {
    if (!depthwise_narrow(g, x, w, bias, residual, y, ep)) return false;
    // The generated epilogue: the narrow kernel writes channel blocks across the lanes, so it
    // runs on each plane afterwards.
    if (ep.block) {
      const int64_t howo = g.HoWo();
      parallel_for(0, g.N * g.C, std::max<int64_t>(1, 16384 / std::max<int64_t>(howo, 1)),
                   [&](int64_t p0, int64_t p1) {
                     ep.block.apply(y + p0 * howo, howo, p1 - p0, howo);
                   });
    }
    return true;
  }
  PlaneBuf proto;
  proto.rows = (g.Ho - 1) * g.sh + (g.KH - 1) * g.dh + 1;
  proto.phases = g.sw;
  const int64_t max_q = (g.KW - 1) * g.dw / g.sw;          // largest column offset of a tap
  const int64_t need = (g.Wo + kV - 1) / kV * kV + max_q;  // widest vector read + 1
  proto.pitch = (need + kV - 1) / kV * kV;
  const int64_t buf_elems = plane_floats(g, proto.phases, proto.rows, proto.pitch);
  if (buf_elems < 0) return false;
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
      fill_plane(g, x + p * g.XPlane(), b);
      const float* wc = w + c * KK;
      const float bv = bias ? bias[c] : 0.0f;
      const float* res = residual ? residual + p * howo : nullptr;
      if (k3x3) {
        plane<9>(g, b, tap_off.data(), wc, bv, res, y + p * howo, ep, vec_act);
      } else {
        plane<0>(g, b, tap_off.data(), wc, bv, res, y + p * howo, ep, vec_act);
      }
      ep.block.apply(y + p * howo, howo, 1, howo);  // the generated epilogue, the plane in cache
    }
    cpu_allocator().deallocate(b.data, bytes);
  });
  return true;
}

}  // namespace kiln::kernels::conv_detail
