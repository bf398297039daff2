#pragma once
// Private helpers shared by the NN kernels (pool, norm, loss, embedding): argument checks with
// PyTorch-style messages, contiguous output targets, parameter read-back, and vectorized row sums.

#include "simd_compat.h"

#include <cmath>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/runtime/kernels/copy.h"
#include "kiln/runtime/tensor.h"
#include "kiln/runtime/views.h"

namespace kiln::kernels::nn_detail {

inline std::string dims_str(std::span<const int64_t> d) {
  std::ostringstream os;
  os << Dims(d);
  return os.str();
}

inline bool is_lowp(DType d) {
  return d == DType::Float16 || d == DType::BFloat16;
}

inline void check_floating(std::string_view op, const TensorImpl& t, std::string_view what) {
  const DType d = t.dtype();
  KILN_CHECK(d == DType::Float32 || d == DType::Float64 || is_lowp(d), op,
             "expected a floating dtype (float32, float64, float16, bfloat16) for ", what, ", got ",
             dtype_name(d));
}

inline void check_same_dtype(std::string_view op, const TensorImpl& ref, const TensorImpl& t,
                             std::string_view what) {
  KILN_CHECK(t.dtype() == ref.dtype(), op, "expected ", what, " of dtype ", dtype_name(ref.dtype()),
             " (as input), got ", dtype_name(t.dtype()));
}

inline void check_shape(std::string_view op, const TensorImpl& t, std::span<const int64_t> want,
                        std::string_view what) {
  KILN_CHECK(Dims(t.sizes()) == Dims(want), op, "expected ", what, " of shape ", dims_str(want),
             ", got ", dims_str(t.sizes()));
}

inline void check_numel(std::string_view op, const TensorImpl& t, int64_t want,
                        std::string_view what) {
  KILN_CHECK(t.numel() == want, op, "expected ", what, " with ", want, " elements, got ",
             dims_str(t.sizes()));
}

inline TensorImplPtr to_dtype(const TensorImpl* t, DType d) {
  if (!t) return {};
  auto r = empty(t->sizes(), d);
  copy_(*r, *t);
  return r;
}
inline TensorImplPtr to_f32(const TensorImpl* t) {
  return to_dtype(t, DType::Float32);
}

inline TensorImplPtr contig_or_null(const TensorImpl* t) {
  return t ? views::contiguous(*t) : TensorImplPtr{};
}

// A contiguous destination of dtype `dt` for a kernel: `dst` itself when it already is one, else
// a temp copied (and converted) back by finish().
struct OutTarget {
  TensorImpl* dst = nullptr;
  TensorImplPtr tmp;
  void* ptr = nullptr;
  OutTarget() = default;
  explicit OutTarget(TensorImpl* d) : OutTarget(d, d ? d->dtype() : DType::Float32) {}
  OutTarget(TensorImpl* d, DType dt) : dst(d) {
    if (!d) return;
    if (d->is_contiguous() && d->dtype() == dt) {
      ptr = d->data();
    } else {
      tmp = empty(d->sizes(), dt);
      ptr = tmp->data();
    }
  }
  explicit operator bool() const { return dst != nullptr; }
  template <typename T>
  T* get() const {
    return static_cast<T*>(ptr);
  }
  void finish() {
    if (tmp) copy_(*dst, *tmp);
  }
};

// A small parameter tensor ([C] weight, running stats, class weights) as doubles; empty if null.
inline std::vector<double> read_param(const TensorImpl* t) {
  if (!t) return {};
  auto d = empty(t->sizes(), DType::Float64);
  copy_(*d, *t);
  const double* p = d->data_ptr<double>();
  return std::vector<double>(p, p + d->numel());
}

// Writes doubles back into a parameter tensor of any floating dtype and strides.
inline void write_param(TensorImpl& t, const std::vector<double>& v) {
  auto d = from_blob(const_cast<double*>(v.data()), t.sizes(), DType::Float64);
  copy_(t, *d);
}

// Every element of t = v, without a buffer the size of t (statistics of an empty input may have
// any length an artifact declares).
inline void fill_param(TensorImpl& t, double v) {
  const Dims broadcast(static_cast<size_t>(t.dim()), 0);
  copy_(t, *from_blob(&v, t.sizes(), DType::Float64, broadcast));
}

// The compute dtype of a floating tensor: f64 stays f64, everything else computes in f32.
inline DType compute_dtype(DType d) {
  return d == DType::Float64 ? DType::Float64 : DType::Float32;
}

// t as a contiguous tensor of dtype d (itself when it already is one).
inline TensorImplPtr input_as(const TensorImpl& t, DType d) {
  return t.dtype() == d ? views::contiguous(t) : to_dtype(&t, d);
}

// Calls fn(float{}) or fn(double{}) (the compute type for a f32/f64 tensor).
template <typename Fn>
void dispatch_fd(DType d, Fn&& fn) {
  if (d == DType::Float64) {
    fn(double{});
  } else {
    fn(float{});
  }
}

// ---- Vectorized reductions over one contiguous run (float via AVX2, double scalar x4) ----------

// Σ x[i]
inline double row_sum(const float* x, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  double total = 0.0;
  int64_t i = 0;
  while (i + 8 <= n) {
    // Flush to double every 2048 elements to bound float rounding.
    const int64_t stop = std::min(n, i + 2048);
    for (; i + 32 <= stop; i += 32) {
      a0 = _mm256_add_ps(a0, _mm256_loadu_ps(x + i));
      a1 = _mm256_add_ps(a1, _mm256_loadu_ps(x + i + 8));
      a2 = _mm256_add_ps(a2, _mm256_loadu_ps(x + i + 16));
      a3 = _mm256_add_ps(a3, _mm256_loadu_ps(x + i + 24));
    }
    // Whole vectors of the rest too: short rows (a global pool's 7x7 = 49) were mostly scalar.
    for (; i + 8 <= stop; i += 8) a1 = _mm256_add_ps(a1, _mm256_loadu_ps(x + i));
    alignas(32) float t[8];
    _mm256_store_ps(t, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    // A tree, not a chain of 8 dependent adds.
    total += (double(t[0]) + t[1] + (double(t[2]) + t[3])) +
             (double(t[4]) + t[5] + (double(t[6]) + t[7]));
    a0 = a1 = a2 = a3 = _mm256_setzero_ps();
  }
  for (; i < n; ++i) total += x[i];
  return total;
}
inline double row_sum(const double* x, int64_t n) {
  double a[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int k = 0; k < 4; ++k) a[k] += x[i + k];
  for (; i < n; ++i) a[0] += x[i];
  return (a[0] + a[1]) + (a[2] + a[3]);
}

// Σ (x[i] - m)^2
inline double row_sumsq_dev(const float* x, int64_t n, double mean) {
  const __m256 m = _mm256_set1_ps(static_cast<float>(mean));
  __m256 a0 = _mm256_setzero_ps(), a1 = a0;
  double total = 0.0;
  int64_t i = 0;
  while (i + 16 <= n) {
    const int64_t stop = std::min(n - 15, i + 2048);
    for (; i < stop; i += 16) {
      const __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(x + i), m);
      const __m256 d1 = _mm256_sub_ps(_mm256_loadu_ps(x + i + 8), m);
      a0 = _mm256_fmadd_ps(d0, d0, a0);
      a1 = _mm256_fmadd_ps(d1, d1, a1);
    }
    alignas(32) float t[8];
    _mm256_store_ps(t, _mm256_add_ps(a0, a1));
    for (float v : t) total += v;
    a0 = a1 = _mm256_setzero_ps();
  }
  const float mf = static_cast<float>(mean);
  for (; i < n; ++i) total += static_cast<double>((x[i] - mf) * (x[i] - mf));
  return total;
}
inline double row_sumsq_dev(const double* x, int64_t n, double mean) {
  double a[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int k = 0; k < 4; ++k) a[k] += (x[i + k] - mean) * (x[i + k] - mean);
  for (; i < n; ++i) a[0] += (x[i] - mean) * (x[i] - mean);
  return (a[0] + a[1]) + (a[2] + a[3]);
}

// Σ g[i] and Σ g[i]*(x[i] - shift) in one pass (added to sg / sgx).
inline void row_sum_dot(const float* g, const float* x, int64_t n, double shift, double& sg,
                        double& sgx) {
  const __m256 m = _mm256_set1_ps(static_cast<float>(shift));
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, d0 = s0, d1 = s0;
  double tg = 0.0, tgx = 0.0;
  int64_t i = 0;
  while (i + 16 <= n) {
    const int64_t stop = std::min(n - 15, i + 2048);
    for (; i < stop; i += 16) {
      const __m256 g0 = _mm256_loadu_ps(g + i), g1 = _mm256_loadu_ps(g + i + 8);
      s0 = _mm256_add_ps(s0, g0);
      s1 = _mm256_add_ps(s1, g1);
      d0 = _mm256_fmadd_ps(g0, _mm256_sub_ps(_mm256_loadu_ps(x + i), m), d0);
      d1 = _mm256_fmadd_ps(g1, _mm256_sub_ps(_mm256_loadu_ps(x + i + 8), m), d1);
    }
    alignas(32) float t[8], u[8];
    _mm256_store_ps(t, _mm256_add_ps(s0, s1));
    _mm256_store_ps(u, _mm256_add_ps(d0, d1));
    for (int k = 0; k < 8; ++k) tg += t[k], tgx += u[k];
    s0 = s1 = d0 = d1 = _mm256_setzero_ps();
  }
  const float mf = static_cast<float>(shift);
  for (; i < n; ++i) tg += g[i], tgx += static_cast<double>(g[i] * (x[i] - mf));
  sg += tg;
  sgx += tgx;
}
inline void row_sum_dot(const double* g, const double* x, int64_t n, double shift, double& sg,
                        double& sgx) {
  double a[4] = {0, 0, 0, 0}, b[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int k = 0; k < 4; ++k) a[k] += g[i + k], b[k] += g[i + k] * (x[i + k] - shift);
  for (; i < n; ++i) a[0] += g[i], b[0] += g[i] * (x[i] - shift);
  sg += (a[0] + a[1]) + (a[2] + a[3]);
  sgx += (b[0] + b[1]) + (b[2] + b[3]);
}

// y[i] = x[i]*a + b (the normalization's affine form), vectorized by the compiler.
template <typename T>
inline void row_affine(const T* x, T* y, int64_t n, T a, T b) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * a + b;
}

}  // namespace kiln::kernels::nn_detail
