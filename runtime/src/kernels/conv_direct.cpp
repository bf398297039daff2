// Direct conv2d for few input channels (image stems: MobileNetV2's 3x3 stride-2 3 -> 32 at 224,
// ResNet's 7x7 stride-2 3 -> 64), float32, AVX2.
//
// im2col + GEMM handles these badly: K = C * KH * KW is small (27 for the 3x3 stem), so the GEMM
// spends as much time packing, storing and re-reading the column matrix as multiplying. Here the
// column matrix is never built. Per band of output rows, the input rows the band reads are copied
// once into a zero-padded buffer split into `stride_w` column phases (phase r holds padded columns
// r, r + sw, r + 2sw, ...), so tap (ci, kh, kw) of output column ow is the unit-stride load
//     buf[ci][kw % sw][oh * sh + kh][ow + kw / sw].
// A register tile is 4 output channels x 24 output columns (12 AVX2 accumulators, three input
// vectors, one broadcast weight): per tap, 3 loads and 4 broadcasts feed 12 FMAs.
#include "simd_compat.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "conv_internal.h"
#include "kiln/runtime/allocator.h"
#include "kiln/runtime/thread_pool.h"

namespace kiln::kernels::conv_detail {
namespace {

constexpr int64_t kV = 8;          // floats per AVX2 vector
constexpr int kCo = 4;             // output channels per register tile
constexpr int64_t kBandRows = 16;  // output rows per buffer fill (at most)
constexpr int64_t kMaxBufferFloats = int64_t(1) << 22;

using simd::tail_mask;

struct Band {
  int64_t rows = 0;   // padded input rows per (channel, phase) the buffer holds
  int64_t pitch = 0;  // floats per phase row: the widest vector read fits
  float* data = nullptr;
  float* row(const ConvGeom& g, int64_t ci, int64_t phase, int64_t r) const {
    return data + ((ci * g.sw + phase) * rows + r) * pitch;
  }
};

int64_t band_rows(const ConvGeom& g) {
  return (kBandRows - 1) * g.sh + g.KH;
}

int64_t band_pitch(const ConvGeom& g) {
  return ((g.Wo + kV - 1) / kV * kV + (g.KW - 1) / g.sw + kV - 1) / kV * kV;
}

// dst_p[i] = x[i * sw + p - pw] (zero outside the row) for each phase p and i < pitch; x null: a
// padding row (all zero).
void fill_row(const ConvGeom& g, const float* x, const Band& b, int64_t ci, int64_t r) {
  for (int64_t p = 0; p < g.sw; ++p) {
    float* d = b.row(g, ci, p, r);
    if (!x) {
      std::memset(d, 0, sizeof(float) * b.pitch);
      continue;
    }
    // Columns [lo, hi) of the phase read inside the row.
    const int64_t first = g.pw - p;  // i * sw >= first
    const int64_t lo = std::clamp<int64_t>(first <= 0 ? 0 : (first + g.sw - 1) / g.sw, 0, b.pitch);
    const int64_t hi = std::clamp<int64_t>((g.W + g.pw - p + g.sw - 1) / g.sw, lo, b.pitch);
    std::fill(d, d + lo, 0.0f);
    std::fill(d + hi, d + b.pitch, 0.0f);
    const float* s = x + lo * g.sw + p - g.pw;  // s[k * sw] = d[lo + k]
    const int64_t n = hi - lo;
    int64_t k = 0;
    if (g.sw == 1) {
      std::memcpy(d + lo, s, sizeof(float) * n);
      continue;
    }
    // sw == 2: the even lanes of two vectors, in order, while both vectors lie inside the row.
    const int64_t readable = g.W - (lo * g.sw + p - g.pw);
    for (; k + kV <= n && 2 * (k + kV) <= readable; k += kV) {
      __m256 even, odd;
      simd::deinterleave2(s + 2 * k, even, odd);
      _mm256_storeu_ps(d + lo + k, even);
    }
    for (; k < n; ++k) d[lo + k] = s[2 * k];
  }
}

// The epilogue's activation as a clamp to [lo, hi] (relu: [0, inf)), or none.
struct Clamp {
  bool on = false;
  __m256 lo, hi;
};

Clamp as_clamp(const ConvEpilogue& ep) {
  Clamp c;
  c.on = ep.activation != Activation::None;
  const float inf = std::numeric_limits<float>::infinity();
  float lo = 0.0f, hi = inf;
  if (ep.activation == Activation::Relu6) hi = 6.0f;
  if (ep.activation == Activation::Clamp) lo = ep.clamp_min, hi = ep.clamp_max;
  c.lo = _mm256_set1_ps(lo);
  c.hi = _mm256_set1_ps(hi);
  return c;
}

// y[c][ow + j] (c < nco, j < 8 * V, the last vector's first `last` lanes) =
// clamp(bias[c] + Σ_t wr[t][c] * src[off[t] + j] + res[c][ow + j]); `plane` floats between two
// channels of y and res.
template <int V, bool kClamp>
[[gnu::always_inline]] inline void tile(const float* src, const int64_t* off, int64_t taps,
                                        const float* wr, const float* bias, int nco, float* y,
                                        const float* res, int64_t plane, int last,
                                        const Clamp& act) {
  __m256 acc[kCo][V];
#pragma GCC unroll 4
  for (int c = 0; c < kCo; ++c) {
    const __m256 b = _mm256_broadcast_ss(bias + c);
#pragma GCC unroll 3
    for (int v = 0; v < V; ++v) acc[c][v] = b;
  }
#pragma GCC unroll 3
  for (int64_t t = 0; t < taps; ++t) {
    const float* p = src + off[t];
    __m256 x[V];
#pragma GCC unroll 3
    for (int v = 0; v < V; ++v) x[v] = _mm256_loadu_ps(p + v * kV);
    const float* w = wr + t * kCo;
#pragma GCC unroll 4
    for (int c = 0; c < kCo; ++c) {
      const __m256 wc = _mm256_broadcast_ss(w + c);
#pragma GCC unroll 3
      for (int v = 0; v < V; ++v) acc[c][v] = _mm256_fmadd_ps(wc, x[v], acc[c][v]);
    }
  }
  const __m256i m = tail_mask(last);
  const __m256 lo = act.lo, hi = act.hi;
  // Constant indices only (both loops unrolled): a variable index into acc would keep the
  // accumulators in memory across the tap loop.
#pragma GCC unroll 4
  for (int c = 0; c < kCo; ++c) {
    if (c >= nco) break;
#pragma GCC unroll 3
    for (int v = 0; v < V; ++v) {
      __m256 a = acc[c][v];
      float* q = y + c * plane + v * kV;
      const bool part = v == V - 1 && last < kV;
      if (res) {
        const float* r = res + c * plane + v * kV;
        a = _mm256_add_ps(a, part ? _mm256_maskload_ps(r, m) : _mm256_loadu_ps(r));
      }
      // (min(max(x, lo), hi): NaN -> lo for relu, as conv's other kernels do.)
      if constexpr (kClamp) a = _mm256_min_ps(_mm256_max_ps(a, lo), hi);
      if (part) {
        _mm256_maskstore_ps(q, m, a);
      } else {
        _mm256_storeu_ps(q, a);
      }
    }
  }
}

// Output rows [oh0, oh1) of image n from the filled band (band row 0 = padded input row
// oh0 * sh).
template <bool kClamp>
void compute_band(const ConvGeom& g, const Band& b, const int64_t* off, const float* wr,
                  const float* bias, const float* x_res, float* y, int64_t n, int64_t oh0,
                  int64_t oh1, const Clamp& act) {
  const int64_t taps = g.C * g.KH * g.KW, howo = g.HoWo();
  const int64_t blocks = (g.O + kCo - 1) / kCo;
  for (int64_t oh = oh0; oh < oh1; ++oh) {
    const float* src = b.data + (oh - oh0) * g.sh * b.pitch;
    for (int64_t cb = 0; cb < blocks; ++cb) {
      const int64_t co = cb * kCo;
      const int nco = static_cast<int>(std::min<int64_t>(kCo, g.O - co));
      const float* w = wr + cb * taps * kCo;
      const float* bc = bias + co;
      const int64_t row = (n * g.O + co) * howo + oh * g.Wo;
      float* yr = y + row;
      const float* rr = x_res ? x_res + row : nullptr;
      int64_t ow = 0;
      for (; ow + 3 * kV <= g.Wo; ow += 3 * kV)
        tile<3, kClamp>(src + ow, off, taps, w, bc, nco, yr + ow, rr ? rr + ow : nullptr, howo, kV,
                        act);
      const int64_t left = g.Wo - ow;
      if (left == 0) continue;
      const int last = static_cast<int>(left - (left - 1) / kV * kV);
      const float* ro = rr ? rr + ow : nullptr;
      if (left > 2 * kV) {
        tile<3, kClamp>(src + ow, off, taps, w, bc, nco, yr + ow, ro, howo, last, act);
      } else if (left > kV) {
        tile<2, kClamp>(src + ow, off, taps, w, bc, nco, yr + ow, ro, howo, last, act);
      } else {
        tile<1, kClamp>(src + ow, off, taps, w, bc, nco, yr + ow, ro, howo, last, act);
      }
    }
  }
}

}  // namespace

bool direct_conv_applicable(const ConvGeom& g) {
  static const bool disabled = [] {
    const char* e = std::getenv("KILN_CONV_DIRECT");
    return e && std::strcmp(e, "never") == 0;
  }();
  if (disabled) return false;
  if (g.G != 1 || g.C < 1 || g.C > 4 || g.dh != 1 || g.dw != 1) return false;
  if (g.sw < 1 || g.sw > 2 || g.sh < 1 || g.sh > 2 || g.KH > 11 || g.KW > 11) return false;
  if (g.Wo < 2 * kV || g.O < kCo || g.Ho < 1) return false;
  // The band buffer: C x sw x rows x pitch floats, bounded (Wo from an artifact may be anything).
  if (g.Wo > kMaxBufferFloats) return false;
  return g.C * g.sw * band_rows(g) * band_pitch(g) <= kMaxBufferFloats;
}

int64_t direct_weight_floats(const ConvGeom& g) {
  return (g.O + kCo - 1) / kCo * kCo * g.C * g.KH * g.KW;
}

void direct_pack_weight(const ConvGeom& g, const float* w, float* dst) {
  const int64_t taps = g.C * g.KH * g.KW, blocks = (g.O + kCo - 1) / kCo;
  for (int64_t cb = 0; cb < blocks; ++cb)
    for (int64_t t = 0; t < taps; ++t)
      for (int c = 0; c < kCo; ++c) {
        const int64_t o = cb * kCo + c;
        dst[(cb * taps + t) * kCo + c] = o < g.O ? w[o * taps + t] : 0.0f;
      }
}

void direct_conv2d_f32(const ConvGeom& g, const float* wr, const float* x, const float* bias,
                       const float* residual, float* y, const ConvEpilogue& ep) {
  const int64_t blocks = (g.O + kCo - 1) / kCo;
  Band proto;
  proto.rows = band_rows(g);
  proto.pitch = band_pitch(g);
  // Tap offsets from a band row's start: (ci, kh, kw) reads phase kw % sw of row kh, kw / sw on
  // (at most 4 x 11 x 11 taps: direct_conv_applicable).
  int64_t off[4 * 11 * 11];
  for (int64_t ci = 0; ci < g.C; ++ci)
    for (int64_t kh = 0; kh < g.KH; ++kh)
      for (int64_t kw = 0; kw < g.KW; ++kw)
        off[(ci * g.KH + kh) * g.KW + kw] =
            ((ci * g.sw + kw % g.sw) * proto.rows + kh) * proto.pitch + kw / g.sw;
  // The bias padded to whole channel blocks (zero: none).
  ConvScratch<float> b(blocks * kCo);
  std::fill(b.get(), b.get() + blocks * kCo, 0.0f);
  if (bias) std::copy(bias, bias + g.O, b.get());
  const bool vec_act = vector_activation(ep.activation);
  ConvEpilogue in_regs = ep;
  if (!vec_act) in_regs.activation = Activation::None;
  const Clamp act = as_clamp(in_regs);
  const int64_t buf_floats = g.C * g.sw * proto.rows * proto.pitch;
  // Rows over all images, so that the pool splits them evenly whatever the batch.
  parallel_for(0, g.N * g.Ho, 1, [&](int64_t r0, int64_t r1) {
    ConvScratch<float> buf(buf_floats);
    Band band = proto;
    band.data = buf.get();
    for (int64_t r = r0; r < r1;) {
      const int64_t n = r / g.Ho, oh0 = r % g.Ho;
      const int64_t oh1 = std::min({g.Ho, oh0 + kBandRows, oh0 + (r1 - r)});
      const int64_t in0 = oh0 * g.sh - g.ph;  // input row of band row 0
      const int64_t rows = (oh1 - oh0 - 1) * g.sh + g.KH;
      for (int64_t ci = 0; ci < g.C; ++ci) {
        const float* plane = x + (n * g.C + ci) * g.HW();
        for (int64_t k = 0; k < rows; ++k) {
          const int64_t ih = in0 + k;
          fill_row(g, ih >= 0 && ih < g.H ? plane + ih * g.W : nullptr, band, ci, k);
        }
      }
      if (act.on)
        compute_band<true>(g, band, off, wr, b.get(), residual, y, n, oh0, oh1, act);
      else
        compute_band<false>(g, band, off, wr, b.get(), residual, y, n, oh0, oh1, act);
      if (!vec_act) {
        Epilogue e;
        e.activation = ep.activation;
        for (int64_t o = 0; o < g.O; ++o) {
          float* p = y + (n * g.O + o) * g.HoWo() + oh0 * g.Wo;
          for (int64_t i = 0; i < (oh1 - oh0) * g.Wo; ++i) p[i] = apply_activation(p[i], e);
        }
      }
      // The generated epilogue on the band's rows of every channel, still in cache.
      ep.block.apply(y + n * g.O * g.HoWo() + oh0 * g.Wo, g.HoWo(), g.O, (oh1 - oh0) * g.Wo);
      r += oh1 - oh0;
    }
  });
}

}  // namespace kiln::kernels::conv_detail
