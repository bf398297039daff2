// softmax / log_softmax and their backward along one dim. The tensor is seen as
// [outer, D, inner] (contiguous); inner == 1 is the row path (three passes over each row: max,
// exp+sum, scale; vectorized exp), inner > 1 the column path (tiles of columns updated together).
// float64 computes in double, everything else in float (f16/bf16 converted once).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "kiln/runtime/cuda/nn.h"
#include "kiln/runtime/kernels/copy.h"
#include "kiln/runtime/kernels/loop.h"
#include "kiln/runtime/kernels/reduce.h"
#include "kiln/runtime/target.h"
#include "kiln/runtime/thread_pool.h"
#include "kiln/runtime/views.h"
#include "reduce_common.h"

namespace kiln::kernels {

namespace red {
// reduce_softmax_avx512.cpp (x86 builds only).
void softmax_rows_f32_avx512(const float* x, float* y, int64_t row_begin, int64_t row_end,
                             int64_t D, bool log);
}  // namespace red

using namespace red;

namespace {

constexpr int64_t kColTile = 128;

struct Shape3 {
  int64_t outer = 1, d = 1, inner = 1;
};

Shape3 split_at(const TensorImpl& t, int64_t dim) {
  Shape3 s;
  for (int64_t i = 0; i < t.dim(); ++i) {
    if (i < dim) s.outer *= t.sizes()[i];
    if (i == dim) s.d = t.sizes()[i];
    if (i > dim) s.inner *= t.sizes()[i];
  }
  return s;
}

// y[i] = exp(x[i] - m); returns the sum of y.
inline float exp_store_sum(const float* x, float* y, int64_t n, float m) {
  constexpr int64_t L = kLanes<float>;
  const vf vm = vsplat<vf>(m);
  vf a0{}, a1{};
  int64_t i = 0;
  for (; i + 2 * L <= n; i += 2 * L) {
    const vf e0 = vexp(vload<vf>(x + i) - vm);
    const vf e1 = vexp(vload<vf>(x + i + L) - vm);
    if (y) {
      vstore(y + i, e0);
      vstore(y + i + L, e1);
    }
    a0 += e0;
    a1 += e1;
  }
  for (; i + L <= n; i += L) {
    const vf e0 = vexp(vload<vf>(x + i) - vm);
    if (y) vstore(y + i, e0);
    a0 += e0;
  }
  if (i < n) {
    float buf[L];
    for (int64_t k = 0; k < L; ++k) buf[k] = i + k < n ? x[i + k] : -INFINITY;
    const vf e = vexp(vload<vf>(buf) - vm);
    vstore(buf, e);
    if (y)
      for (int64_t k = 0; i + k < n; ++k) y[i + k] = buf[k];
    a0 += e;  // padding contributes exp(-inf) = 0 (NaN only when the row is NaN anyway)
  }
  a0 += a1;
  float s = 0;
  for (int64_t k = 0; k < L; ++k) s += a0[k];
  return s;
}
inline double exp_store_sum(const double* x, double* y, int64_t n, double m) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double e = std::exp(x[i] - m);
    if (y) y[i] = e;
    s += e;
  }
  return s;
}
// y[i] = exp(x[i]) in place over n elements.
inline void exp_inplace(float* p, int64_t n) {
  constexpr int64_t L = kLanes<float>;
  int64_t i = 0;
  for (; i + L <= n; i += L) vstore(p + i, vexp(vload<vf>(p + i)));
  for (; i < n; ++i) p[i] = std::exp(p[i]);
}
inline void exp_inplace(double* p, int64_t n) {
  for (int64_t i = 0; i < n; ++i) p[i] = std::exp(p[i]);
}

template <typename C>
C row_max(const C* x, int64_t n) {
  if constexpr (std::is_same_v<C, float> || std::is_same_v<C, double>) {
    return vec_extreme<true>(-std::numeric_limits<C>::infinity(), x, n, Ident{});
  }
}

template <typename C>
C row_sum(const C* x, int64_t n) {
  return pairwise_sum(x, n, Ident{});
}

// The active target description's ISA (checked against the CPU when it was set);
// KILN_DISABLE_AVX512=1 (read per call, so tests can cover both paths) opts out.
[[maybe_unused]] bool use_avx512() {
#if defined(__x86_64__)
  const bool ok = rt::active_target().isa == rt::VectorIsa::Avx512;
  const char* off = std::getenv("KILN_DISABLE_AVX512");
  return ok && !(off && *off && *off != '0');
#else
  return false;
#endif
}

// Rows [b, e) of a contiguous [rows, D] tensor, on this thread; avx512: use_avx512(), asked
// once per kernel call by the caller (it reads the environment).
template <typename C>
void softmax_row_range(const C* x, C* y, int64_t b, int64_t e, int64_t D, bool log, bool avx512) {
#if defined(__x86_64__)
  if constexpr (std::is_same_v<C, float>) {
    if (avx512) {
      softmax_rows_f32_avx512(x, y, b, e, D, log);
      return;
    }
  }
#endif
  for (int64_t r = b; r < e; ++r) {
    const C* xr = x + r * D;
    C* yr = y + r * D;
    const C m = row_max(xr, D);
    if (log) {
      const C c = m + std::log(exp_store_sum(xr, nullptr, D, m));
      for (int64_t i = 0; i < D; ++i) yr[i] = xr[i] - c;
    } else {
      const C inv = C(1) / exp_store_sum(xr, yr, D, m);
      for (int64_t i = 0; i < D; ++i) yr[i] *= inv;
    }
  }
}

template <typename C>
void softmax_rows(const C* x, C* y, const Shape3& s, bool log) {
  const int64_t D = s.d;
  parallel_for(0, s.outer, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(D, 1)),
               [&, avx512 = use_avx512()](int64_t b, int64_t e) {
                 softmax_row_range(x, y, b, e, D, log, avx512);
               });
}

// Column path: for each outer index and tile of columns, the D rows of the tile.
template <typename C, typename Fn>
void for_col_tiles(const Shape3& s, Fn&& fn) {
  const int64_t ntiles = (s.inner + kColTile - 1) / kColTile;
  const int64_t per = s.d * std::min(kColTile, s.inner);
  parallel_for(0, s.outer * ntiles,
               std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(per, 1)),
               [&](int64_t b, int64_t e) {
                 for (int64_t t = b; t < e; ++t) {
                   const int64_t o = t / ntiles, j0 = (t % ntiles) * kColTile;
                   fn(o * s.d * s.inner + j0, std::min(kColTile, s.inner - j0));
                 }
               });
}

template <typename C>
void softmax_cols(const C* x, C* y, const Shape3& s, bool log) {
  const int64_t I = s.inner, D = s.d;
  for_col_tiles<C>(s, [&](int64_t base, int64_t tw) {
    C m[kColTile], sum[kColTile];
    for (int64_t j = 0; j < tw; ++j) m[j] = -std::numeric_limits<C>::infinity();
    for (int64_t k = 0; k < D; ++k) {
      const C* xr = x + base + k * I;
      for (int64_t j = 0; j < tw; ++j) m[j] = sticky_pick_scalar<true>(m[j], xr[j]);
    }
    for (int64_t j = 0; j < tw; ++j) sum[j] = 0;
    C tmp[kColTile];
    for (int64_t k = 0; k < D; ++k) {
      const C* xr = x + base + k * I;
      C* yr = y + base + k * I;
      C* dst = log ? tmp : yr;
      for (int64_t j = 0; j < tw; ++j) dst[j] = xr[j] - m[j];
      exp_inplace(dst, tw);
      for (int64_t j = 0; j < tw; ++j) sum[j] += dst[j];
    }
    if (log) {
      for (int64_t j = 0; j < tw; ++j) m[j] += std::log(sum[j]);
      for (int64_t k = 0; k < D; ++k) {
        const C* xr = x + base + k * I;
        C* yr = y + base + k * I;
        for (int64_t j = 0; j < tw; ++j) yr[j] = xr[j] - m[j];
      }
    } else {
      for (int64_t j = 0; j < tw; ++j) sum[j] = C(1) / sum[j];
      for (int64_t k = 0; k < D; ++k) {
        C* yr = y + base + k * I;
        for (int64_t j = 0; j < tw; ++j) yr[j] *= sum[j];
      }
    }
  });
}

// Backward. softmax: gi = y * (g - sum(g * y)); log_softmax: gi = g - exp(y) * sum(g).
template <typename C>
void backward_rows(const C* g, const C* y, C* gi, const Shape3& s, bool log) {
  const int64_t D = s.d;
  parallel_for(0, s.outer, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(D, 1)),
               [&](int64_t b, int64_t e) {
                 for (int64_t r = b; r < e; ++r) {
                   const C* gr = g + r * D;
                   const C* yr = y + r * D;
                   C* out = gi + r * D;
                   if (log) {
                     const C sg = row_sum(gr, D);
                     // Elementwise from here: out may alias g or y.
                     for (int64_t i0 = 0; i0 < D; i0 += kColTile) {
                       const int64_t n = std::min(kColTile, D - i0);
                       C ey[kColTile];
                       for (int64_t i = 0; i < n; ++i) ey[i] = yr[i0 + i];
                       exp_inplace(ey, n);
                       for (int64_t i = 0; i < n; ++i) out[i0 + i] = gr[i0 + i] - ey[i] * sg;
                     }
                   } else {
                     constexpr int64_t L = 8;
                     C acc[L] = {};
                     int64_t i = 0;
                     for (; i + L <= D; i += L)
                       for (int64_t k = 0; k < L; ++k) acc[k] += gr[i + k] * yr[i + k];
                     C dot = 0;
                     for (; i < D; ++i) dot += gr[i] * yr[i];
                     for (int64_t k = 0; k < L; ++k) dot += acc[k];
                     for (int64_t j = 0; j < D; ++j) out[j] = yr[j] * (gr[j] - dot);
                   }
                 }
               });
}

template <typename C>
void backward_cols(const C* g, const C* y, C* gi, const Shape3& s, bool log) {
  const int64_t I = s.inner, D = s.d;
  for_col_tiles<C>(s, [&](int64_t base, int64_t tw) {
    C acc[kColTile];
    for (int64_t j = 0; j < tw; ++j) acc[j] = 0;
    for (int64_t k = 0; k < D; ++k) {
      const C* gr = g + base + k * I;
      const C* yr = y + base + k * I;
      if (log) {
        for (int64_t j = 0; j < tw; ++j) acc[j] += gr[j];
      } else {
        for (int64_t j = 0; j < tw; ++j) acc[j] += gr[j] * yr[j];
      }
    }
    C ey[kColTile];
    for (int64_t k = 0; k < D; ++k) {
      const C* gr = g + base + k * I;
      const C* yr = y + base + k * I;
      C* out = gi + base + k * I;
      if (log) {
        for (int64_t j = 0; j < tw; ++j) ey[j] = yr[j];
        exp_inplace(ey, tw);
        for (int64_t j = 0; j < tw; ++j) out[j] = gr[j] - ey[j] * acc[j];
      } else {
        for (int64_t j = 0; j < tw; ++j) out[j] = yr[j] * (gr[j] - acc[j]);
      }
    }
  });
}

// A contiguous tensor of dtype `dt` holding t's values (t itself when it already is one).
TensorImplPtr as_contiguous(const TensorImpl& t, DType dt) {
  if (t.dtype() == dt) return views::contiguous(t);
  auto c = empty(t.sizes(), dt);
  copy_(*c, t);
  return c;
}

DType compute_dtype(DType dt) {
  return dt == DType::Float64 ? DType::Float64 : DType::Float32;
}

void check_same(const TensorImpl& a, const TensorImpl& b, std::string_view op, const char* what) {
  KILN_CHECK(a.sizes() == b.sizes(), op, "expected ", what, " of shape ", a.sizes(), ", got ",
             b.sizes());
  KILN_CHECK(a.dtype() == b.dtype(), op, "expected ", what, " of dtype ", dtype_name(a.dtype()),
             ", got ", dtype_name(b.dtype()));
}

void softmax_impl(const TensorImpl& self, int64_t dim, TensorImpl& out, bool log,
                  std::string_view op) {
  KILN_CHECK(is_floating(self.dtype()), op, "expected a floating point input, got ",
             dtype_name(self.dtype()));
  check_same(self, out, op, "out");
  const int64_t d = wrap_dim(dim, self.dim(), op);
  if (self.device() == Device::CUDA || out.device() == Device::CUDA) {
    return cuda::softmax_out(self, d, log, out);
  }
  if (self.numel() == 0) return;
  const DType cd = compute_dtype(self.dtype());
  auto x = as_contiguous(self, cd);
  const bool direct = out.is_contiguous() && out.dtype() == cd;
  TensorImplPtr y = direct ? TensorImplPtr(&out) : empty(self.sizes(), cd);
  const Shape3 s = split_at(self, d);
  if (cd == DType::Float64) {
    if (s.inner == 1) {
      softmax_rows(x->data_ptr<double>(), y->data_ptr<double>(), s, log);
    } else {
      softmax_cols(x->data_ptr<double>(), y->data_ptr<double>(), s, log);
    }
  } else {
    if (s.inner == 1) {
      softmax_rows(x->data_ptr<float>(), y->data_ptr<float>(), s, log);
    } else {
      softmax_cols(x->data_ptr<float>(), y->data_ptr<float>(), s, log);
    }
  }
  if (!direct) copy_(out, *y);
}

void backward_impl(const TensorImpl& grad, const TensorImpl& output, int64_t dim,
                   TensorImpl& grad_input, bool log, std::string_view op) {
  KILN_CHECK(is_floating(output.dtype()), op, "expected a floating point output, got ",
             dtype_name(output.dtype()));
  check_same(output, grad, op, "grad_output");
  check_same(output, grad_input, op, "grad_input");
  const int64_t d = wrap_dim(dim, output.dim(), op);
  if (output.device() == Device::CUDA || grad.device() == Device::CUDA ||
      grad_input.device() == Device::CUDA) {
    return cuda::softmax_backward_out(grad, output, d, log, grad_input);
  }
  if (output.numel() == 0) return;
  const DType cd = compute_dtype(output.dtype());
  auto g = as_contiguous(grad, cd);
  auto y = as_contiguous(output, cd);
  const bool direct = grad_input.is_contiguous() && grad_input.dtype() == cd;
  TensorImplPtr gi = direct ? TensorImplPtr(&grad_input) : empty(output.sizes(), cd);
  const Shape3 s = split_at(output, d);
  auto run = [&](auto tag) {
    using C = decltype(tag);
    if (s.inner == 1) {
      backward_rows(g->data_ptr<C>(), y->data_ptr<C>(), gi->data_ptr<C>(), s, log);
    } else {
      backward_cols(g->data_ptr<C>(), y->data_ptr<C>(), gi->data_ptr<C>(), s, log);
    }
  };
  if (cd == DType::Float64) {
    run(double{});
  } else {
    run(float{});
  }
  if (!direct) copy_(grad_input, *gi);
}

}  // namespace

void softmax_out(const TensorImpl& self, int64_t dim, TensorImpl& out) {
  softmax_impl(self, dim, out, false, "softmax");
}
void softmax_rows_f32_inplace(float* x, int64_t rows, int64_t D) {
  softmax_row_range(x, x, 0, rows, D, false, use_avx512());
}
void log_softmax_out(const TensorImpl& self, int64_t dim, TensorImpl& out) {
  softmax_impl(self, dim, out, true, "log_softmax");
}
void softmax_backward_out(const TensorImpl& grad_output, const TensorImpl& output, int64_t dim,
                          TensorImpl& grad_input) {
  backward_impl(grad_output, output, dim, grad_input, false, "softmax_backward");
}
void log_softmax_backward_out(const TensorImpl& grad_output, const TensorImpl& output, int64_t dim,
                              TensorImpl& grad_input) {
  backward_impl(grad_output, output, dim, grad_input, true, "log_softmax_backward");
}

}  // namespace kiln::kernels
