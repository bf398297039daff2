// max_pool2d / avg_pool2d / adaptive_avg_pool2d and their backward passes. Planes (n, c) are
// independent: every kernel is parallel over planes (and their backward writes only its own
// grad_input plane, so no atomics).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "kiln/runtime/cuda/nn.h"
#include "kiln/runtime/kernels/pool.h"
#include "kiln/runtime/thread_pool.h"
#include "nn_common.h"
#include "pool_internal.h"

namespace kiln::kernels {
namespace pool_detail {

using namespace nn_detail;

void check_pool_input(std::string_view op, std::span<const int64_t> in) {
  KILN_CHECK(in.size() == 3 || in.size() == 4, op,
             "expected input of 3 or 4 dims ((N,)C,H,W), got ", dims_str(in));
  for (size_t d = in.size() - 3; d < in.size(); ++d)
    KILN_CHECK(in[d] > 0, op, "expected non-empty C, H and W, got input ", dims_str(in));
}

PoolGeom pool_geom(std::string_view op, std::span<const int64_t> in, const Pool2dParams& p,
                   bool max_pool) {
  check_pool_input(op, in);
  PoolGeom g;
  g.kh = p.kernel_h, g.kw = p.kernel_w;
  g.sh = p.stride_h == 0 ? p.kernel_h : p.stride_h;
  g.sw = p.stride_w == 0 ? p.kernel_w : p.stride_w;
  g.ph = p.pad_h, g.pw = p.pad_w;
  g.dh = max_pool ? p.dilation_h : 1;
  g.dw = max_pool ? p.dilation_w : 1;
  KILN_CHECK(g.kh > 0 && g.kw > 0, op, "expected kernel size > 0, got (", g.kh, ", ", g.kw, ")");
  KILN_CHECK(g.sh > 0 && g.sw > 0, op, "expected stride > 0, got (", g.sh, ", ", g.sw, ")");
  KILN_CHECK(g.dh > 0 && g.dw > 0, op, "expected dilation > 0, got (", g.dh, ", ", g.dw, ")");
  KILN_CHECK(g.ph >= 0 && g.pw >= 0, op, "expected padding >= 0, got (", g.ph, ", ", g.pw, ")");
  // Bounds the extent arithmetic below for any artifact's attributes.
  constexpr int64_t kMaxParam = int64_t(1) << 31;
  KILN_CHECK(std::max({g.kh, g.kw, g.sh, g.sw, g.dh, g.dw}) < kMaxParam, op,
             "expected kernel size, stride and dilation below 2^31, got kernel (", g.kh, ", ", g.kw,
             "), stride (", g.sh, ", ", g.sw, "), dilation (", g.dh, ", ", g.dw, ")");
  const int64_t eff_h = g.dh * (g.kh - 1) + 1, eff_w = g.dw * (g.kw - 1) + 1;
  KILN_CHECK(g.ph <= (max_pool ? eff_h : g.kh) / 2 && g.pw <= (max_pool ? eff_w : g.kw) / 2, op,
             "expected padding at most half of the kernel size, got padding (", g.ph, ", ", g.pw,
             ") for kernel (", g.kh, ", ", g.kw, ")");
  const size_t r = in.size();
  g.H = in[r - 2], g.W = in[r - 1];
  g.Ho = pool_output_size(g.H, g.kh, g.sh, g.ph, g.dh, p.ceil_mode);
  g.Wo = pool_output_size(g.W, g.kw, g.sw, g.pw, g.dw, p.ceil_mode);
  KILN_CHECK(g.Ho >= 1 && g.Wo >= 1, op, "expected an output of at least 1x1, got ", g.Ho, "x",
             g.Wo, " for input ", dims_str(in));
  // The inference max pool keeps one padded row per thread, about W + pw + eff_w: padding and
  // the dilated window may reach only so far past the input, so that an artifact's attributes
  // cannot turn a 1-wide input into a row of 2^62 (dilation and kernel below 2^31 each).
  constexpr int64_t kMaxReach = int64_t(1) << 25;
  KILN_CHECK(g.ph <= kMaxReach && g.pw <= kMaxReach && eff_h <= g.H + 2 * kMaxReach &&
                 eff_w <= g.W + 2 * kMaxReach,
             op, "expected padding of at most 2^25 and a dilated kernel at most 2^26 beyond the ",
             "input, got padding (", g.ph, ", ", g.pw, "), dilated kernel (", eff_h, ", ", eff_w,
             ") for input ", dims_str(in));
  g.planes = 1;
  for (size_t d = 0; d + 2 < r; ++d) g.planes *= in[d];
  g.out_shape = Dims(in);
  g.out_shape[r - 2] = g.Ho;
  g.out_shape[r - 1] = g.Wo;
  return g;
}

int64_t plane_grain(int64_t work_per_plane) {
  return std::max<int64_t>(1, 32768 / std::max<int64_t>(work_per_plane, 1));
}

}  // namespace pool_detail

namespace {

using namespace nn_detail;
using namespace pool_detail;

// ---------------------------------------------------------------------------------------------
// Below every value: -inf, or the least value of an 8-bit type (max pooling of quantized bytes).
template <typename T>
constexpr T below_all() {
  if constexpr (std::numeric_limits<T>::has_infinity)
    return -std::numeric_limits<T>::infinity();
  else
    return std::numeric_limits<T>::lowest();
}

// The input rows [hs, he) (step dh) output row oh reads; hs >= he when the dilated window
// skips every input row.
inline void window_rows(const PoolGeom& g, int64_t oh, int64_t& hs, int64_t& he) {
  hs = oh * g.sh - g.ph;
  he = std::min(hs + (g.kh - 1) * g.dh + 1, g.H);
  while (hs < 0) hs += g.dh;
}
// The same for the columns of output column ow.
inline void window_cols(const PoolGeom& g, int64_t ow, int64_t& ws, int64_t& we) {
  ws = ow * g.sw - g.pw;
  we = std::min(ws + (g.kw - 1) * g.dw + 1, g.W);
  while (ws < 0) ws += g.dw;
}

// One output of the max pool with indices, as PyTorch defines it: the window (input rows
// [hs, he) step dh) scanned in row-major order, a value taken when greater than the best so far
// or NaN (so the first maximum, or the last NaN; a window of nothing above below_all keeps its
// first position).
template <typename T>
void max_pool_scan(const PoolGeom& g, const T* xp, int64_t hs, int64_t he, int64_t ow, T* yr,
                   int64_t* ir) {
  int64_t ws, we;
  window_cols(g, ow, ws, we);
  int64_t best = hs * g.W + ws;
  T m = below_all<T>();
  for (int64_t ih = hs; ih < he; ih += g.dh) {
    const T* row = xp + ih * g.W;
    for (int64_t iw = ws; iw < we; iw += g.dw) {
      const T v = row[iw];
      if (v > m || v != v) {
        m = v;
        best = ih * g.W + iw;
      }
    }
  }
  yr[ow] = m;
  ir[ow] = best;
}

// Outputs [o_lo, o_hi) of a row whose K x K windows (stride S, no dilation) lie inside the input:
// the scan above with compile-time bounds and selects (vector code across outputs), positions in
// int32. `x0`: the window's top row.
template <typename T, int K, int S>
void scan_windows(const T* __restrict x0, int32_t W, int32_t row0, int64_t pw, int64_t o_lo,
                  int64_t o_hi, T* __restrict yr, int64_t* __restrict ir) {
  for (int64_t ow = o_lo; ow < o_hi; ++ow) {
    const int32_t c0 = static_cast<int32_t>(ow * S - pw);
    T m = below_all<T>();
    int32_t at = row0 * W + c0;
    for (int i = 0; i < K; ++i)
      for (int j = 0; j < K; ++j) {
        const T v = x0[i * W + c0 + j];
        const bool take = v > m || v != v;
        m = take ? v : m;
        at = take ? (row0 + i) * W + c0 + j : at;
      }
    yr[ow] = m;
    ir[ow] = at;
  }
}

// Whole-window outputs of row oh through scan_windows when the pool is one of the common shapes
// and the row's window lies inside the input; false otherwise.
template <typename T>
bool scan_common_row(const PoolGeom& g, const T* xp, int64_t hs, int64_t he, T* yr, int64_t* ir) {
  if (g.kh != g.kw || g.sh != g.sw || g.dh != 1 || g.dw != 1 || he - hs != g.kh ||
      g.H * g.W >= (int64_t(1) << 31))
    return false;
  auto run = [&](auto kernel) {
    const int64_t o_lo = std::min(g.Wo, (g.pw + g.sw - 1) / g.sw);
    const int64_t last = g.W - g.kw + g.pw;  // the last ow * sw whose window fits
    const int64_t o_hi = std::max(o_lo, last < 0 ? 0 : std::min(g.Wo, last / g.sw + 1));
    kernel(xp + hs * g.W, static_cast<int32_t>(g.W), static_cast<int32_t>(hs), g.pw, o_lo, o_hi, yr,
           ir);
    for (int64_t ow = 0; ow < o_lo; ++ow) max_pool_scan(g, xp, hs, he, ow, yr, ir);
    for (int64_t ow = o_hi; ow < g.Wo; ++ow) max_pool_scan(g, xp, hs, he, ow, yr, ir);
    return true;
  };
  if (g.kh == 3 && g.sh == 2) return run(scan_windows<T, 3, 2>);
  if (g.kh == 3 && g.sh == 1) return run(scan_windows<T, 3, 1>);
  if (g.kh == 2 && g.sh == 2) return run(scan_windows<T, 2, 2>);
  return false;
}

// max_pool_fwd with indices (training). Rows of the common pools whose window lies inside the
// input: scan_common_row. Other rows: first down the columns — for every input column the best
// of the window's rows and which row holds it (vector code: the scan's rule per column, a later
// row taken only when greater or NaN) — then along the row, each window's best column. A
// column's candidate stands for its rows in row-major order, so the second step keeps the scan's
// result by comparing positions: among NaNs the last, among equal values the first. Rows are
// numbered in int32; taller planes take the scan.
template <typename T>
void max_pool_fwd(const PoolGeom& g, const T* x, T* y, int64_t* idx) {
  const int64_t HW = g.H * g.W, howo = g.Ho * g.Wo;
  const bool by_columns = g.H < (int64_t(1) << 31);
  parallel_for(0, g.planes, plane_grain(howo * g.kh * g.kw), [&](int64_t p0, int64_t p1) {
    std::vector<T> acc_buf;
    std::vector<int32_t> row_buf;
    for (int64_t p = p0; p < p1; ++p) {
      const T* xp = x + p * HW;
      for (int64_t oh = 0; oh < g.Ho; ++oh) {
        T* yr = y + p * howo + oh * g.Wo;
        int64_t* ir = idx + p * howo + oh * g.Wo;
        int64_t hs, he;
        window_rows(g, oh, hs, he);
        if (scan_common_row(g, xp, hs, he, yr, ir)) continue;
        if (!by_columns || hs >= he) {
          for (int64_t ow = 0; ow < g.Wo; ++ow) max_pool_scan(g, xp, hs, he, ow, yr, ir);
          continue;
        }
        const int64_t W = g.W;
        acc_buf.resize(static_cast<size_t>(W));
        row_buf.resize(static_cast<size_t>(W));
        T* __restrict acc = acc_buf.data();
        int32_t* __restrict arow = row_buf.data();
        std::copy(xp + hs * W, xp + (hs + 1) * W, acc);
        std::fill(arow, arow + W, static_cast<int32_t>(hs));
        for (int64_t ih = hs + g.dh; ih < he; ih += g.dh) {
          const T* __restrict src = xp + ih * W;
          const int32_t r = static_cast<int32_t>(ih);
          for (int64_t i = 0; i < W; ++i) {
            const T v = src[i];
            const bool take = v > acc[i] || v != v;
            acc[i] = take ? v : acc[i];
            arow[i] = take ? r : arow[i];
          }
        }
        for (int64_t ow = 0; ow < g.Wo; ++ow) {
          int64_t ws, we;
          window_cols(g, ow, ws, we);
          T best = below_all<T>();
          int64_t at = hs * W + ws;
          bool best_nan = false;
          for (int64_t iw = ws; iw < we; iw += g.dw) {
            const T v = acc[iw];
            const int64_t i = int64_t(arow[iw]) * W + iw;
            const bool nan = v != v;
            const bool take =
                nan ? (!best_nan || i > at) : (!best_nan && (v > best || (v == best && i < at)));
            best = take ? v : best;
            at = take ? i : at;
            best_nan = best_nan || (take && nan);
          }
          yr[ow] = best;
          ir[ow] = at;
        }
      }
    }
  });
}

// max that propagates NaN from either side, as max_pool_fwd's scan does (written as a select so
// that the loops below vectorize).
template <typename T>
inline T nan_max(T a, T b) {
  return (b > a || b != b) ? b : a;
}

// y[ow] = max over k < KW of r[ow * SW + k * dw]: compile-time window and stride for the common
// pools (vectorized), any other at run time.
template <typename T, int KW, int SW>
void max_columns(const T* __restrict r, int64_t Wo, int64_t dw, T* __restrict y) {
  for (int64_t ow = 0; ow < Wo; ++ow) {
    T v = r[ow * SW];
    for (int k = 1; k < KW; ++k) v = nan_max(v, r[ow * SW + k * dw]);
    y[ow] = v;
  }
}
template <typename T>
void max_columns_any(const T* __restrict r, int64_t Wo, int64_t kw, int64_t sw, int64_t dw,
                     T* __restrict y) {
  for (int64_t ow = 0; ow < Wo; ++ow) {
    T v = r[ow * sw];
    for (int64_t k = 1; k < kw; ++k) v = nan_max(v, r[ow * sw + k * dw]);
    y[ow] = v;
  }
}

// max_pool_fwd without indices (inference): per output row, the elementwise max of the window's
// input rows into a -inf padded row, then each window's max along that row. Same values as
// max_pool_fwd, NaN included.
template <typename T>
void max_pool_fwd_values(const PoolGeom& g, const T* x, T* y) {
  const int64_t HW = g.H * g.W, howo = g.Ho * g.Wo;
  // Padded row: columns [pw, pw + W) hold input; every window read stays below `wp`.
  const int64_t wp = std::max(g.pw + g.W, (g.Wo - 1) * g.sw + (g.kw - 1) * g.dw + 1);
  const T ninf = below_all<T>();
  parallel_for(0, g.planes, plane_grain(howo * g.kh * g.kw), [&](int64_t p0, int64_t p1) {
    std::vector<T> row(static_cast<size_t>(wp), ninf);
    T* rm = row.data() + g.pw;
    for (int64_t p = p0; p < p1; ++p) {
      const T* xp = x + p * HW;
      T* yp = y + p * howo;
      for (int64_t oh = 0; oh < g.Ho; ++oh) {
        int64_t hs, he;
        window_rows(g, oh, hs, he);
        T* yr = yp + oh * g.Wo;
        if (hs >= he) {  // the dilated window skips every input row: all padding
          std::fill(yr, yr + g.Wo, ninf);
          continue;
        }
        // Locals and restrict pointers: byte stores (quantized values) may alias anything else.
        const int64_t W = g.W;
        T* __restrict acc = rm;
        std::copy(xp + hs * W, xp + (hs + 1) * W, acc);
        for (int64_t ih = hs + g.dh; ih < he; ih += g.dh) {
          const T* __restrict src = xp + ih * W;
          for (int64_t i = 0; i < W; ++i) acc[i] = nan_max(acc[i], src[i]);
        }
        const T* r = row.data();
        if (g.kw == 3 && g.sw == 2)
          max_columns<T, 3, 2>(r, g.Wo, g.dw, yr);
        else if (g.kw == 3 && g.sw == 1)
          max_columns<T, 3, 1>(r, g.Wo, g.dw, yr);
        else if (g.kw == 2 && g.sw == 2)
          max_columns<T, 2, 2>(r, g.Wo, g.dw, yr);
        else
          max_columns_any<T>(r, g.Wo, g.kw, g.sw, g.dw, yr);
      }
    }
  });
}

// Returns false (after finishing) when an index was outside the plane; such entries are skipped.
// (Workers must not throw: the error is raised by the caller after the parallel loop.)
template <typename T>
bool max_pool_bwd(int64_t planes, int64_t HW, int64_t howo, const T* gy, const int64_t* idx, T* gx,
                  int64_t& bad_index) {
  std::atomic<bool> ok{true};
  std::atomic<int64_t> bad{0};
  parallel_for(0, planes, plane_grain(howo + HW), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      T* gp = gx + p * HW;
      std::fill(gp, gp + HW, T(0));
      const T* g = gy + p * howo;
      const int64_t* ip = idx + p * howo;
      for (int64_t i = 0; i < howo; ++i) {
        const int64_t k = ip[i];
        if (k < 0 || k >= HW) [[unlikely]] {
          bad.store(k);
          ok.store(false);
          continue;
        }
        gp[k] += g[i];
      }
    }
  });
  bad_index = bad.load();
  return ok.load();
}

template <typename T>
void avg_pool_fwd(const PoolGeom& g, const Pool2dParams& pp, const T* x, T* y) {
  const int64_t HW = g.H * g.W, howo = g.Ho * g.Wo;
  parallel_for(0, g.planes, plane_grain(howo * g.kh * g.kw), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const T* xp = x + p * HW;
      T* yp = y + p * howo;
      for (int64_t oh = 0; oh < g.Ho; ++oh)
        for (int64_t ow = 0; ow < g.Wo; ++ow) {
          const AvgWin w = avg_window(g, pp, oh, ow);
          if (w.hs >= w.he || w.ws >= w.we) {
            yp[oh * g.Wo + ow] = T(0);
            continue;
          }
          T s = T(0);
          for (int64_t ih = w.hs; ih < w.he; ++ih)
            for (int64_t iw = w.ws; iw < w.we; ++iw) s += xp[ih * g.W + iw];
          yp[oh * g.Wo + ow] = s / static_cast<T>(w.divisor);
        }
    }
  });
}

template <typename T>
void avg_pool_bwd(const PoolGeom& g, const Pool2dParams& pp, const T* gy, T* gx) {
  const int64_t HW = g.H * g.W, howo = g.Ho * g.Wo;
  parallel_for(0, g.planes, plane_grain(howo * g.kh * g.kw), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      T* gp = gx + p * HW;
      std::fill(gp, gp + HW, T(0));
      const T* yp = gy + p * howo;
      for (int64_t oh = 0; oh < g.Ho; ++oh)
        for (int64_t ow = 0; ow < g.Wo; ++ow) {
          const AvgWin w = avg_window(g, pp, oh, ow);
          const T v = yp[oh * g.Wo + ow] / static_cast<T>(w.divisor);
          for (int64_t ih = w.hs; ih < w.he; ++ih)
            for (int64_t iw = w.ws; iw < w.we; ++iw) gp[ih * g.W + iw] += v;
        }
    }
  });
}

inline int64_t adaptive_start(int64_t i, int64_t out, int64_t in) {
  return (i * in) / out;
}
inline int64_t adaptive_end(int64_t i, int64_t out, int64_t in) {
  return ((i + 1) * in + out - 1) / out;
}

template <typename T>
void adaptive_fwd(int64_t planes, int64_t H, int64_t W, int64_t Ho, int64_t Wo, const T* x, T* y) {
  parallel_for(0, planes, plane_grain(H * W + Ho * Wo), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const T* xp = x + p * H * W;
      T* yp = y + p * Ho * Wo;
      if (Ho == 1 && Wo == 1) {  // global pooling: one vectorized sum per plane
        yp[0] = static_cast<T>(row_sum(xp, H * W) / static_cast<double>(H * W));
        continue;
      }
      for (int64_t oh = 0; oh < Ho; ++oh) {
        const int64_t hs = adaptive_start(oh, Ho, H), he = adaptive_end(oh, Ho, H);
        for (int64_t ow = 0; ow < Wo; ++ow) {
          const int64_t ws = adaptive_start(ow, Wo, W), we = adaptive_end(ow, Wo, W);
          T s = T(0);
          for (int64_t ih = hs; ih < he; ++ih)
            for (int64_t iw = ws; iw < we; ++iw) s += xp[ih * W + iw];
          yp[oh * Wo + ow] = s / static_cast<T>((he - hs) * (we - ws));
        }
      }
    }
  });
}

template <typename T>
void adaptive_bwd(int64_t planes, int64_t H, int64_t W, int64_t Ho, int64_t Wo, const T* gy,
                  T* gx) {
  parallel_for(0, planes, plane_grain(H * W + Ho * Wo), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      T* gp = gx + p * H * W;
      std::fill(gp, gp + H * W, T(0));
      const T* yp = gy + p * Ho * Wo;
      for (int64_t oh = 0; oh < Ho; ++oh) {
        const int64_t hs = adaptive_start(oh, Ho, H), he = adaptive_end(oh, Ho, H);
        for (int64_t ow = 0; ow < Wo; ++ow) {
          const int64_t ws = adaptive_start(ow, Wo, W), we = adaptive_end(ow, Wo, W);
          const T v = yp[oh * Wo + ow] / static_cast<T>((he - hs) * (we - ws));
          for (int64_t ih = hs; ih < he; ++ih)
            for (int64_t iw = ws; iw < we; ++iw) gp[ih * W + iw] += v;
        }
      }
    }
  });
}

// grad_input / grad_output shape agreement for the backward passes: same rank, same leading dims.
void check_grad_pair(std::string_view op, const TensorImpl& gy, const TensorImpl& gx) {
  check_pool_input(op, gx.sizes());
  KILN_CHECK(gy.dim() == gx.dim(), op, "expected grad_output of rank ", gx.dim(), ", got ",
             dims_str(gy.sizes()));
  for (int64_t d = 0; d + 2 < gx.dim(); ++d)
    KILN_CHECK(gy.size(d) == gx.size(d), op, "expected grad_output with leading dims of ",
               dims_str(gx.sizes()), ", got ", dims_str(gy.sizes()));
  check_same_dtype(op, gx, gy, "grad_output");
}

}  // namespace

int64_t pool_output_size(int64_t in, int64_t k, int64_t s, int64_t pad, int64_t d, bool ceil_mode) {
  const int64_t num = in + 2 * pad - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
  // Floor division (num may be negative when the input is too small).
  int64_t out = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
  if (ceil_mode && (out - 1) * s >= in + pad) --out;
  return out;
}

// ---------------------------------------------------------------------------------------------
Dims max_pool2d_output_shape(std::span<const int64_t> input, const Pool2dParams& p) {
  return pool_geom("max_pool2d", input, p, true).out_shape;
}

void max_pool2d_out(const TensorImpl& input, const Pool2dParams& p, TensorImpl& out,
                    TensorImpl* indices) {
  constexpr std::string_view op = "max_pool2d";
  const PoolGeom g = pool_geom(op, input.sizes(), p, true);
  const bool bytes = input.dtype() == DType::UInt8 || input.dtype() == DType::Int8;
  if (!bytes) check_floating(op, input, "input");
  check_same_dtype(op, input, out, "out");
  check_shape(op, out, g.out_shape, "out");
  if (indices) {
    KILN_CHECK(indices->dtype() == DType::Int64, op, "expected indices of dtype int64, got ",
               dtype_name(indices->dtype()));
    check_shape(op, *indices, g.out_shape, "indices");
  }
  if (input.device() == Device::CUDA || out.device() == Device::CUDA) {
    return cuda::max_pool2d_out(input, p, out, indices);
  }
  if (bytes) {  // quantized values: the max of the bytes is the max of what they stand for
    auto x = views::contiguous(input);
    OutTarget y(&out), id(indices);
    auto run = [&](auto tag) {
      using T = decltype(tag);
      if (indices)
        max_pool_fwd<T>(g, x->data_ptr<T>(), y.get<T>(), id.get<int64_t>());
      else
        max_pool_fwd_values<T>(g, x->data_ptr<T>(), y.get<T>());
    };
    if (input.dtype() == DType::UInt8)
      run(uint8_t{});
    else
      run(int8_t{});
    y.finish();
    id.finish();
    return;
  }
  const DType cd = compute_dtype(input.dtype());
  auto x = input_as(input, cd);
  OutTarget y(&out, cd), id(indices);
  dispatch_fd(cd, [&](auto tag) {
    using T = decltype(tag);
    if (indices)
      max_pool_fwd<T>(g, x->data_ptr<T>(), y.get<T>(), id.get<int64_t>());
    else
      max_pool_fwd_values<T>(g, x->data_ptr<T>(), y.get<T>());
  });
  y.finish();
  id.finish();
}

void max_pool2d_backward_out(const TensorImpl& grad_output, const TensorImpl& indices,
                             TensorImpl& grad_input) {
  constexpr std::string_view op = "max_pool2d_backward";
  check_grad_pair(op, grad_output, grad_input);
  check_floating(op, grad_input, "grad_input");
  KILN_CHECK(indices.dtype() == DType::Int64, op, "expected indices of dtype int64, got ",
             dtype_name(indices.dtype()));
  check_shape(op, indices, grad_output.sizes(), "indices");
  if (grad_input.device() == Device::CUDA || grad_output.device() == Device::CUDA) {
    return cuda::max_pool2d_backward_out(grad_output, indices, grad_input);
  }
  const int64_t r = grad_input.dim();
  const int64_t HW = grad_input.size(r - 2) * grad_input.size(r - 1);
  const int64_t howo = grad_output.size(r - 2) * grad_output.size(r - 1);
  const int64_t planes = HW == 0 ? 0 : grad_input.numel() / HW;
  const DType cd = compute_dtype(grad_input.dtype());
  auto gy = input_as(grad_output, cd);
  auto ix = views::contiguous(indices);
  OutTarget gx(&grad_input, cd);
  dispatch_fd(cd, [&](auto tag) {
    using T = decltype(tag);
    int64_t bad = 0;
    if (!max_pool_bwd<T>(planes, HW, howo, gy->data_ptr<T>(), ix->data_ptr<int64_t>(), gx.get<T>(),
                         bad))
      fail(op, "expected indices in [0, ", HW, ") (the input plane), got ", bad);
  });
  gx.finish();
}

Dims avg_pool2d_output_shape(std::span<const int64_t> input, const Pool2dParams& p) {
  return pool_geom("avg_pool2d", input, p, false).out_shape;
}

void avg_pool2d_out(const TensorImpl& input, const Pool2dParams& p, TensorImpl& out) {
  constexpr std::string_view op = "avg_pool2d";
  const PoolGeom g = pool_geom(op, input.sizes(), p, false);
  check_floating(op, input, "input");
  check_same_dtype(op, input, out, "out");
  check_shape(op, out, g.out_shape, "out");
  if (input.device() == Device::CUDA || out.device() == Device::CUDA) {
    return cuda::avg_pool2d_out(input, p, out);
  }
  const DType cd = compute_dtype(input.dtype());
  auto x = input_as(input, cd);
  OutTarget y(&out, cd);
  dispatch_fd(cd, [&](auto tag) {
    using T = decltype(tag);
    avg_pool_fwd<T>(g, p, x->data_ptr<T>(), y.get<T>());
  });
  y.finish();
}

void avg_pool2d_backward_out(const TensorImpl& grad_output, const Pool2dParams& p,
                             TensorImpl& grad_input) {
  constexpr std::string_view op = "avg_pool2d_backward";
  check_grad_pair(op, grad_output, grad_input);
  const PoolGeom g = pool_geom(op, grad_input.sizes(), p, false);
  check_floating(op, grad_input, "grad_input");
  check_shape(op, grad_output, g.out_shape, "grad_output");
  if (grad_input.device() == Device::CUDA || grad_output.device() == Device::CUDA) {
    return cuda::avg_pool2d_backward_out(grad_output, p, grad_input);
  }
  const DType cd = compute_dtype(grad_input.dtype());
  auto gy = input_as(grad_output, cd);
  OutTarget gx(&grad_input, cd);
  dispatch_fd(cd, [&](auto tag) {
    using T = decltype(tag);
    avg_pool_bwd<T>(g, p, gy->data_ptr<T>(), gx.get<T>());
  });
  gx.finish();
}

Dims adaptive_avg_pool2d_output_shape(std::span<const int64_t> input, int64_t out_h,
                                      int64_t out_w) {
  constexpr std::string_view op = "adaptive_avg_pool2d";
  check_pool_input(op, input);
  KILN_CHECK(out_h >= 1 && out_w >= 1, op, "expected output size >= 1, got (", out_h, ", ", out_w,
             ")");
  Dims s(input);
  s[s.size() - 2] = out_h;
  s[s.size() - 1] = out_w;
  return s;
}

void adaptive_avg_pool2d_out(const TensorImpl& input, TensorImpl& out) {
  constexpr std::string_view op = "adaptive_avg_pool2d";
  check_pool_input(op, input.sizes());
  check_floating(op, input, "input");
  check_same_dtype(op, input, out, "out");
  const int64_t r = input.dim();
  KILN_CHECK(out.dim() == r, op, "expected out of rank ", r, ", got ", dims_str(out.sizes()));
  const int64_t Ho = out.size(r - 2), Wo = out.size(r - 1);
  check_shape(op, out, adaptive_avg_pool2d_output_shape(input.sizes(), Ho, Wo), "out");
  if (input.device() == Device::CUDA || out.device() == Device::CUDA) {
    return cuda::adaptive_avg_pool2d_out(input, out);
  }
  const int64_t H = input.size(r - 2), W = input.size(r - 1);
  const int64_t planes = input.numel() / (H * W);
  const DType cd = compute_dtype(input.dtype());
  auto x = input_as(input, cd);
  OutTarget y(&out, cd);
  dispatch_fd(cd, [&](auto tag) {
    using T = decltype(tag);
    adaptive_fwd<T>(planes, H, W, Ho, Wo, x->data_ptr<T>(), y.get<T>());
  });
  y.finish();
}

void adaptive_avg_pool2d_backward_out(const TensorImpl& grad_output, TensorImpl& grad_input) {
  constexpr std::string_view op = "adaptive_avg_pool2d_backward";
  check_grad_pair(op, grad_output, grad_input);
  check_floating(op, grad_input, "grad_input");
  const int64_t r = grad_input.dim();
  const int64_t Ho = grad_output.size(r - 2), Wo = grad_output.size(r - 1);
  KILN_CHECK(Ho >= 1 && Wo >= 1, op, "expected a non-empty grad_output, got ",
             dims_str(grad_output.sizes()));
  if (grad_input.device() == Device::CUDA || grad_output.device() == Device::CUDA) {
    return cuda::adaptive_avg_pool2d_backward_out(grad_output, grad_input);
  }
  const int64_t H = grad_input.size(r - 2), W = grad_input.size(r - 1);
  const int64_t planes = grad_input.numel() / (H * W);
  const DType cd = compute_dtype(grad_input.dtype());
  auto gy = input_as(grad_output, cd);
  OutTarget gx(&grad_input, cd);
  dispatch_fd(cd, [&](auto tag) {
    using T = decltype(tag);
    adaptive_bwd<T>(planes, H, W, Ho, Wo, gy->data_ptr<T>(), gx.get<T>());
  });
  gx.finish();
}

}  // namespace kiln::kernels
