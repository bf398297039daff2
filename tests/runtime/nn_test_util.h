#pragma once
// Helpers shared by the NN kernel tests (test_conv, test_pool_norm, test_loss): random tensors,
// float64 read-back in logical order, non-contiguous copies and tolerance checks.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kiln/runtime/error.h"
#include "kiln/runtime/kernels/copy.h"
#include "kiln/runtime/tensor.h"
#include "kiln/runtime/views.h"

namespace nn_test {

using kiln::Dims;
using kiln::DType;
using kiln::TensorImpl;
using kiln::TensorImplPtr;

// The message of the kiln::Error fn throws ("" when it throws none).
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const kiln::Error& e) {
    return e.what();
  }
  return "";
}

// Round half to even in double, independently of the kernels' nearbyint (the quantization
// tests' references).
inline double round_half_even(double v) {
  const double f = std::floor(v), diff = v - f;
  if (diff < 0.5) return f;
  if (diff > 0.5) return f + 1;
  return std::fmod(f, 2.0) == 0.0 ? f : f + 1;
}

inline std::mt19937& rng() {
  static std::mt19937 g(1234);
  return g;
}

// Values in logical (row-major) order as doubles.
inline std::vector<double> to_vec(const TensorImpl& t) {
  auto d = kiln::empty(t.sizes(), DType::Float64);
  kiln::kernels::copy_(*d, t);
  const double* p = d->data_ptr<double>();
  return std::vector<double>(p, p + d->numel());
}

inline TensorImplPtr from_vec(const std::vector<double>& v, Dims sizes, DType dt) {
  auto d = kiln::empty(sizes, DType::Float64);
  std::copy(v.begin(), v.end(), d->data_ptr<double>());
  auto t = kiln::empty(sizes, dt);
  kiln::kernels::copy_(*t, *d);
  return t;
}

inline std::vector<double> rand_vec(int64_t n, double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) x = u(rng());
  return v;
}

inline TensorImplPtr rand_tensor(Dims sizes, DType dt = DType::Float32, double lo = -1.0,
                                 double hi = 1.0) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return from_vec(rand_vec(n, lo, hi), sizes, dt);
}

// Same values, non-contiguous layout: a step-2 slice of a tensor twice as wide in the last dim
// (or a transposed copy when `transposed`, for rank >= 2: stored with the last two dims swapped).
inline TensorImplPtr noncontig(const TensorImpl& t, bool transposed = false) {
  const int64_t r = t.dim();
  if (r == 0) return kiln::views::contiguous(t);
  if (transposed && r >= 2) {
    Dims sw = t.sizes();
    std::swap(sw[r - 1], sw[r - 2]);
    auto base = kiln::empty(sw, t.dtype());
    auto v = kiln::views::transpose(*base, r - 1, r - 2);
    kiln::kernels::copy_(*v, t);
    return v;
  }
  Dims wide = t.sizes();
  wide[r - 1] = wide[r - 1] * 2;
  auto base = kiln::zeros(wide, t.dtype());
  auto v = kiln::views::slice(*base, r - 1, 0, wide[r - 1], 2);
  kiln::kernels::copy_(*v, t);
  return v;
}

// |got - want| <= atol + rtol*|want| elementwise, reporting the first failures.
inline void expect_close(const std::vector<double>& got, const std::vector<double>& want,
                         double rtol, double atol, const std::string& what = "") {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = atol + rtol * std::abs(want[i]);
    const bool ok =
        std::abs(got[i] - want[i]) <= tol || (std::isnan(got[i]) && std::isnan(want[i]));
    if (!ok && bad++ < 5) {
      ADD_FAILURE() << what << " at " << i << ": got " << got[i] << ", want " << want[i];
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " elements differ";
}

// The spacing of dtype dt's representable values at |v| (one unit in the last place).
inline double ulp_of(DType dt, double v) {
  const int mantissa = dt == DType::Float16    ? 10
                       : dt == DType::BFloat16 ? 7
                       : dt == DType::Float32  ? 23
                                               : 52;
  const int min_exp = dt == DType::Float16 ? -14 : dt == DType::Float64 ? -1022 : -126;
  const int e = v == 0.0 ? min_exp : std::max(std::ilogb(std::abs(v)), min_exp);
  return std::ldexp(1.0, e - mantissa);
}

// |got - want| <= ulps * ulp(want) + atol: for results rounded once to a narrow dtype from a
// reference computed on the same (already rounded) inputs.
inline void expect_within_ulps(const std::vector<double>& got, const std::vector<double>& want,
                               DType dt, double ulps, double atol, const std::string& what = "") {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = ulps * ulp_of(dt, want[i]) + atol;
    if (!(std::abs(got[i] - want[i]) <= tol) && bad++ < 5) {
      ADD_FAILURE() << what << " at " << i << ": got " << got[i] << ", want " << want[i] << " ("
                    << std::abs(got[i] - want[i]) / ulp_of(dt, want[i]) << " ulps)";
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " elements differ";
}

// Runs fn, expects a kiln::Error whose message contains every fragment.
template <typename Fn>
void expect_error(Fn&& fn, std::initializer_list<std::string> fragments) {
  try {
    fn();
    ADD_FAILURE() << "expected kiln::Error";
  } catch (const kiln::Error& e) {
    const std::string msg = e.what();
    for (const auto& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << msg;
  }
}

inline int64_t numel(const Dims& d) {
  int64_t n = 1;
  for (int64_t s : d) n *= s;
  return n;
}

// Central-difference gradient of L(v) = Σ_i f(v)_i · r_i with respect to v (float64).
inline std::vector<double> numeric_grad(
    std::vector<double> v, const std::function<std::vector<double>(const std::vector<double>&)>& f,
    const std::vector<double>& r, double h = 1e-6) {
  std::vector<double> g(v.size());
  auto L = [&](const std::vector<double>& vv) {
    const auto y = f(vv);
    double l = 0;
    for (size_t i = 0; i < y.size(); ++i) l += y[i] * r[i];
    return l;
  };
  for (size_t i = 0; i < v.size(); ++i) {
    const double s = v[i];
    v[i] = s + h;
    const double lp = L(v);
    v[i] = s - h;
    const double lm = L(v);
    v[i] = s;
    g[i] = (lp - lm) / (2 * h);
  }
  return g;
}

}  // namespace nn_test
