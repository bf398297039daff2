// Integer linear and convolution (kernels/qgemm.h): parameter checks, the int16-pair packing
// (quant_internal.h), the tile loop, the portable microkernel, and the reference loops.
//
// Both operations are one integer GEMM with a requantize epilogue:
//   qlinear:  C[M, N] = X[M, K] . W^T       per-column (output feature) constants
//   qconv2d:  C[Og, HoWo] = W_g . cols       per-row (output channel) constants; the column
//             panels are packed straight from the NCHW image (no im2col buffer), padding as 0
//             (x_zp - x_zp).
// The whole of B is packed once per product and each tile runs the full K: the weights' A
// slivers (kMR x K int16 pairs) and one B panel (K x kNR) are re-read from L2 per tile. Blocking K
// from the target description's caches is the next step where K outgrows L2 (docs/quantization.md).
#include "kiln/runtime/kernels/qgemm.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "conv_internal.h"
#include "kiln/runtime/target.h"
#include "kiln/runtime/thread_pool.h"
#include "quant_internal.h"

namespace kiln::kernels {
namespace {

using namespace quant_detail;
using conv_detail::ConvGeom;
using conv_detail::ConvScratch;

// ---- ISA selection
// -------------------------------------------------------------------------------

std::atomic<QGemmIsa> g_forced{QGemmIsa::Auto};

QGemmIsa resolve(QGemmIsa isa) {
  if (isa != QGemmIsa::Auto) return isa;
  const rt::TargetDescription& t = rt::active_target();
  const bool avx2 = t.isa == rt::VectorIsa::Avx2 || t.isa == rt::VectorIsa::Avx512;
  return avx2 && qgemm_avx2_kernel() ? QGemmIsa::Avx2 : QGemmIsa::Portable;
}

// ---- The portable microkernel
// ---------------------------------------------------------------------

// Requantizes an accumulated kMR x kNR tile (row stride kNR) into `t`, one value at a time.
void store_tile_scalar(const int32_t* acc, int m, int n, const TileOut& t) {
  for (int r = 0; r < m; ++r) {
    for (int j = 0; j < n; ++j) {
      const int64_t c = r * t.row_step + j * t.col_step;
      const int32_t v =
          requantize_value(acc[r * kNR + j], t.bias ? t.bias[c] : 0, t.mult[c], t.lo, t.hi, t.zp);
      if (t.out_signed)
        static_cast<int8_t*>(t.out)[r * t.ld + j] = static_cast<int8_t>(v);
      else
        static_cast<uint8_t*>(t.out)[r * t.ld + j] = static_cast<uint8_t>(v);
    }
  }
}

void qkernel_portable(int64_t kp, const int32_t* a, const int32_t* b, int m, int n,
                      const TileOut& t) {
  int32_t acc[kMR * kNR] = {};
  for (int64_t p = 0; p < kp; ++p) {
    const int32_t* ap = a + p * kMR;
    const int32_t* bp = b + p * kNR;
    for (int r = 0; r < kMR; ++r) {
      const int32_t a0 = static_cast<int16_t>(ap[r]), a1 = ap[r] >> 16;
      for (int j = 0; j < kNR; ++j) {
        const int32_t b0 = static_cast<int16_t>(bp[j]), b1 = bp[j] >> 16;
        acc[r * kNR + j] += a0 * b0 + a1 * b1;
      }
    }
  }
  store_tile_scalar(acc, m, n, t);
}

QMicroKernelFn kernel_for(QGemmIsa isa) {
  return resolve(isa) == QGemmIsa::Avx2 ? qgemm_avx2_kernel() : qkernel_portable;
}

// ---- Checked parameters
// ----------------------------------------------------------------------------

// Everything the epilogue and the packing need, per output channel (`channels` of them).
struct Requant {
  int32_t x_zp = 0;
  std::vector<int32_t> w_zp;  // per channel
  std::vector<float> mult;    // per channel, padded to whole panels with copies of the last
  std::vector<int32_t> bias;  // per channel (0 where absent), padded likewise
  float lo = 0.0f, hi = 0.0f;
  int32_t y_zp = 0;
  bool out_signed = false;
};

float scalar_scale(std::string_view op, const TensorImpl* s, std::string_view what) {
  KILN_CHECK(s != nullptr, op, "expected ", what, ", got none");
  KILN_CHECK(s->dtype() == DType::Float32 && s->dim() == 0, op, "expected ", what,
             " as a 0-dim float32 tensor, got ", dtype_name(s->dtype()), " of shape ",
             dims_str(s->sizes()));
  const float v = views::contiguous(*s)->data_ptr<float>()[0];
  KILN_CHECK(std::isfinite(v) && v > 0.0f, op, "expected a positive finite ", what, ", got ", v);
  return v;
}

int32_t scalar_zero_point(std::string_view op, const TensorImpl* z, Range r,
                          std::string_view what) {
  KILN_CHECK(z != nullptr, op, "expected ", what, ", got none");
  KILN_CHECK(is_integral(z->dtype(), false) && z->dim() == 0, op, "expected ", what,
             " as a 0-dim integer tensor, got ", dtype_name(z->dtype()), " of shape ",
             dims_str(z->sizes()));
  const int64_t v = to_dtype(z, DType::Int64)->data_ptr<int64_t>()[0];
  KILN_CHECK(v >= r.lo && v <= r.hi, op, "expected ", what, " in [", r.lo, ", ", r.hi, "], got ",
             v);
  return static_cast<int32_t>(v);
}

Range int8_range(std::string_view op, DType d, std::string_view what) {
  KILN_CHECK(d == DType::Int8 || d == DType::UInt8, op, "expected ", what,
             " of dtype uint8 or int8, got ", dtype_name(d));
  return range_of(op, d, what);
}

// `w` has the output channels along dim 0 and `k` values per channel.
Requant requant_of(std::string_view op, const TensorImpl& x, const TensorImpl& w, int64_t k,
                   const QuantizedOperands& q, DType out_dtype) {
  const Range xr = int8_range(op, x.dtype(), "input");
  const Range wr = int8_range(op, w.dtype(), "weight");
  const Range yr = int8_range(op, out_dtype, "out");
  Requant rq;
  const float xs = scalar_scale(op, q.x_scale, "input scale");
  rq.x_zp = scalar_zero_point(op, q.x_zero_point, xr, "input zero point");
  const float ys = scalar_scale(op, q.y_scale, "output scale");
  rq.y_zp = scalar_zero_point(op, q.y_zero_point, yr, "output zero point");
  KILN_CHECK(q.w_scale && q.w_zero_point, op, "expected a weight scale and zero point, got none");
  const Channels wc = channels_of(op, w, *q.w_scale, *q.w_zero_point, 0, wr);
  const int64_t oc = w.size(0);
  const int64_t padded = (oc + kNR - 1) / kNR * kNR;
  rq.w_zp.resize(oc);
  rq.mult.resize(padded);
  int64_t w_bound = 0;
  for (int64_t o = 0; o < oc; ++o) {
    const size_t c = wc.scale.size() == 1 ? 0 : o;
    rq.w_zp[o] = static_cast<int32_t>(wc.zero_point[c]);
    rq.mult[o] = xs * wc.scale[c] / ys;
    KILN_CHECK(std::isfinite(rq.mult[o]) && rq.mult[o] > 0.0f, op,
               "expected input scale * weight scale / output scale to be a positive finite "
               "float32, got ",
               xs, " * ", wc.scale[c], " / ", ys, " (channel ", o, ")");
    w_bound = std::max({w_bound, wr.hi - rq.w_zp[o], rq.w_zp[o] - wr.lo});
  }
  // Every |x - x_zp| * |w - w_zp| summed over K must fit int32 (the accumulator; the int16 pairs
  // themselves cannot overflow: |x - x_zp| <= 255).
  const int64_t x_bound = std::max<int64_t>(xr.hi - rq.x_zp, rq.x_zp - xr.lo);
  KILN_CHECK(
      x_bound * w_bound == 0 || k <= std::numeric_limits<int32_t>::max() / (x_bound * w_bound), op,
      "expected at most ", std::numeric_limits<int32_t>::max() / (x_bound * w_bound),
      " products per output (int32 accumulation at these zero points), got ", k);
  rq.bias.assign(padded, 0);
  if (q.bias) {
    KILN_CHECK(q.bias->dtype() == DType::Int32, op, "expected bias of dtype int32, got ",
               dtype_name(q.bias->dtype()));
    KILN_CHECK(q.bias->dim() == 1 && q.bias->size(0) == oc, op, "expected bias of shape [", oc,
               "], got ", dims_str(q.bias->sizes()));
    auto b = views::contiguous(*q.bias);
    std::memcpy(rq.bias.data(), b->data_ptr<int32_t>(), oc * sizeof(int32_t));
  }
  for (int64_t o = oc; o < padded; ++o) rq.mult[o] = rq.mult[oc - 1];
  rq.lo = static_cast<float>(yr.lo - rq.y_zp);
  rq.hi = static_cast<float>(yr.hi - rq.y_zp);
  if (q.relu) rq.lo = std::max(rq.lo, 0.0f);
  rq.out_signed = out_dtype == DType::Int8;
  return rq;
}

// ---- Packing
// ---------------------------------------------------------------------------------------

int64_t pairs(int64_t k) {
  return (k + 1) / 2;
}
int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Packs rows [0, M) of at(i, k) (already minus its zero point) into kMR-row slivers.
template <typename At>
void pack_a(int64_t M, int64_t K, At at, int32_t* dst) {
  const int64_t kp = pairs(K), slivers = ceil_div(M, kMR);
  parallel_for(0, slivers, 1, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      int32_t* d = dst + s * kp * kMR;
      for (int r = 0; r < kMR; ++r) {
        const int64_t i = s * kMR + r;
        for (int64_t p = 0; p < kp; ++p) {
          const int32_t lo = i < M ? at(i, 2 * p) : 0;
          const int32_t hi = i < M && 2 * p + 1 < K ? at(i, 2 * p + 1) : 0;
          d[p * kMR + r] = pair16(lo, hi);
        }
      }
    }
  });
}

// Packs columns [0, N) of at(k, j) into kNR-column panels.
template <typename At>
void pack_b(int64_t K, int64_t N, At at, int32_t* dst) {
  const int64_t kp = pairs(K), panels = ceil_div(N, kNR);
  parallel_for(0, panels, 1, [&](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q) {
      int32_t* d = dst + q * kp * kNR;
      for (int j = 0; j < kNR; ++j) {
        const int64_t c = q * kNR + j;
        for (int64_t p = 0; p < kp; ++p) {
          const int32_t lo = c < N ? at(2 * p, c) : 0;
          const int32_t hi = c < N && 2 * p + 1 < K ? at(2 * p + 1, c) : 0;
          d[p * kNR + j] = pair16(lo, hi);
        }
      }
    }
  });
}

// The column panels of one image's group straight from NCHW: B[k = (c, kh, kw), j = (oh, ow)] =
// x[c, oh * sh - ph + kh * dh, ow * sw - pw + kw * dw] - x_zp, 0 in the padding.
template <typename T>
void pack_conv_columns(const ConvGeom& g, const T* x, int32_t x_zp, int32_t* dst) {
  const int64_t K = g.K(), N = g.HoWo(), kp = pairs(K), panels = ceil_div(N, kNR);
  const int64_t kk = g.KH * g.KW;
  parallel_for(0, panels, 1, [&](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q) {
      int64_t ih0[kNR], iw0[kNR];
      const int n = static_cast<int>(std::min<int64_t>(kNR, N - q * kNR));
      for (int j = 0; j < n; ++j) {
        const int64_t col = q * kNR + j;
        ih0[j] = col / g.Wo * g.sh - g.ph;
        iw0[j] = col % g.Wo * g.sw - g.pw;
      }
      int32_t* d = dst + q * kp * kNR;
      for (int64_t k = 0; k < 2 * kp; ++k) {
        int16_t* row = reinterpret_cast<int16_t*>(d + (k / 2) * kNR) + (k & 1);
        if (k >= K) {
          for (int j = 0; j < kNR; ++j) row[2 * j] = 0;
          continue;
        }
        const int64_t c = k / kk, kh = k % kk / g.KW, kw = k % g.KW;
        const T* plane = x + c * g.HW();
        for (int j = 0; j < kNR; ++j) {
          int32_t v = 0;
          if (j < n) {
            const int64_t ih = ih0[j] + kh * g.dh, iw = iw0[j] + kw * g.dw;
            if (ih >= 0 && ih < g.H && iw >= 0 && iw < g.W) v = plane[ih * g.W + iw] - x_zp;
          }
          row[2 * j] = static_cast<int16_t>(v);
        }
      }
    }
  });
}

// ---- The tile loop
// -----------------------------------------------------------------------------------

// out[M, N] (row stride t.ld) = requantize(A . B) from packed operands; `t` describes tile (0, 0)
// and its constants advance with the tile's rows and columns.
void run_tiles(int64_t M, int64_t N, int64_t K, const int32_t* a, const int32_t* b,
               const TileOut& t, QMicroKernelFn kernel) {
  const int64_t kp = pairs(K), slivers = ceil_div(M, kMR), panels = ceil_div(N, kNR);
  // Panel-major: consecutive tiles of one thread share a B panel. Chunks of at least ~64K
  // multiply-adds keep the pool's per-chunk cost small.
  const int64_t grain = std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(kMR * kNR * kp, 1));
  parallel_for(0, slivers * panels, grain, [&](int64_t t0, int64_t t1) {
    for (int64_t i = t0; i < t1; ++i) {
      const int64_t q = i / slivers, s = i % slivers;
      TileOut tile = t;
      tile.out = static_cast<char*>(t.out) + s * kMR * t.ld + q * kNR;  // one-byte elements
      const int64_t c = s * kMR * t.row_step + q * kNR * t.col_step;
      tile.mult = t.mult + c;
      if (t.bias) tile.bias = t.bias + c;
      const int m = static_cast<int>(std::min<int64_t>(kMR, M - s * kMR));
      const int n = static_cast<int>(std::min<int64_t>(kNR, N - q * kNR));
      kernel(kp, a + s * kp * kMR, b + q * kp * kNR, m, n, tile);
    }
  });
}

TileOut tile_out(const Requant& rq, void* out, int64_t ld, bool per_row) {
  TileOut t;
  t.out = out;
  t.ld = ld;
  t.out_signed = rq.out_signed;
  t.mult = rq.mult.data();
  t.bias = rq.bias.data();
  t.row_step = per_row ? 1 : 0;
  t.col_step = per_row ? 0 : 1;
  t.lo = rq.lo;
  t.hi = rq.hi;
  t.zp = rq.y_zp;
  return t;
}

// Reads element i of a uint8 or int8 tensor's contiguous data as int32.
struct Int8Data {
  const void* p = nullptr;
  bool is_signed = false;
  int32_t operator[](int64_t i) const {
    return is_signed ? static_cast<const int8_t*>(p)[i] : static_cast<const uint8_t*>(p)[i];
  }
};
Int8Data data_of(const TensorImplPtr& t) {
  return {t->data(), t->dtype() == DType::Int8};
}

// ---- qlinear
// -----------------------------------------------------------------------------------------

struct LinearShape {
  int64_t M = 0, K = 0, N = 0;
};

LinearShape linear_shape(std::string_view op, const TensorImpl& x, const TensorImpl& w,
                         const TensorImpl& out) {
  KILN_CHECK(x.dim() >= 1, op, "expected input of at least 1 dim, got ", dims_str(x.sizes()));
  KILN_CHECK(w.dim() == 2, op, "expected weight of 2 dims [out_features, in_features], got ",
             dims_str(w.sizes()));
  LinearShape s;
  s.K = x.size(x.dim() - 1);
  s.N = w.size(0);
  KILN_CHECK(w.size(1) == s.K, op, "expected weight with ", s.K,
             " in_features (input's last dim), got ", dims_str(w.sizes()));
  s.M = s.K == 0 ? 0 : x.numel() / s.K;
  if (s.K == 0) {
    s.M = 1;
    for (int64_t d = 0; d + 1 < x.dim(); ++d) s.M *= x.size(d);
  }
  std::vector<int64_t> want(x.sizes().begin(), x.sizes().end());
  want.back() = s.N;
  nn_detail::check_shape(op, out, want, "out");
  return s;
}

// ---- qconv2d
// -----------------------------------------------------------------------------------------

ConvGeom qconv_geom(std::string_view op, const TensorImpl& x, const TensorImpl& w,
                    const Conv2dParams& p, const TensorImpl& out) {
  const ConvGeom g = conv_detail::make_geom(op, x.sizes(), w.sizes(), p);
  nn_detail::check_shape(op, out, std::vector<int64_t>{g.N, g.O, g.Ho, g.Wo}, "out");
  return g;
}

}  // namespace

// ---- Public entry points -----------------------------------------------------------------------

void qlinear_out(const TensorImpl& x, const TensorImpl& w, const QuantizedOperands& q,
                 TensorImpl& out) {
  constexpr std::string_view op = "qlinear";
  const LinearShape s = linear_shape(op, x, w, out);
  const Requant rq = requant_of(op, x, w, s.K, q, out.dtype());
  nn_detail::OutTarget y(&out);
  if (s.M == 0 || s.N == 0) return y.finish();
  auto xc = views::contiguous(x);
  auto wc = views::contiguous(w);
  const Int8Data xd = data_of(xc), wd = data_of(wc);
  const int64_t kp = pairs(s.K);
  ConvScratch<int32_t> a(ceil_div(s.M, kMR) * kMR * kp), b(ceil_div(s.N, kNR) * kNR * kp);
  pack_a(
      s.M, s.K, [&](int64_t i, int64_t k) { return xd[i * s.K + k] - rq.x_zp; }, a.get());
  pack_b(
      s.K, s.N, [&](int64_t k, int64_t j) { return wd[j * s.K + k] - rq.w_zp[j]; }, b.get());
  run_tiles(s.M, s.N, s.K, a.get(), b.get(), tile_out(rq, y.ptr, s.N, false),
            kernel_for(g_forced.load(std::memory_order_acquire)));
  y.finish();
}

void qconv2d_out(const TensorImpl& x, const TensorImpl& w, const QuantizedOperands& q,
                 const Conv2dParams& p, TensorImpl& out) {
  constexpr std::string_view op = "qconv2d";
  const ConvGeom g = qconv_geom(op, x, w, p, out);
  const Requant rq = requant_of(op, x, w, g.K(), q, out.dtype());
  nn_detail::OutTarget y(&out);
  if (g.N == 0 || g.O == 0) return y.finish();
  auto xc = views::contiguous(x);
  auto wc = views::contiguous(w);
  const Int8Data wd = data_of(wc);
  const int64_t K = g.K(), kp = pairs(K), HoWo = g.HoWo();
  const int64_t a_group = ceil_div(g.Og, kMR) * kMR * kp;
  ConvScratch<int32_t> a(g.G * a_group), b(ceil_div(HoWo, kNR) * kNR * kp);
  for (int64_t grp = 0; grp < g.G; ++grp) {
    const int64_t o0 = grp * g.Og;
    pack_a(
        g.Og, K, [&](int64_t i, int64_t k) { return wd[(o0 + i) * K + k] - rq.w_zp[o0 + i]; },
        a.get() + grp * a_group);
  }
  const QMicroKernelFn kernel = kernel_for(g_forced.load(std::memory_order_acquire));
  const bool x_signed = xc->dtype() == DType::Int8;
  for (int64_t n = 0; n < g.N; ++n) {
    for (int64_t grp = 0; grp < g.G; ++grp) {
      const int64_t x_off = (n * g.C + grp * g.Cg) * g.HW();
      if (x_signed)
        pack_conv_columns(g, xc->data_ptr<int8_t>() + x_off, rq.x_zp, b.get());
      else
        pack_conv_columns(g, xc->data_ptr<uint8_t>() + x_off, rq.x_zp, b.get());
      TileOut t =
          tile_out(rq, static_cast<char*>(y.ptr) + (n * g.O + grp * g.Og) * HoWo, HoWo, true);
      t.mult += grp * g.Og;
      t.bias += grp * g.Og;
      run_tiles(g.Og, HoWo, K, a.get() + grp * a_group, b.get(), t, kernel);
    }
  }
  y.finish();
}

// ---- References: the formula as written ------------------------------------------------------

void qlinear_reference_out(const TensorImpl& x, const TensorImpl& w, const QuantizedOperands& q,
                           TensorImpl& out) {
  constexpr std::string_view op = "qlinear";
  const LinearShape s = linear_shape(op, x, w, out);
  const Requant rq = requant_of(op, x, w, s.K, q, out.dtype());
  nn_detail::OutTarget y(&out);
  auto xc = views::contiguous(x);
  auto wc = views::contiguous(w);
  const Int8Data xd = data_of(xc), wd = data_of(wc);
  for (int64_t i = 0; i < s.M; ++i) {
    for (int64_t o = 0; o < s.N; ++o) {
      int32_t acc = 0;
      for (int64_t k = 0; k < s.K; ++k)
        acc += (xd[i * s.K + k] - rq.x_zp) * (wd[o * s.K + k] - rq.w_zp[o]);
      const int32_t v = requantize_value(acc, rq.bias[o], rq.mult[o], rq.lo, rq.hi, rq.y_zp);
      if (rq.out_signed)
        static_cast<int8_t*>(y.ptr)[i * s.N + o] = static_cast<int8_t>(v);
      else
        static_cast<uint8_t*>(y.ptr)[i * s.N + o] = static_cast<uint8_t>(v);
    }
  }
  y.finish();
}

void qconv2d_reference_out(const TensorImpl& x, const TensorImpl& w, const QuantizedOperands& q,
                           const Conv2dParams& p, TensorImpl& out) {
  constexpr std::string_view op = "qconv2d";
  const ConvGeom g = qconv_geom(op, x, w, p, out);
  const Requant rq = requant_of(op, x, w, g.K(), q, out.dtype());
  nn_detail::OutTarget y(&out);
  auto xc = views::contiguous(x);
  auto wc = views::contiguous(w);
  const Int8Data xd = data_of(xc), wd = data_of(wc);
  for (int64_t n = 0; n < g.N; ++n) {
    for (int64_t o = 0; o < g.O; ++o) {
      const int64_t grp = o / g.Og;
      for (int64_t oh = 0; oh < g.Ho; ++oh) {
        for (int64_t ow = 0; ow < g.Wo; ++ow) {
          int32_t acc = 0;
          for (int64_t c = 0; c < g.Cg; ++c) {
            for (int64_t kh = 0; kh < g.KH; ++kh) {
              for (int64_t kw = 0; kw < g.KW; ++kw) {
                const int64_t ih = oh * g.sh - g.ph + kh * g.dh, iw = ow * g.sw - g.pw + kw * g.dw;
                const int32_t xv = ih >= 0 && ih < g.H && iw >= 0 && iw < g.W
                                       ? xd[((n * g.C + grp * g.Cg + c) * g.H + ih) * g.W + iw]
                                       : rq.x_zp;
                acc += (xv - rq.x_zp) * (wd[((o * g.Cg + c) * g.KH + kh) * g.KW + kw] - rq.w_zp[o]);
              }
            }
          }
          const int32_t v = requantize_value(acc, rq.bias[o], rq.mult[o], rq.lo, rq.hi, rq.y_zp);
          const int64_t i = ((n * g.O + o) * g.Ho + oh) * g.Wo + ow;
          if (rq.out_signed)
            static_cast<int8_t*>(y.ptr)[i] = static_cast<int8_t>(v);
          else
            static_cast<uint8_t*>(y.ptr)[i] = static_cast<uint8_t>(v);
        }
      }
    }
  }
  y.finish();
}

// ---- ISA control
// -----------------------------------------------------------------------------------

bool qgemm_isa_available(QGemmIsa isa) {
  return isa != QGemmIsa::Avx2 || (qgemm_avx2_kernel() && rt::host_target().features.avx2);
}

void set_qgemm_isa(QGemmIsa isa) {
  KILN_CHECK(qgemm_isa_available(isa), "qgemm", "expected an ISA available on this CPU, got ",
             qgemm_isa_name(isa), " (not available)");
  g_forced.store(isa, std::memory_order_release);
}

QGemmIsa qgemm_isa() {
  return resolve(g_forced.load(std::memory_order_acquire));
}

const char* qgemm_isa_name(QGemmIsa isa) {
  switch (isa) {
    case QGemmIsa::Auto:
      return "auto";
    case QGemmIsa::Avx2:
      return "avx2";
    case QGemmIsa::Portable:
      break;
  }
  return "portable";
}

}  // namespace kiln::kernels
