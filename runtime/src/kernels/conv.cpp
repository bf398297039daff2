// conv2d / conv1d / conv_transpose2d, forward and backward.
//
// Forward, per image and group, is one GEMM  Y[Og, HoWo] = W[Og, K] · col[K, HoWo]  with
// K = Cg*KH*KW. The column matrix is never materialized whole: it is built in column tiles that
// fit in L2 (im2col of the output positions [c0, c1)), and each tile goes straight to sgemm with
// the epilogue (bias per row, residual, activation). A 1x1 stride-1 unpadded conv needs no
// im2col at all (the input plane block is the column matrix). Depthwise convs use a direct kernel
// (conv_depthwise.cpp).
//
// Backward: grad_input = col2im(Wᵀ · grad_out) (again tiled), grad_weight = Σ_n grad_out · colᵀ,
// grad_bias = Σ grad_out. conv_transpose2d is conv2d's grad_input; its backward is conv2d forward
// (grad_input) and conv2d's grad_weight with the roles of input and grad_output swapped.
//
// Threads: when there are enough (image, group) units they are spread over the pool and each
// unit runs its GEMMs serially (a nested parallel_for runs serially); otherwise the units run one
// after another and the GEMM and the im2col/col2im inside each are parallel.
#include "simd_compat.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <vector>

#include "conv_internal.h"
#include "gemm_internal.h"
#include "kiln/runtime/allocator.h"
#include "kiln/runtime/checked_math.h"
#include "kiln/runtime/cuda/nn.h"
#include "kiln/runtime/kernels/conv.h"
#include "kiln/runtime/kernels/copy.h"
#include "kiln/runtime/kernels/pool.h"
#include "kiln/runtime/target.h"
#include "kiln/runtime/thread_pool.h"
#include "kiln/runtime/views.h"

namespace kiln::kernels {
namespace {

using conv_detail::ConvGeom;
using conv_detail::make_geom;

// ---------------------------------------------------------------------------------------------
template <typename T>
using Scratch = conv_detail::ConvScratch<T>;

// ---------------------------------------------------------------------------------------------
// GEMM: float -> kernels::sgemm (fast, fused epilogue); double -> a simple reference loop.
template <typename T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B,
          int64_t ldb, T beta, T* C, int64_t ldc, const Epilogue& e = {});

template <>
void gemm<float>(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
                 const Epilogue& e) {
  if (M == 0 || N == 0) return;
  sgemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc, e);
}

template <>
void gemm<double>(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const double* A, int64_t lda,
                  const double* B, int64_t ldb, double beta, double* C, int64_t ldc,
                  const Epilogue&) {
  // Epilogue is applied by the caller for double.
  parallel_for(0, M, std::max<int64_t>(1, 4096 / std::max<int64_t>(N * K, 1)),
               [&](int64_t i0, int64_t i1) {
                 std::vector<double> acc(static_cast<size_t>(N));
                 for (int64_t i = i0; i < i1; ++i) {
                   std::fill(acc.begin(), acc.end(), 0.0);
                   for (int64_t k = 0; k < K; ++k) {
                     const double a = ta ? A[k * lda + i] : A[i * lda + k];
                     if (a == 0.0) continue;
                     if (!tb) {
                       const double* b = B + k * ldb;
                       for (int64_t j = 0; j < N; ++j) acc[j] += a * b[j];
                     } else {
                       for (int64_t j = 0; j < N; ++j) acc[j] += a * B[j * ldb + k];
                     }
                   }
                   double* c = C + i * ldc;
                   for (int64_t j = 0; j < N; ++j)
                     c[j] = acc[j] + (beta == 0.0 ? 0.0 : beta * c[j]);
                 }
               });
}

double activation_d(double x, const ConvEpilogue& e) {
  switch (e.activation) {
    case Activation::None:
      return x;
    case Activation::Relu:
      return x > 0.0 ? x : 0.0;
    case Activation::Relu6:
      return std::min(std::max(x, 0.0), 6.0);
    case Activation::Clamp:
      return std::min(std::max(x, static_cast<double>(e.clamp_min)),
                      static_cast<double>(e.clamp_max));
    case Activation::Gelu:
      return 0.5 * x * (1.0 + std::erf(x * 0.70710678118654752));
    case Activation::GeluTanh: {
      const double c = 0.79788456080286536;
      return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
    }
    case Activation::Silu:
      return x / (1.0 + std::exp(-x));
    case Activation::Sigmoid:
      return 1.0 / (1.0 + std::exp(-x));
    case Activation::Tanh:
      return std::tanh(x);
  }
  return x;
}

Epilogue to_gemm_epilogue(const ConvEpilogue& ep) {
  Epilogue e;
  e.activation = ep.activation;
  e.clamp_min = ep.clamp_min;
  e.clamp_max = ep.clamp_max;
  e.block = ep.block;
  return e;
}

// y[rows, cols] (row stride ld) = act(y + bias[row] + residual) for the paths that do not go
// through the GEMM epilogue.
template <typename T>
void apply_epilogue_block(T* y, int64_t rows, int64_t cols, int64_t ld, const T* bias, const T* res,
                          int64_t ld_res, const ConvEpilogue& ep) {
  const bool has_act = ep.activation != Activation::None;
  if (!bias && !res && !has_act) return;
  const Epilogue fe = to_gemm_epilogue(ep);
  for (int64_t r = 0; r < rows; ++r) {
    T* row = y + r * ld;
    const T b = bias ? bias[r] : T(0);
    const T* rr = res ? res + r * ld_res : nullptr;
    for (int64_t j = 0; j < cols; ++j) {
      T v = row[j] + b;
      if (rr) v += rr[j];
      if constexpr (std::is_same_v<T, float>) {
        if (ep.activation == Activation::Relu) {
          v = v > 0.0f ? v : 0.0f;
        } else if (has_act) {
          v = apply_activation(v, fe);
        }
      } else {
        if (has_act) v = activation_d(v, ep);
      }
      row[j] = v;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Geometry and checks.

std::string dims_str(std::span<const int64_t> d) {
  std::ostringstream os;
  os << Dims(d);
  return os.str();
}

// Output extent of one spatial dim, or -1 when the (padded) input is smaller than the kernel.
// Output extent along one axis: -1 when the padded input is smaller than the dilated kernel, -2
// when the extents overflow int64 (an artifact's attributes and sizes may be anything).
int64_t out_extent(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  int64_t eff = 0, padded = 0;
  if (!mul_ok(d, k - 1, eff) || !add_ok(eff, 1, eff) || !mul_ok(p, 2, padded) ||
      !add_ok(padded, in, padded))
    return -2;
  if (padded < eff) return -1;
  return (padded - eff) / s + 1;
}

// Whether the product of these non-negative extents fits in int64.
bool product_fits(std::initializer_list<int64_t> extents) {
  int64_t r = 1;
  for (const int64_t e : extents)
    if (e < 0 || !mul_ok(r, e, r)) return false;
  return true;
}

void check_params(std::string_view op, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh,
                  int64_t dw, int64_t groups) {
  KILN_CHECK(sh >= 1 && sw >= 1, op, "expected stride >= 1, got (", sh, ", ", sw, ")");
  KILN_CHECK(ph >= 0 && pw >= 0, op, "expected padding >= 0, got (", ph, ", ", pw, ")");
  KILN_CHECK(dh >= 1 && dw >= 1, op, "expected dilation >= 1, got (", dh, ", ", dw, ")");
  KILN_CHECK(groups >= 1, op, "expected groups >= 1, got ", groups);
}

}  // namespace

// Declared in conv_internal.h (the int8 convolution shares the checks).
ConvGeom conv_detail::make_geom(std::string_view op, std::span<const int64_t> in,
                                std::span<const int64_t> wt, const Conv2dParams& p) {
  KILN_CHECK(in.size() == 4, op, "expected input of 4 dims (N,C,H,W), got ", dims_str(in));
  KILN_CHECK(wt.size() == 4, op, "expected weight of 4 dims (C_out, C_in/groups, KH, KW), got ",
             dims_str(wt));
  check_params(op, p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dilation_h, p.dilation_w, p.groups);
  KILN_CHECK(!p.channels_last, op,
             "expected NCHW activations: channels-last is implemented for the int8 convolutions "
             "(qconv2d) only");
  ConvGeom g;
  g.N = in[0], g.C = in[1], g.H = in[2], g.W = in[3];
  g.O = wt[0], g.KH = wt[2], g.KW = wt[3];
  g.G = p.groups;
  g.sh = p.stride_h, g.sw = p.stride_w, g.ph = p.pad_h, g.pw = p.pad_w;
  g.dh = p.dilation_h, g.dw = p.dilation_w;
  KILN_CHECK(g.KH > 0 && g.KW > 0, op, "expected a non-empty kernel, got weight ", dims_str(wt));
  KILN_CHECK(g.C % g.G == 0, op, "expected input channels (", g.C, ") divisible by groups (", g.G,
             ")");
  KILN_CHECK(g.O % g.G == 0, op, "expected output channels (", g.O, ") divisible by groups (", g.G,
             ")");
  int64_t weight_channels = 0;
  KILN_CHECK(mul_ok(wt[1], g.G, weight_channels) && weight_channels == g.C, op,
             "expected input with weight.size(1)*groups = ", wt[1], "*", g.G, " channels, got ",
             g.C, " channels (input ", dims_str(in), ", weight ", dims_str(wt), ", groups ", g.G,
             ")");
  g.Cg = g.C / g.G;
  g.Og = g.O / g.G;
  KILN_CHECK(product_fits({g.N, g.C, g.H, g.W}) && product_fits({g.O, g.Cg, g.KH, g.KW}), op,
             "expected input and weight sizes whose element counts fit in 64 bits, got input ",
             dims_str(in), ", weight ", dims_str(wt));
  g.Ho = out_extent(g.H, g.KH, g.sh, g.ph, g.dh);
  g.Wo = out_extent(g.W, g.KW, g.sw, g.pw, g.dw);
  KILN_CHECK(
      g.Ho != -2 && g.Wo != -2 && (g.Ho < 1 || g.Wo < 1 || product_fits({g.N, g.O, g.Ho, g.Wo})),
      op, "expected padding (", g.ph, ", ", g.pw, "), dilation (", g.dh, ", ", g.dw,
      ") and kernel ", g.KH, "x", g.KW, " whose output extents fit in 64 bits, input ",
      dims_str(in));
  KILN_CHECK(g.Ho >= 1 && g.Wo >= 1, op, "expected padded input (", g.H + 2 * g.ph, "x",
             g.W + 2 * g.pw, ") at least as large as the dilated kernel (", g.dh * (g.KH - 1) + 1,
             "x", g.dw * (g.KW - 1) + 1, "), input ", dims_str(in));
  return g;
}

namespace {

Conv2dParams to_params(const ConvTranspose2dParams& t) {
  Conv2dParams p;
  p.stride_h = t.stride_h, p.stride_w = t.stride_w;
  p.pad_h = t.pad_h, p.pad_w = t.pad_w;
  p.dilation_h = t.dilation_h, p.dilation_w = t.dilation_w;
  p.groups = t.groups;
  return p;
}

void check_dtype_floating(std::string_view op, const TensorImpl& t, std::string_view what) {
  const DType d = t.dtype();
  KILN_CHECK(
      d == DType::Float32 || d == DType::Float64 || d == DType::Float16 || d == DType::BFloat16, op,
      "expected a floating dtype (float32, float64, float16, bfloat16) for ", what, ", got ",
      dtype_name(d));
}

void check_same_dtype(std::string_view op, const TensorImpl& ref, const TensorImpl& t,
                      std::string_view what) {
  KILN_CHECK(t.dtype() == ref.dtype(), op, "expected ", what, " of dtype ", dtype_name(ref.dtype()),
             " (as input), got ", dtype_name(t.dtype()));
}

void check_shape(std::string_view op, const TensorImpl& t, std::span<const int64_t> want,
                 std::string_view what) {
  KILN_CHECK(Dims(t.sizes()) == Dims(want), op, "expected ", what, " of shape ", dims_str(want),
             ", got ", dims_str(t.sizes()));
}

bool is_lowp(DType d) {
  return d == DType::Float16 || d == DType::BFloat16;
}

TensorImplPtr to_f32(const TensorImpl* t) {
  if (!t) return {};
  auto r = empty(t->sizes(), DType::Float32);
  copy_(*r, *t);
  return r;
}

// A contiguous destination for a kernel: `out` itself, or a temp copied back by finish().
struct OutTarget {
  TensorImpl* dst = nullptr;
  TensorImplPtr tmp;
  void* ptr = nullptr;
  explicit OutTarget(TensorImpl* d) : dst(d) {
    if (!d) return;
    if (d->is_contiguous()) {
      ptr = d->data();
    } else {
      tmp = empty(d->sizes(), d->dtype());
      ptr = tmp->data();
    }
  }
  template <typename T>
  T* get() const {
    return static_cast<T*>(ptr);
  }
  void finish() {
    if (tmp) copy_(*dst, *tmp);
  }
};

// ---------------------------------------------------------------------------------------------
// im2col / col2im over a tile of output positions [c0, c1) (flattened oh*Wo + ow). The column
// matrix tile has rows r = (ci, kh, kw) and row stride ldc = c1 - c0.

// Calls seg(r_row_ptr_offset_in_tile, ow0, ow1, ih, iw_off) for each output-row segment.
struct Segment {
  int64_t j0;   // column in the tile
  int64_t ow0;  // first output column
  int64_t len;  // segment length
  int64_t oh;
};

template <typename F>
void for_each_segment(const ConvGeom& g, int64_t c0, int64_t c1, F&& f) {
  int64_t j = c0;
  while (j < c1) {
    const int64_t oh = j / g.Wo, ow0 = j % g.Wo;
    const int64_t len = std::min(c1 - j, g.Wo - ow0);
    f(Segment{j - c0, ow0, len, oh});
    j += len;
  }
}

// Valid output columns [lo, hi) within [ow0, ow1) for which 0 <= ow*sw + off < W.
inline void valid_range(int64_t ow0, int64_t ow1, int64_t off, int64_t sw, int64_t W, int64_t& lo,
                        int64_t& hi) {
  // ceil(-off / sw) without forming -off + sw - 1, which overflows for an artifact's stride.
  const int64_t lo_ = off >= 0 ? 0 : (-off - 1) / sw + 1;
  const int64_t hi_ = (W - 1 - off) < 0 ? 0 : (W - 1 - off) / sw + 1;
  lo = std::clamp(lo_, ow0, ow1);
  hi = std::clamp(hi_, lo, ow1);
}

// d[i] = s[2*i] for i < n; s[2*n - 1] need not be readable.
inline void gather_stride2(float* d, const float* s, int64_t n) {
  int64_t i = 0;
  for (; i + 8 < n; i += 8) {
    const __m256 a = _mm256_loadu_ps(s + 2 * i);
    const __m256 b = _mm256_loadu_ps(s + 2 * i + 8);
    const __m256 e = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
    _mm256_storeu_ps(d + i, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e),
                                                                   _MM_SHUFFLE(3, 1, 2, 0))));
  }
  for (; i < n; ++i) d[i] = s[2 * i];
}
inline void gather_stride2(double* d, const double* s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = s[2 * i];
}

template <typename T>
void im2col_rows(const ConvGeom& g, const T* xg, int64_t c0, int64_t c1, T* col, int64_t r0,
                 int64_t r1) {
  const int64_t ldc = c1 - c0, KK = g.KH * g.KW;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t ci = r / KK, kh = (r / g.KW) % g.KH, kw = r % g.KW;
    const T* plane = xg + ci * g.HW();
    T* dst = col + r * ldc;
    const int64_t iw_off = kw * g.dw - g.pw;
    for_each_segment(g, c0, c1, [&](const Segment& s) {
      T* d = dst + s.j0;
      const int64_t ih = s.oh * g.sh - g.ph + kh * g.dh;
      if (ih < 0 || ih >= g.H) {
        std::memset(d, 0, sizeof(T) * s.len);
        return;
      }
      int64_t lo, hi;
      valid_range(s.ow0, s.ow0 + s.len, iw_off, g.sw, g.W, lo, hi);
      const T* src = plane + ih * g.W + iw_off;
      for (int64_t ow = s.ow0; ow < lo; ++ow) d[ow - s.ow0] = T(0);
      if (g.sw == 1) {
        if (hi > lo) std::memcpy(d + (lo - s.ow0), src + lo, sizeof(T) * (hi - lo));
      } else if (g.sw == 2) {
        if (hi > lo) gather_stride2(d + (lo - s.ow0), src + 2 * lo, hi - lo);
      } else {
        for (int64_t ow = lo; ow < hi; ++ow) d[ow - s.ow0] = src[ow * g.sw];
      }
      for (int64_t ow = hi; ow < s.ow0 + s.len; ++ow) d[ow - s.ow0] = T(0);
    });
  }
}

// gx[ci] += col rows of channel ci, for ci in [ci0, ci1).
template <typename T>
void col2im_channels(const ConvGeom& g, const T* col, int64_t c0, int64_t c1, T* gxg, int64_t ci0,
                     int64_t ci1) {
  const int64_t ldc = c1 - c0;
  for (int64_t ci = ci0; ci < ci1; ++ci) {
    T* plane = gxg + ci * g.HW();
    for (int64_t kh = 0; kh < g.KH; ++kh) {
      for (int64_t kw = 0; kw < g.KW; ++kw) {
        const int64_t r = (ci * g.KH + kh) * g.KW + kw;
        const T* src = col + r * ldc;
        const int64_t iw_off = kw * g.dw - g.pw;
        for_each_segment(g, c0, c1, [&](const Segment& s) {
          const int64_t ih = s.oh * g.sh - g.ph + kh * g.dh;
          if (ih < 0 || ih >= g.H) return;
          int64_t lo, hi;
          valid_range(s.ow0, s.ow0 + s.len, iw_off, g.sw, g.W, lo, hi);
          const T* sp = src + s.j0 - s.ow0;
          T* dp = plane + ih * g.W + iw_off;
          if (g.sw == 1) {
            for (int64_t ow = lo; ow < hi; ++ow) dp[ow] += sp[ow];
          } else {
            for (int64_t ow = lo; ow < hi; ++ow) dp[ow * g.sw] += sp[ow];
          }
        });
      }
    }
  }
}

// Columns per im2col tile: keep the tile (K x nt) around the target's conv_tile_bytes (its rule
// and measurements: target_params.cpp, docs/target.md), never fewer than kMinTileCols columns.
constexpr int64_t kMinTileCols = 96;

int64_t tile_bytes() {
  return rt::target_params().conv_tile_bytes;
}

template <typename T>
int64_t tile_cols(const ConvGeom& g) {
  const int64_t howo = g.HoWo();
  int64_t nt = tile_bytes() / (std::max<int64_t>(g.K(), 1) * static_cast<int64_t>(sizeof(T)));
  nt = std::max<int64_t>(kMinTileCols, nt / 16 * 16);
  if (nt >= howo || howo - nt < nt / 4) return howo;  // avoid a tiny last tile
  return nt;
}

// Units (image, group) run in parallel when there are enough of them to keep every thread busy.
bool parallel_units(int64_t units) {
  const int nt = num_threads();
  if (nt <= 1 || in_parallel_region()) return false;
  return units >= 4 * nt || (units >= nt && units % nt == 0);
}

// ---------------------------------------------------------------------------------------------
// Forward.

// How the forward splits its work: column tiles of nt output positions per (image, group) unit;
// `parallel_items` runs the (unit, tile) items on the pool, each with its own scratch and a serial
// GEMM (no barrier between im2col and GEMM); otherwise items run in order and the im2col and the
// GEMM inside each are parallel.
struct TilePlan {
  int64_t nt = 1, tiles = 1;
  bool parallel_items = false;
};

constexpr int64_t kMinParallelCols = 48;  // narrower tiles waste the GEMM's 32-column microtile
constexpr int64_t kWideParallelCols = 256;

template <typename T>
TilePlan plan_forward(const ConvGeom& g) {
  const int64_t howo = g.HoWo(), units = g.N * g.G;
  TilePlan tp;
  if (howo == 0) {  // an empty output plane: no items
    tp.tiles = 0;
    return tp;
  }
  int64_t tiles = 1;
  if (!g.direct_1x1()) {
    const int64_t target = std::max<int64_t>(
        kMinTileCols,
        tile_bytes() / (std::max<int64_t>(g.K(), 1) * static_cast<int64_t>(sizeof(T))));
    tiles = (howo + target - 1) / target;
  }
  const int nth = in_parallel_region() ? 1 : num_threads();
  if (nth > 1) {
    if (units >= 4 * nth || (units >= nth && units % nth == 0)) {
      tp.parallel_items = true;
    } else {
      // Few units (batch 1): split columns so that the item count is a multiple of the threads,
      // two items per thread when they stay wide (threads claim items as they finish: uneven
      // thread speeds even out).
      const int64_t want = howo / (2 * nth) >= kWideParallelCols ? 2 * nth : nth;
      for (int64_t t = std::max<int64_t>(tiles, 1); t <= 4 * std::max<int64_t>(tiles, nth); ++t) {
        if ((units * t) % want == 0 && howo / t >= kMinParallelCols) {
          tiles = t;
          tp.parallel_items = true;
          break;
        }
      }
    }
  }
  tp.nt = (howo + tiles - 1) / tiles;
  tp.tiles = (howo + tp.nt - 1) / tp.nt;
  return tp;
}

// Y[Og, cols] = act(W · X + bias + residual) for one item, with the group's weight pre-packed when
// given: as the left operand (output positions across the vector lanes), or as the right one
// (Yᵀ = Xᵀ · Wᵀ, output channels across the lanes, then transposed back into Y). `e` is the
// epilogue in Y's orientation.
template <typename T>
void item_gemm(const SgemmPacked* packed, int64_t Og, int64_t cols, int64_t K, const T* wg,
               const T* X, int64_t ldx, T* Y, int64_t ldy, const Epilogue& e,
               bool x_by_positions = false) {
  if constexpr (std::is_same_v<T, float>) {
    if (packed && !packed->is_b())
      return sgemm_packed_a(*packed, false, cols, 1.0f, X, ldx, 0.0f, Y, ldy, e);
    if (packed) {
      Scratch<float> yt(cols * Og);
      // Bias per channel is per column of Yᵀ; the activation must follow the residual, which
      // only the transpose can add.
      Epilogue ge, after;
      if (e.bias_kind == Epilogue::Bias::PerRow) ge.bias_kind = Epilogue::Bias::PerCol;
      ge.bias = e.bias;
      Epilogue& act = e.residual ? after : ge;
      act.activation = e.activation;
      act.clamp_min = e.clamp_min;
      act.clamp_max = e.clamp_max;
      sgemm_packed_b(!x_by_positions, cols, 1.0f, X, ldx, *packed, 0.0f, yt.get(), Og, ge);
      // Channel blocks over the threads (batch 1's head: 1280 x 49 floats, which one thread
      // transposed while the other waited).
      const int64_t blocks = (Og + 7) / 8;
      parallel_for(0, blocks, std::max<int64_t>(1, 2048 / std::max<int64_t>(8 * cols, 1)),
                   [&](int64_t b0, int64_t b1) {
                     const int64_t o0 = 8 * b0, o1 = std::min(Og, 8 * b1);
                     conv_detail::transpose_epilogue(
                         yt.get() + o0, Og, cols, o1 - o0, Y + o0 * ldy, ldy,
                         e.residual ? e.residual + o0 * e.ld_residual : nullptr, e.ld_residual,
                         after);
                     e.block.apply(Y + o0 * ldy, ldy, o1 - o0, cols);
                   });
      return;
    }
  }
  gemm<T>(false, false, Og, cols, K, wg, K, X, ldx, T(0), Y, ldy, e);
}

// The im2col of a gemm-ch conv (output channels across the GEMM's lanes): one row per output
// position in [c0, c1), its K inputs in (kh, kw, ci) order, the order prepare_conv2d_weight packs
// such a weight in. From a channels-last copy of the group's input each tap is one run of Cg
// floats, and the GEMM reads the rows in place: ResNet-18's 512 -> 512 3x3 at 7x7 built 7-float
// runs of the [K, positions] layout and then packed them again (12% of the conv).
void im2col_positions(const ConvGeom& g, const float* xg, int64_t c0, int64_t c1, float* colt) {
  const int64_t HW = g.HW(), Cg = g.Cg, K = g.K(), KK = g.KH * g.KW;
  // The input rows the positions read: [ih_lo, ih_hi).
  const int64_t ih_lo = std::max<int64_t>(0, (c0 / g.Wo) * g.sh - g.ph);
  const int64_t ih_hi =
      std::min<int64_t>(g.H, ((c1 - 1) / g.Wo) * g.sh - g.ph + (g.KH - 1) * g.dh + 1);
  const int64_t span = std::max<int64_t>(0, ih_hi - ih_lo) * g.W;
  // The copy pays when the rows read each input position about twice or more (3x3 convs); a
  // strided 1x1 reads a quarter of them, gathered straight from the planes.
  const bool channels_last = 2 * span <= (c1 - c0) * KK;
  Scratch<float> xt_own(channels_last ? span * Cg : 0);
  float* xt = xt_own.get();
  // xt[hw - ih_lo * W, ci] = xg[ci, hw], blocks of 16 channels (8x8 transposes in registers).
  auto transpose = [&](int64_t b0, int64_t b1) {
    const int64_t ci0 = b0 * 16, nc = std::min(Cg, b1 * 16) - ci0;
    if (nc > 0)
      conv_detail::transpose_epilogue(xg + ci0 * HW + ih_lo * g.W, HW, nc, span, xt + ci0, Cg,
                                      nullptr, 0, Epilogue{});
  };
  auto rows = [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t oh = p / g.Wo, ow = p % g.Wo;
      float* dst = colt + (p - c0) * K;
      for (int64_t t = 0; t < KK; ++t) {
        const int64_t ih = oh * g.sh - g.ph + (t / g.KW) * g.dh;
        const int64_t iw = ow * g.sw - g.pw + (t % g.KW) * g.dw;
        float* d = dst + t * Cg;
        if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) {
          std::memset(d, 0, sizeof(float) * Cg);
        } else if (channels_last) {
          std::memcpy(d, xt + ((ih - ih_lo) * g.W + iw) * Cg, sizeof(float) * Cg);
        } else {
          const float* src = xg + ih * g.W + iw;
          for (int64_t ci = 0; ci < Cg; ++ci) d[ci] = src[ci * HW];
        }
      }
    }
  };
  const int64_t blocks = (Cg + 15) / 16;
  if (in_parallel_region()) {
    if (channels_last) transpose(0, blocks);
    rows(c0, c1);
  } else {
    if (channels_last)
      parallel_for(0, blocks, std::max<int64_t>(1, 4096 / std::max<int64_t>(16 * span, 1)),
                   transpose);
    parallel_for(c0, c1, std::max<int64_t>(1, 16384 / K), rows);
  }
}

template <typename T>
void forward_item(const ConvGeom& g, int64_t n, int64_t grp, int64_t c0, int64_t c1, const T* x,
                  const T* w, const T* bias, const T* res, T* y, const ConvEpilogue& ep, T* scratch,
                  const SgemmPacked* packed) {
  const int64_t K = g.K(), howo = g.HoWo(), cols = c1 - c0;
  const T* xg = x + (n * g.C + grp * g.Cg) * g.HW();
  const T* wg = w + grp * g.Og * K;
  T* yg = y + (n * g.O + grp * g.Og) * howo;
  const T* bg = bias ? bias + grp * g.Og : nullptr;
  const T* rg = res ? res + (n * g.O + grp * g.Og) * howo : nullptr;
  constexpr bool kF32 = std::is_same_v<T, float>;

  Epilogue e = to_gemm_epilogue(ep);
  if constexpr (kF32) {
    if (bg) {
      e.bias_kind = Epilogue::Bias::PerRow;
      e.bias = bg;
    }
    if (rg) {
      e.residual = rg + c0;
      e.ld_residual = howo;
    }
  }
  if (K == 0) {
    for (int64_t o = 0; o < g.Og; ++o) std::fill(yg + o * howo + c0, yg + o * howo + c1, T(0));
    apply_epilogue_block<T>(yg + c0, g.Og, cols, howo, bg, rg ? rg + c0 : nullptr, howo, ep);
    if constexpr (kF32) e.block.apply(yg + c0, howo, g.Og, cols);
    return;
  }
  if (g.direct_1x1()) {
    item_gemm<T>(packed, g.Og, cols, K, wg, xg + c0, g.HW(), yg + c0, howo, e);
  } else if (kF32 && packed && packed->is_b()) {
    if constexpr (kF32) {
      im2col_positions(g, xg, c0, c1, scratch);
      item_gemm<T>(packed, g.Og, cols, K, wg, scratch, K, yg + c0, howo, e,
                   /*x_by_positions=*/true);
    }
  } else {
    if (in_parallel_region()) {
      im2col_rows<T>(g, xg, c0, c1, scratch, 0, K);
    } else {
      parallel_for(0, K, std::max<int64_t>(1, 16384 / cols),
                   [&](int64_t r0, int64_t r1) { im2col_rows<T>(g, xg, c0, c1, scratch, r0, r1); });
    }
    item_gemm<T>(packed, g.Og, cols, K, wg, scratch, cols, yg + c0, howo, e);
  }
  if constexpr (!kF32)
    apply_epilogue_block<T>(yg + c0, g.Og, cols, howo, bg, rg ? rg + c0 : nullptr, howo, ep);
}

// Whether the GEMM of each item fills the microkernel's vector lanes clearly better with the
// output channels across them than with the output positions: small feature maps (7x7 = 49
// positions fill 49 of 64 lanes) with many channels. Edge rows cost only their work; edge lanes
// cost a whole vector.
bool lanes_over_channels(const ConvGeom& g) {
  const int64_t nr = gemm_detail::active_kernel_set().nr;
  auto fill = [nr](int64_t n) { return double(n) / double((n + nr - 1) / nr * nr); };
  // A kernel larger than 1x1 with K >= Og: the im2col rows go to the GEMM unpacked (gemm-ch)
  // where the other orientation packs all K x positions of them, and only the smaller output is
  // transposed back (ResNet-18's stride-2 3x3s: 0.80-0.93x).
  if (g.KH * g.KW > 1 && g.K() >= g.Og && fill(g.Og) >= 0.9) return true;
  return fill(g.Og) - fill(plan_forward<float>(g).nt) >= 0.15;
}

// A conv2d weight prepared once (prepare_conv2d_weight): Winograd-transformed, or packed per group
// for the GEMM.
class PreparedConv final : public PreparedConv2dWeight {
 public:
  Dims weight_sizes;
  Conv2dParams params;
  std::shared_ptr<const conv_detail::WinogradWeight> winograd;
  std::vector<float> direct;  // direct_pack_weight's layout, or empty
  std::vector<std::shared_ptr<const SgemmPacked>> groups;

  size_t nbytes() const override {
    size_t n = winograd ? winograd->nbytes() : 0;
    n += direct.size() * sizeof(float);
    for (const auto& gp : groups) n += gp->nbytes();
    return n;
  }
  const char* algorithm() const override {
    if (winograd) return "winograd";
    if (!direct.empty()) return "direct";
    return !groups.empty() && groups[0]->is_b() ? "gemm-ch" : "gemm";
  }
  // Prepared from a weight of this shape for these parameters (the values are the caller's
  // promise).
  bool fits(const TensorImpl& weight, const Conv2dParams& p) const {
    return Dims(weight.sizes()) == weight_sizes && p.stride_h == params.stride_h &&
           p.stride_w == params.stride_w && p.pad_h == params.pad_h && p.pad_w == params.pad_w &&
           p.dilation_h == params.dilation_h && p.dilation_w == params.dilation_w &&
           p.groups == params.groups;
  }
};

template <typename T>
void conv_forward(const ConvGeom& g, const T* x, const T* w, const T* bias, const T* res, T* y,
                  const ConvEpilogue& ep_in, const PreparedConv* prep = nullptr) {
  if (g.N == 0 || g.O == 0 || g.HoWo() == 0) return;
  ConvEpilogue ep = ep_in;
  if constexpr (std::is_same_v<T, float>) {
    ep.block.origin = y;
    // (false: padding or dilation too large for its plane buffers; the im2col path follows.)
    if (g.depthwise() && conv_detail::depthwise_conv2d_f32(g, x, w, bias, res, y, ep)) return;
    if (prep && prep->winograd)
      return conv_detail::winograd_conv2d_f32(g, *prep->winograd, x, bias, res, y, ep);
    // Prepared for an input size the direct kernel takes, run at one it does not (too narrow, or
    // a band buffer past its bound): the raw weight, through im2col + GEMM.
    if (prep && !prep->direct.empty() && !conv_detail::direct_conv_applicable(g)) prep = nullptr;
    if (prep ? !prep->direct.empty() : conv_detail::direct_conv_applicable(g)) {
      if (prep) return conv_detail::direct_conv2d_f32(g, prep->direct.data(), x, bias, res, y, ep);
      Scratch<float> wr(conv_detail::direct_weight_floats(g));
      conv_detail::direct_pack_weight(g, w, wr.get());
      return conv_detail::direct_conv2d_f32(g, wr.get(), x, bias, res, y, ep);
    }
  } else {
    prep = nullptr;
  }
  const TilePlan tp = plan_forward<T>(g);
  const int64_t items = g.N * g.G * tp.tiles, howo = g.HoWo();
  const int64_t scratch_elems = g.direct_1x1() ? 1 : g.K() * tp.nt;
  auto run = [&](int64_t i0, int64_t i1) {
    Scratch<T> s(scratch_elems);
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t u = i / tp.tiles, t = i % tp.tiles;
      const int64_t c0 = t * tp.nt, c1 = std::min(howo, c0 + tp.nt);
      const int64_t grp = u % g.G;
      forward_item<T>(g, u / g.G, grp, c0, c1, x, w, bias, res, y, ep, s.get(),
                      prep ? prep->groups[grp].get() : nullptr);
    }
  };
  if (tp.parallel_items) {
    parallel_for(0, items, 1, run);
  } else {
    run(0, items);
  }
}

// ---------------------------------------------------------------------------------------------
// Backward data: gx = col2im(Wᵀ gy). gx is overwritten.

template <typename T>
void backward_input_unit(const ConvGeom& g, int64_t n, int64_t grp, const T* gy, const T* w, T* gx,
                         T* scratch, int64_t nt) {
  const int64_t K = g.K(), howo = g.HoWo();
  const T* gyg = gy + (n * g.O + grp * g.Og) * howo;
  const T* wg = w + grp * g.Og * K;
  T* gxg = gx + (n * g.C + grp * g.Cg) * g.HW();
  if (g.direct_1x1()) {
    gemm<T>(true, false, g.Cg, howo, g.Og, wg, K, gyg, howo, T(0), gxg, g.HW());
    return;
  }
  std::fill(gxg, gxg + g.Cg * g.HW(), T(0));
  if (K == 0) return;
  for (int64_t c0 = 0; c0 < howo; c0 += nt) {
    const int64_t c1 = std::min(howo, c0 + nt), cols = c1 - c0;
    gemm<T>(true, false, K, cols, g.Og, wg, K, gyg + c0, howo, T(0), scratch, cols);
    if (in_parallel_region()) {
      col2im_channels<T>(g, scratch, c0, c1, gxg, 0, g.Cg);
    } else {
      const int64_t per_ch = g.KH * g.KW * cols;
      parallel_for(
          0, g.Cg, std::max<int64_t>(1, 16384 / std::max<int64_t>(per_ch, 1)),
          [&](int64_t a, int64_t b) { col2im_channels<T>(g, scratch, c0, c1, gxg, a, b); });
    }
  }
}

template <typename T>
void conv_backward_input(const ConvGeom& g, const T* gy, const T* w, T* gx) {
  if (g.N == 0 || g.C == 0) return;
  const int64_t units = g.N * g.G;
  const int64_t nt = tile_cols<T>(g);
  const int64_t scratch_elems = g.direct_1x1() ? 1 : g.K() * nt;
  if (g.O == 0) {
    std::fill(gx, gx + g.N * g.C * g.HW(), T(0));
    return;
  }
  if (parallel_units(units)) {
    parallel_for(0, units, 1, [&](int64_t u0, int64_t u1) {
      Scratch<T> s(scratch_elems);
      for (int64_t u = u0; u < u1; ++u)
        backward_input_unit<T>(g, u / g.G, u % g.G, gy, w, gx, s.get(), nt);
    });
  } else {
    Scratch<T> s(scratch_elems);
    for (int64_t u = 0; u < units; ++u)
      backward_input_unit<T>(g, u / g.G, u % g.G, gy, w, gx, s.get(), nt);
  }
}

// ---------------------------------------------------------------------------------------------
// Backward weight: gw[grp] (+)= Σ_n gy[n, grp] · col[n, grp]ᵀ. accumulate=false overwrites.

template <typename T>
void backward_weight_unit(const ConvGeom& g, int64_t n, int64_t grp, const T* x, const T* gy, T* gw,
                          T* scratch, int64_t nt) {
  const int64_t K = g.K(), howo = g.HoWo();
  const T* xg = x + (n * g.C + grp * g.Cg) * g.HW();
  const T* gyg = gy + (n * g.O + grp * g.Og) * howo;
  T* gwg = gw + grp * g.Og * K;
  if (K == 0) return;
  if (g.direct_1x1()) {
    gemm<T>(false, true, g.Og, K, howo, gyg, howo, xg, g.HW(), T(1), gwg, K);
    return;
  }
  for (int64_t c0 = 0; c0 < howo; c0 += nt) {
    const int64_t c1 = std::min(howo, c0 + nt), cols = c1 - c0;
    if (in_parallel_region()) {
      im2col_rows<T>(g, xg, c0, c1, scratch, 0, K);
    } else {
      parallel_for(0, K, std::max<int64_t>(1, 16384 / cols),
                   [&](int64_t r0, int64_t r1) { im2col_rows<T>(g, xg, c0, c1, scratch, r0, r1); });
    }
    gemm<T>(false, true, g.Og, K, cols, gyg + c0, howo, scratch, cols, T(1), gwg, K);
  }
}

template <typename T>
void conv_backward_weight(const ConvGeom& g, const T* x, const T* gy, T* gw) {
  const int64_t wsize = g.O * g.K();
  std::fill(gw, gw + wsize, T(0));
  if (g.N == 0 || wsize == 0) return;
  const int64_t nt = tile_cols<T>(g);
  const int64_t scratch_elems = g.direct_1x1() ? 1 : g.K() * nt;
  const int nthreads = num_threads();
  if (parallel_units(g.G)) {
    // Groups write disjoint slices of gw.
    parallel_for(0, g.G, 1, [&](int64_t g0, int64_t g1) {
      Scratch<T> s(scratch_elems);
      for (int64_t grp = g0; grp < g1; ++grp)
        for (int64_t n = 0; n < g.N; ++n)
          backward_weight_unit<T>(g, n, grp, x, gy, gw, s.get(), nt);
    });
  } else if (nthreads > 1 && !in_parallel_region() && g.N >= nthreads) {
    // Images split into one chunk per thread, each accumulating into its own buffer.
    const int64_t chunks = nthreads;
    std::vector<T> partial(static_cast<size_t>((chunks - 1) * wsize), T(0));
    parallel_for(0, chunks, 1, [&](int64_t k0, int64_t k1) {
      Scratch<T> s(scratch_elems);
      for (int64_t k = k0; k < k1; ++k) {
        T* dst = k == 0 ? gw : partial.data() + (k - 1) * wsize;
        const int64_t n0 = g.N * k / chunks, n1 = g.N * (k + 1) / chunks;
        for (int64_t n = n0; n < n1; ++n)
          for (int64_t grp = 0; grp < g.G; ++grp)
            backward_weight_unit<T>(g, n, grp, x, gy, dst, s.get(), nt);
      }
    });
    for (int64_t k = 1; k < chunks; ++k) {
      const T* src = partial.data() + (k - 1) * wsize;
      for (int64_t i = 0; i < wsize; ++i) gw[i] += src[i];
    }
  } else {
    Scratch<T> s(scratch_elems);
    for (int64_t n = 0; n < g.N; ++n)
      for (int64_t grp = 0; grp < g.G; ++grp)
        backward_weight_unit<T>(g, n, grp, x, gy, gw, s.get(), nt);
  }
}

// Depthwise backward: direct loops, parallel over channels (disjoint gx planes and gw rows).
template <typename T>
void depthwise_backward(const ConvGeom& g, const T* x, const T* gy, const T* w, T* gx, T* gw) {
  const int64_t HW = g.HW(), howo = g.HoWo(), KK = g.KH * g.KW;
  parallel_for(0, g.C, std::max<int64_t>(1, 16384 / std::max<int64_t>(g.N * howo * KK, 1)),
               [&](int64_t c0, int64_t c1) {
                 for (int64_t c = c0; c < c1; ++c) {
                   const T* wc = w + c * KK;
                   std::vector<double> gwacc(static_cast<size_t>(KK), 0.0);
                   for (int64_t n = 0; n < g.N; ++n) {
                     const T* gyp = gy + (n * g.C + c) * howo;
                     const T* xp = x ? x + (n * g.C + c) * HW : nullptr;
                     T* gxp = gx ? gx + (n * g.C + c) * HW : nullptr;
                     if (gxp) std::fill(gxp, gxp + HW, T(0));
                     for (int64_t kh = 0; kh < g.KH; ++kh) {
                       for (int64_t kw = 0; kw < g.KW; ++kw) {
                         const T wv = wc[kh * g.KW + kw];
                         const int64_t off = kw * g.dw - g.pw;
                         int64_t lo, hi;
                         valid_range(0, g.Wo, off, g.sw, g.W, lo, hi);
                         T acc = T(0);
                         for (int64_t oh = 0; oh < g.Ho; ++oh) {
                           const int64_t ih = oh * g.sh - g.ph + kh * g.dh;
                           if (ih < 0 || ih >= g.H) continue;
                           const T* gr = gyp + oh * g.Wo;
                           if (gxp) {
                             T* dr = gxp + ih * g.W + off;
                             for (int64_t ow = lo; ow < hi; ++ow) dr[ow * g.sw] += wv * gr[ow];
                           }
                           if (gw) {
                             const T* xr = xp + ih * g.W + off;
                             for (int64_t ow = lo; ow < hi; ++ow) acc += gr[ow] * xr[ow * g.sw];
                           }
                         }
                         gwacc[kh * g.KW + kw] += acc;
                       }
                     }
                   }
                   if (gw)
                     for (int64_t k = 0; k < KK; ++k) gw[c * KK + k] = static_cast<T>(gwacc[k]);
                 }
               });
}

template <typename T>
void bias_grad(int64_t N, int64_t O, int64_t HW, const T* gy, T* gb) {
  parallel_for(0, O, std::max<int64_t>(1, 16384 / std::max<int64_t>(N * HW, 1)),
               [&](int64_t o0, int64_t o1) {
                 for (int64_t o = o0; o < o1; ++o) {
                   double acc = 0.0;
                   for (int64_t n = 0; n < N; ++n) {
                     const T* p = gy + (n * O + o) * HW;
                     T s = T(0);
                     for (int64_t i = 0; i < HW; ++i) s += p[i];
                     acc += s;
                   }
                   gb[o] = static_cast<T>(acc);
                 }
               });
}

// ---------------------------------------------------------------------------------------------
// Dtype dispatch helpers.

template <typename Fn>
void dispatch_fd(DType d, Fn&& fn) {
  if (d == DType::Float32) {
    fn(float{});
  } else {
    fn(double{});
  }
}

template <typename T>
const T* ptr_or_null(const TensorImplPtr& t) {
  return t ? t->data_ptr<T>() : nullptr;
}

TensorImplPtr contig_or_null(const TensorImpl* t) {
  return t ? views::contiguous(*t) : TensorImplPtr{};
}

// Shared backward driver for conv2d (x = input, gy = grad_output) on resolved geometry.
void conv2d_backward_impl(std::string_view op, const ConvGeom& g, const TensorImpl& grad_output,
                          const TensorImpl& input, const TensorImpl& weight, TensorImpl* grad_input,
                          TensorImpl* grad_weight, TensorImpl* grad_bias) {
  auto gy = views::contiguous(grad_output);
  auto x = views::contiguous(input);
  auto w = views::contiguous(weight);
  OutTarget gx(grad_input), gw(grad_weight), gb(grad_bias);
  dispatch_fd(input.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (g.depthwise() && (grad_input || grad_weight)) {
      depthwise_backward<T>(g, x->data_ptr<T>(), gy->data_ptr<T>(), w->data_ptr<T>(),
                            grad_input ? gx.get<T>() : nullptr,
                            grad_weight ? gw.get<T>() : nullptr);
    } else {
      if (grad_input) conv_backward_input<T>(g, gy->data_ptr<T>(), w->data_ptr<T>(), gx.get<T>());
      if (grad_weight) conv_backward_weight<T>(g, x->data_ptr<T>(), gy->data_ptr<T>(), gw.get<T>());
    }
    if (grad_bias) bias_grad<T>(g.N, g.O, g.HoWo(), gy->data_ptr<T>(), gb.get<T>());
  });
  gx.finish();
  gw.finish();
  gb.finish();
}

}  // namespace

// =============================================================================================
// conv2d

Dims conv2d_output_shape(std::span<const int64_t> input, std::span<const int64_t> weight,
                         const Conv2dParams& p) {
  const ConvGeom g = make_geom("conv2d", input, weight, p);
  return Dims{g.N, g.O, g.Ho, g.Wo};
}

PreparedConv2dWeightPtr prepare_conv2d_weight(const TensorImpl& weight, const Conv2dParams& p,
                                              std::span<const int64_t> input_sizes) {
  const ConvGeom g = make_geom("conv2d", input_sizes, weight.sizes(), p);
  if (weight.dtype() != DType::Float32 || g.depthwise() || g.O == 0 || g.K() == 0 || g.HoWo() == 0)
    return nullptr;
  auto w = views::contiguous(weight);
  const float* wp = w->data_ptr<float>();
  auto prep = std::make_shared<PreparedConv>();
  prep->weight_sizes = Dims(weight.sizes());
  prep->params = p;
  if (conv_detail::winograd_applicable(g) && conv_detail::winograd_profitable(g)) {
    prep->winograd = conv_detail::winograd_prepare(g, wp);
  } else if (conv_detail::direct_conv_applicable(g)) {
    prep->direct.resize(static_cast<size_t>(conv_detail::direct_weight_floats(g)));
    conv_detail::direct_pack_weight(g, wp, prep->direct.data());
  } else if (lanes_over_channels(g)) {
    // K in (kh, kw, ci) order, as im2col_positions lays out the input (the same for 1x1).
    const int64_t K = g.K(), KK = g.KH * g.KW;
    std::vector<float> wk(static_cast<size_t>(g.Og * K));
    for (int64_t grp = 0; grp < g.G; ++grp) {
      const float* wg = wp + grp * g.Og * K;
      for (int64_t o = 0; o < g.Og; ++o)
        for (int64_t ci = 0; ci < g.Cg; ++ci)
          for (int64_t t = 0; t < KK; ++t) wk[o * K + t * g.Cg + ci] = wg[o * K + ci * KK + t];
      prep->groups.push_back(sgemm_pack_b(true, K, g.Og, wk.data(), K));
    }
  } else {
    for (int64_t grp = 0; grp < g.G; ++grp)
      prep->groups.push_back(sgemm_pack_a(false, g.Og, g.K(), wp + grp * g.Og * g.K(), g.K()));
  }
  return prep;
}

void conv2d_out(const TensorImpl& input, const TensorImpl& weight, const TensorImpl* bias,
                const Conv2dParams& p, TensorImpl& out, const ConvEpilogue& ep) {
  conv2d_out(input, weight, bias, p, out, ep, nullptr);
}

void conv2d_out(const TensorImpl& input, const TensorImpl& weight, const TensorImpl* bias,
                const Conv2dParams& p, TensorImpl& out, const ConvEpilogue& ep,
                const PreparedConv2dWeight* prepared) {
  constexpr std::string_view op = "conv2d";
  const ConvGeom g = make_geom(op, input.sizes(), weight.sizes(), p);
  check_dtype_floating(op, input, "input");
  check_same_dtype(op, input, weight, "weight");
  check_same_dtype(op, input, out, "out");
  const Dims out_shape{g.N, g.O, g.Ho, g.Wo};
  check_shape(op, out, out_shape, "out");
  if (bias) {
    check_same_dtype(op, input, *bias, "bias");
    check_shape(op, *bias, Dims{g.O}, "bias");
  }
  if (ep.residual) {
    check_same_dtype(op, input, *ep.residual, "residual");
    check_shape(op, *ep.residual, out_shape, "residual");
  }
  if (input.device() == Device::CUDA || out.device() == Device::CUDA) {
    KILN_CHECK(!ep.residual && !ep.block &&
                   (ep.activation == Activation::None || ep.activation == Activation::Relu),
               op,
               "a fused residual, block epilogue or activation other than relu is not built "
               "for cuda convolutions yet");
    return cuda::conv2d_out(input, weight, bias, p, ep.activation == Activation::Relu, out);
  }
  KILN_CHECK(!ep.block || input.dtype() == DType::Float32, op,
             "expected a float32 convolution for a generated epilogue, got ",
             dtype_name(input.dtype()));
  if (is_lowp(input.dtype())) {
    auto x = to_f32(&input), w = to_f32(&weight), b = to_f32(bias), r = to_f32(ep.residual);
    auto y = empty(out.sizes(), DType::Float32);
    ConvEpilogue e2 = ep;
    e2.residual = r.get();
    conv2d_out(*x, *w, b.get(), p, *y, e2);
    copy_(out, *y);
    return;
  }
  const auto* prep = dynamic_cast<const PreparedConv*>(prepared);
  if (prep && !prep->fits(weight, p)) prep = nullptr;
  auto x = views::contiguous(input);
  auto w = views::contiguous(weight);
  auto b = contig_or_null(bias);
  auto r = contig_or_null(ep.residual);
  OutTarget y(&out);
  dispatch_fd(input.dtype(), [&](auto tag) {
    using T = decltype(tag);
    conv_forward<T>(g, x->data_ptr<T>(), w->data_ptr<T>(), ptr_or_null<T>(b), ptr_or_null<T>(r),
                    y.get<T>(), ep, prep);
  });
  y.finish();
}

// =============================================================================================
// conv2d + global average pool (kiln.conv2d_avgpool): a classifier head's last conv and its
// adaptive_avg_pool2d to 1x1. With a weight prepared with the output channels across the GEMM's
// lanes (gemm-ch: 1x1 convs on small maps, MobileNetV2's 320 -> 1280 at 7x7), each image's
// product Yᵀ[HW, O] is averaged over its rows directly: no transpose back into [O, HW] and no
// second pass of the pooling kernel over the map.

// One image's map (C_out x H_out x W_out) is scratch, not an arena slot the loader sized: bounded
// (2^28 floats, 1 GiB) so that an artifact's padding or stride cannot ask for more.
constexpr int64_t kAvgPoolMapFloats = int64_t(1) << 28;

Dims conv2d_avgpool_output_shape(std::span<const int64_t> input, std::span<const int64_t> weight,
                                 const Conv2dParams& p) {
  const ConvGeom g = make_geom("conv2d_avgpool", input, weight, p);  // refuses empty planes
  int64_t map = 0;
  KILN_CHECK(mul_ok(g.O, g.HoWo(), map) && map <= kAvgPoolMapFloats, "conv2d_avgpool",
             "expected one image's output map of at most ", kAvgPoolMapFloats, " floats, got ", g.O,
             " x ", g.Ho, " x ", g.Wo);
  return Dims{g.N, g.O, 1, 1};
}

namespace {

// out[o] = mean over the rows of yt[rows, ld] (columns [o0, o1)): float sums over runs of 64 rows,
// added in double.
void column_means(const float* yt, int64_t rows, int64_t ld, int64_t o0, int64_t o1, float* out) {
  constexpr int64_t kRun = 64, kCols = 256;
  float part[kCols];
  double total[kCols];
  for (int64_t c0 = o0; c0 < o1; c0 += kCols) {
    const int64_t n = std::min(kCols, o1 - c0);
    std::fill(total, total + n, 0.0);
    for (int64_t r0 = 0; r0 < rows; r0 += kRun) {
      std::fill(part, part + n, 0.0f);
      for (int64_t r = r0; r < std::min(rows, r0 + kRun); ++r) {
        const float* row = yt + r * ld + c0;
        for (int64_t j = 0; j < n; ++j) part[j] += row[j];
      }
      for (int64_t j = 0; j < n; ++j) total[j] += part[j];
    }
    for (int64_t j = 0; j < n; ++j) out[c0 + j] = static_cast<float>(total[j] / double(rows));
  }
}

}  // namespace

void conv2d_avgpool_out(const TensorImpl& input, const TensorImpl& weight, const TensorImpl* bias,
                        const Conv2dParams& p, TensorImpl& out, const ConvEpilogue& ep,
                        const PreparedConv2dWeight* prepared) {
  constexpr std::string_view op = "conv2d_avgpool";
  check_same_dtype(op, input, out, "out");
  check_shape(op, out, conv2d_avgpool_output_shape(input.sizes(), weight.sizes(), p), "out");
  KILN_CHECK(ep.residual == nullptr, op,
             "expected no residual (it would be added before the "
             "activation, at every output position), got one of shape ",
             dims_str(ep.residual->sizes()));
  const ConvGeom g = make_geom(op, input.sizes(), weight.sizes(), p);
  const auto* prep = dynamic_cast<const PreparedConv*>(prepared);
  if (prep && !prep->fits(weight, p)) prep = nullptr;
  const bool f32 = input.dtype() == DType::Float32 && weight.dtype() == DType::Float32 &&
                   (!bias || bias->dtype() == DType::Float32) && out.is_contiguous();
  if (!f32) {
    // Other dtypes (which the fusion pass never makes): the map, then its mean (conv2d_out checks
    // the operands).
    auto y = empty(Dims{g.N, g.O, g.Ho, g.Wo}, input.dtype());
    conv2d_out(input, weight, bias, p, *y, ep, prepared);
    adaptive_avg_pool2d_out(*y, out);
    return;
  }
  if (bias) check_shape(op, *bias, Dims{g.O}, "bias");
  auto x = views::contiguous(input);
  auto w = views::contiguous(weight);
  auto b = contig_or_null(bias);
  const bool lanes_channels = prep && !prep->groups.empty() && prep->groups[0]->is_b();
  if (!lanes_channels || !g.direct_1x1() || g.G != 1) {
    // Any other conv: image by image, its map into scratch (lent by the executor: the plan's free
    // bytes), then the mean of each plane (as adaptive_avg_pool2d_out's global mean).
    const int64_t HW = g.HoWo();
    ConvGeom one = g;
    one.N = 1;
    Scratch<float> y(g.O * HW);
    float* o = out.data_ptr<float>();
    for (int64_t n = 0; n < g.N; ++n) {
      conv_forward<float>(one, x->data_ptr<float>() + n * g.C * g.H * g.W, w->data_ptr<float>(),
                          ptr_or_null<float>(b), nullptr, y.get(), ep, prep);
      parallel_for(0, g.O, std::max<int64_t>(1, 4096 / HW), [&](int64_t q0, int64_t q1) {
        for (int64_t q = q0; q < q1; ++q)
          column_means(y.get() + q * HW, HW, 1, 0, 1, o + n * g.O + q);
      });
    }
    return;
  }
  const SgemmPacked& wt = *prep->groups[0];
  const int64_t HW = g.HoWo(), O = g.O, C = g.C;
  Epilogue e = to_gemm_epilogue(ep);
  if (b) e.bias_kind = Epilogue::Bias::PerCol, e.bias = b->data_ptr<float>();
  const float* xp = x->data_ptr<float>();
  float* o = out.data_ptr<float>();
  // Yᵀ = Xᵀ · Wᵀ for image n into yt, then its column means; `parallel`: both steps over the
  // threads (one image at a time), else serially (one image per task).
  auto image = [&](int64_t n, float* yt, bool parallel) {
    sgemm_packed_b(true, HW, 1.0f, xp + n * C * HW, HW, wt, 0.0f, yt, O, e);
    auto means = [&](int64_t o0, int64_t o1) { column_means(yt, HW, O, o0, o1, o + n * O); };
    if (parallel)
      parallel_for(0, O, 64, means);
    else
      means(0, O);
  };
  if (parallel_units(g.N)) {
    parallel_for(0, g.N, 1, [&](int64_t n0, int64_t n1) {
      Scratch<float> yt(HW * O);
      for (int64_t n = n0; n < n1; ++n) image(n, yt.get(), false);
    });
  } else {
    Scratch<float> yt(HW * O);
    for (int64_t n = 0; n < g.N; ++n) image(n, yt.get(), true);
  }
}

void conv2d_backward_out(const TensorImpl& grad_output, const TensorImpl& input,
                         const TensorImpl& weight, const Conv2dParams& p, TensorImpl* grad_input,
                         TensorImpl* grad_weight, TensorImpl* grad_bias) {
  constexpr std::string_view op = "conv2d_backward";
  const ConvGeom g = make_geom(op, input.sizes(), weight.sizes(), p);
  check_dtype_floating(op, input, "input");
  check_same_dtype(op, input, weight, "weight");
  check_same_dtype(op, input, grad_output, "grad_output");
  check_shape(op, grad_output, Dims{g.N, g.O, g.Ho, g.Wo}, "grad_output");
  if (grad_input) {
    check_same_dtype(op, input, *grad_input, "grad_input");
    check_shape(op, *grad_input, input.sizes(), "grad_input");
  }
  if (grad_weight) {
    check_same_dtype(op, input, *grad_weight, "grad_weight");
    check_shape(op, *grad_weight, weight.sizes(), "grad_weight");
  }
  if (grad_bias) {
    check_same_dtype(op, input, *grad_bias, "grad_bias");
    check_shape(op, *grad_bias, Dims{g.O}, "grad_bias");
  }
  if (input.device() == Device::CUDA || grad_output.device() == Device::CUDA) {
    return cuda::conv2d_backward_out(grad_output, input, weight, p, grad_input, grad_weight,
                                     grad_bias);
  }
  if (is_lowp(input.dtype())) {
    auto gy = to_f32(&grad_output), x = to_f32(&input), w = to_f32(&weight);
    auto gx = grad_input ? empty(input.sizes(), DType::Float32) : TensorImplPtr{};
    auto gw = grad_weight ? empty(weight.sizes(), DType::Float32) : TensorImplPtr{};
    auto gb = grad_bias ? empty(Dims{g.O}, DType::Float32) : TensorImplPtr{};
    conv2d_backward_out(*gy, *x, *w, p, gx.get(), gw.get(), gb.get());
    if (grad_input) copy_(*grad_input, *gx);
    if (grad_weight) copy_(*grad_weight, *gw);
    if (grad_bias) copy_(*grad_bias, *gb);
    return;
  }
  conv2d_backward_impl(op, g, grad_output, input, weight, grad_input, grad_weight, grad_bias);
}

// =============================================================================================
// conv1d: conv2d with H = 1.

namespace {
Conv2dParams to_params(const Conv1dParams& p) {
  Conv2dParams q;
  q.stride_w = p.stride, q.pad_w = p.padding, q.dilation_w = p.dilation, q.groups = p.groups;
  return q;
}
void check_conv1d_ranks(std::string_view op, std::span<const int64_t> in,
                        std::span<const int64_t> wt) {
  KILN_CHECK(in.size() == 3, op, "expected input of 3 dims (N,C,L), got ", dims_str(in));
  KILN_CHECK(wt.size() == 3, op, "expected weight of 3 dims (C_out, C_in/groups, K), got ",
             dims_str(wt));
}
Dims as_2d(std::span<const int64_t> d) {
  return Dims{d[0], d[1], 1, d[2]};
}
TensorImplPtr view_2d(const TensorImpl& t) {
  return views::unsqueeze(t, 2);
}
}  // namespace

Dims conv1d_output_shape(std::span<const int64_t> input, std::span<const int64_t> weight,
                         const Conv1dParams& p) {
  check_conv1d_ranks("conv1d", input, weight);
  const ConvGeom g = make_geom("conv1d", as_2d(input), as_2d(weight), to_params(p));
  return Dims{g.N, g.O, g.Wo};
}

void conv1d_out(const TensorImpl& input, const TensorImpl& weight, const TensorImpl* bias,
                const Conv1dParams& p, TensorImpl& out, const ConvEpilogue& ep) {
  const Dims os = conv1d_output_shape(input.sizes(), weight.sizes(), p);
  check_shape("conv1d", out, os, "out");
  auto x = view_2d(input), w = view_2d(weight), y = view_2d(out);
  TensorImplPtr r = ep.residual ? view_2d(*ep.residual) : TensorImplPtr{};
  if (ep.residual) check_shape("conv1d", *ep.residual, os, "residual");
  ConvEpilogue e2 = ep;
  e2.residual = r.get();
  conv2d_out(*x, *w, bias, to_params(p), *y, e2);
}

void conv1d_backward_out(const TensorImpl& grad_output, const TensorImpl& input,
                         const TensorImpl& weight, const Conv1dParams& p, TensorImpl* grad_input,
                         TensorImpl* grad_weight, TensorImpl* grad_bias) {
  const Dims os = conv1d_output_shape(input.sizes(), weight.sizes(), p);
  check_shape("conv1d_backward", grad_output, os, "grad_output");
  if (grad_input) check_shape("conv1d_backward", *grad_input, input.sizes(), "grad_input");
  if (grad_weight) check_shape("conv1d_backward", *grad_weight, weight.sizes(), "grad_weight");
  auto gy = view_2d(grad_output), x = view_2d(input), w = view_2d(weight);
  auto gx = grad_input ? view_2d(*grad_input) : TensorImplPtr{};
  auto gw = grad_weight ? view_2d(*grad_weight) : TensorImplPtr{};
  conv2d_backward_out(*gy, *x, *w, to_params(p), gx.get(), gw.get(), grad_bias);
}

// =============================================================================================
// conv_transpose2d: the output plays conv2d's input, the input plays conv2d's output.

namespace {
// Geometry of the equivalent conv2d (input = convT output) plus checks.
ConvGeom transpose_geom(std::string_view op, std::span<const int64_t> in,
                        std::span<const int64_t> wt, const ConvTranspose2dParams& t) {
  KILN_CHECK(in.size() == 4, op, "expected input of 4 dims (N,C,H,W), got ", dims_str(in));
  KILN_CHECK(wt.size() == 4, op, "expected weight of 4 dims (C_in, C_out/groups, KH, KW), got ",
             dims_str(wt));
  check_params(op, t.stride_h, t.stride_w, t.pad_h, t.pad_w, t.dilation_h, t.dilation_w, t.groups);
  KILN_CHECK(t.output_pad_h >= 0 && t.output_pad_w >= 0, op, "expected output_padding >= 0, got (",
             t.output_pad_h, ", ", t.output_pad_w, ")");
  KILN_CHECK((t.output_pad_h < t.stride_h || t.output_pad_h < t.dilation_h) &&
                 (t.output_pad_w < t.stride_w || t.output_pad_w < t.dilation_w),
             op, "expected output_padding smaller than stride or dilation, got output_padding (",
             t.output_pad_h, ", ", t.output_pad_w, "), stride (", t.stride_h, ", ", t.stride_w,
             "), dilation (", t.dilation_h, ", ", t.dilation_w, ")");
  KILN_CHECK(wt[2] > 0 && wt[3] > 0, op, "expected a non-empty kernel, got weight ", dims_str(wt));
  KILN_CHECK(wt[0] == in[1], op, "expected input with weight.size(0) = ", wt[0], " channels, got ",
             in[1], " channels (input ", dims_str(in), ", weight ", dims_str(wt), ")");
  KILN_CHECK(wt[0] % t.groups == 0, op, "expected input channels (", wt[0],
             ") divisible by groups (", t.groups, ")");
  // (in-1)*s - 2p + d*(k-1) + output_padding + 1, or nothing when a step overflows int64.
  auto extent = [](int64_t in, int64_t s, int64_t p, int64_t d, int64_t k,
                   int64_t op_pad) -> std::optional<int64_t> {
    int64_t a = 0, b = 0, two_p = 0, r = 0;
    if (!mul_ok(in - 1, s, a) || !mul_ok(d, k - 1, b) || !mul_ok(p, 2, two_p) || !add_ok(a, b, r) ||
        !sub_ok(r, two_p, r) || !add_ok(r, op_pad + 1, r))
      return std::nullopt;
    return r;
  };
  const auto ho = extent(in[2], t.stride_h, t.pad_h, t.dilation_h, wt[2], t.output_pad_h);
  const auto wo = extent(in[3], t.stride_w, t.pad_w, t.dilation_w, wt[3], t.output_pad_w);
  int64_t out_channels = 0;
  KILN_CHECK(ho && wo && mul_ok(wt[1], t.groups, out_channels), op,
             "expected stride, padding, dilation and kernel whose output size fits in 64 bits, got "
             "stride (",
             t.stride_h, ", ", t.stride_w, "), padding (", t.pad_h, ", ", t.pad_w, "), dilation (",
             t.dilation_h, ", ", t.dilation_w, "), input ", dims_str(in), ", weight ", dims_str(wt),
             ", groups ", t.groups);
  KILN_CHECK(*ho >= 1 && *wo >= 1, op, "expected a positive output size, got ", *ho, "x", *wo,
             " (input ", dims_str(in), ", weight ", dims_str(wt), ")");
  const Dims conv_in{in[0], out_channels, *ho, *wo};
  ConvGeom g = make_geom(op, conv_in, wt, to_params(t));
  KILN_CHECK(g.Ho == in[2] && g.Wo == in[3], op, "internal: inconsistent transposed geometry");
  return g;
}
}  // namespace

Dims conv_transpose2d_output_shape(std::span<const int64_t> input, std::span<const int64_t> weight,
                                   const ConvTranspose2dParams& p) {
  const ConvGeom g = transpose_geom("conv_transpose2d", input, weight, p);
  return Dims{g.N, g.C, g.H, g.W};
}

void conv_transpose2d_out(const TensorImpl& input, const TensorImpl& weight, const TensorImpl* bias,
                          const ConvTranspose2dParams& p, TensorImpl& out) {
  constexpr std::string_view op = "conv_transpose2d";
  const ConvGeom g = transpose_geom(op, input.sizes(), weight.sizes(), p);
  check_dtype_floating(op, input, "input");
  check_same_dtype(op, input, weight, "weight");
  check_same_dtype(op, input, out, "out");
  check_shape(op, out, Dims{g.N, g.C, g.H, g.W}, "out");
  if (bias) {
    check_same_dtype(op, input, *bias, "bias");
    check_shape(op, *bias, Dims{g.C}, "bias");
  }
  if (is_lowp(input.dtype())) {
    auto x = to_f32(&input), w = to_f32(&weight), b = to_f32(bias);
    auto y = empty(out.sizes(), DType::Float32);
    conv_transpose2d_out(*x, *w, b.get(), p, *y);
    copy_(out, *y);
    return;
  }
  auto x = views::contiguous(input);
  auto w = views::contiguous(weight);
  auto b = contig_or_null(bias);
  OutTarget y(&out);
  dispatch_fd(input.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* yp = y.get<T>();
    if (g.depthwise()) {
      depthwise_backward<T>(g, nullptr, x->data_ptr<T>(), w->data_ptr<T>(), yp, nullptr);
    } else {
      conv_backward_input<T>(g, x->data_ptr<T>(), w->data_ptr<T>(), yp);
    }
    if (b) {
      const T* bp = b->data_ptr<T>();
      const int64_t hw = g.HW();
      parallel_for(0, g.N * g.C, std::max<int64_t>(1, 16384 / std::max<int64_t>(hw, 1)),
                   [&](int64_t a, int64_t e) {
                     for (int64_t i = a; i < e; ++i) {
                       T* pl = yp + i * hw;
                       const T bv = bp[i % g.C];
                       for (int64_t k = 0; k < hw; ++k) pl[k] += bv;
                     }
                   });
    }
  });
  y.finish();
}

void conv_transpose2d_backward_out(const TensorImpl& grad_output, const TensorImpl& input,
                                   const TensorImpl& weight, const ConvTranspose2dParams& p,
                                   TensorImpl* grad_input, TensorImpl* grad_weight,
                                   TensorImpl* grad_bias) {
  constexpr std::string_view op = "conv_transpose2d_backward";
  const ConvGeom g = transpose_geom(op, input.sizes(), weight.sizes(), p);
  check_dtype_floating(op, input, "input");
  check_same_dtype(op, input, weight, "weight");
  check_same_dtype(op, input, grad_output, "grad_output");
  check_shape(op, grad_output, Dims{g.N, g.C, g.H, g.W}, "grad_output");
  if (grad_input) {
    check_same_dtype(op, input, *grad_input, "grad_input");
    check_shape(op, *grad_input, input.sizes(), "grad_input");
  }
  if (grad_weight) {
    check_same_dtype(op, input, *grad_weight, "grad_weight");
    check_shape(op, *grad_weight, weight.sizes(), "grad_weight");
  }
  if (grad_bias) {
    check_same_dtype(op, input, *grad_bias, "grad_bias");
    check_shape(op, *grad_bias, Dims{g.C}, "grad_bias");
  }
  if (is_lowp(input.dtype())) {
    auto gy = to_f32(&grad_output), x = to_f32(&input), w = to_f32(&weight);
    auto gx = grad_input ? empty(input.sizes(), DType::Float32) : TensorImplPtr{};
    auto gw = grad_weight ? empty(weight.sizes(), DType::Float32) : TensorImplPtr{};
    auto gb = grad_bias ? empty(Dims{g.C}, DType::Float32) : TensorImplPtr{};
    conv_transpose2d_backward_out(*gy, *x, *w, p, gx.get(), gw.get(), gb.get());
    if (grad_input) copy_(*grad_input, *gx);
    if (grad_weight) copy_(*grad_weight, *gw);
    if (grad_bias) copy_(*grad_bias, *gb);
    return;
  }
  // convT input = conv "output" (gy role); convT grad_output = conv "input" (x role).
  // grad_input of convT = conv2d(grad_output, w); grad_weight = conv2d weight grad with
  // x = grad_output, gy = input.
  if (grad_input) {
    Conv2dParams cp = to_params(p);
    conv2d_out(grad_output, weight, nullptr, cp, *grad_input);
  }
  if (grad_weight || grad_bias) {
    auto x = views::contiguous(grad_output);
    auto gyc = views::contiguous(input);
    auto w = views::contiguous(weight);
    OutTarget gw(grad_weight), gb(grad_bias);
    dispatch_fd(input.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if (grad_weight) {
        if (g.depthwise()) {
          depthwise_backward<T>(g, x->data_ptr<T>(), gyc->data_ptr<T>(), w->data_ptr<T>(), nullptr,
                                gw.get<T>());
        } else {
          conv_backward_weight<T>(g, x->data_ptr<T>(), gyc->data_ptr<T>(), gw.get<T>());
        }
      }
      if (grad_bias) bias_grad<T>(g.N, g.C, g.HW(), x->data_ptr<T>(), gb.get<T>());
    });
    gw.finish();
    gb.finish();
  }
}

namespace conv_detail {

// 8x8 blocks in registers.
void transpose_epilogue(const float* yt, int64_t ldt, int64_t cols, int64_t rows, float* y,
                        int64_t ldy, const float* res, int64_t ld_res, const Epilogue& act) {
  const bool vec_act = vector_activation(act.activation);
  const __m256 lo = _mm256_set1_ps(act.activation == Activation::Clamp ? act.clamp_min : 0.0f);
  const __m256 hi = _mm256_set1_ps(act.activation == Activation::Clamp ? act.clamp_max : 6.0f);
  auto finish8 = [&](__m256 v, int64_t o, int64_t p) {
    if (res) v = _mm256_add_ps(v, _mm256_loadu_ps(res + o * ld_res + p));
    if (act.activation == Activation::Relu) v = _mm256_max_ps(v, _mm256_setzero_ps());
    if (act.activation == Activation::Relu6 || act.activation == Activation::Clamp)
      v = _mm256_min_ps(hi, _mm256_max_ps(lo, v));
    _mm256_storeu_ps(y + o * ldy + p, v);
  };
  const int64_t p8 = cols / 8 * 8, o8 = rows / 8 * 8;
  for (int64_t p = 0; p < p8; p += 8) {
    for (int64_t o = 0; o < o8; o += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(yt + (p + i) * ldt + o);
      simd::transpose8(r);
      for (int j = 0; j < 8; ++j) finish8(r[j], o + j, p);
    }
  }
  // Ragged edges (and every element when the activation has no vector form) one at a time.
  auto one = [&](int64_t o, int64_t p) {
    float v = yt[p * ldt + o];
    if (res) v += res[o * ld_res + p];
    y[o * ldy + p] = apply_activation(v, act);
  };
  if (!vec_act) {
    for (int64_t o = 0; o < rows; ++o)
      for (int64_t p = 0; p < cols; ++p) one(o, p);
    return;
  }
  for (int64_t o = o8; o < rows; ++o)
    for (int64_t p = 0; p < cols; ++p) one(o, p);
  for (int64_t o = 0; o < o8; ++o)
    for (int64_t p = p8; p < cols; ++p) one(o, p);
}

}  // namespace conv_detail

}  // namespace kiln::kernels
