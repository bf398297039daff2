#pragma once
// Helpers shared by test_reduce/test_indexing/test_random: element access by logical (row-major)
// index through sizes/strides, random tensors, non-contiguous layouts. Independent of the kernels.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kiln/runtime/tensor.h"
#include "kiln/runtime/views.h"

namespace kiln::testutil {

// Storage offset (elements) of the element at row-major linear index `linear`.
inline int64_t offset_of(const TensorImpl& t, int64_t linear) {
  int64_t off = 0;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    const int64_t s = t.sizes()[d];
    off += (linear % s) * t.strides()[d];
    linear /= s;
  }
  return off;
}

inline double get(const TensorImpl& t, int64_t linear) {
  const int64_t off = offset_of(t, linear);
  return visit_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T v = t.data_ptr<T>()[off];
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      return static_cast<double>(static_cast<float>(v));
    } else {
      return static_cast<double>(v);
    }
  });
}

inline void set(const TensorImpl& t, int64_t linear, double v) {
  const int64_t off = offset_of(t, linear);
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      t.data_ptr<T>()[off] = T(static_cast<float>(v));
    } else if constexpr (std::is_same_v<T, bool>) {
      t.data_ptr<T>()[off] = v != 0;
    } else {
      t.data_ptr<T>()[off] = static_cast<T>(v);
    }
  });
}

inline std::vector<double> values(const TensorImpl& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = get(t, i);
  return v;
}

// Fills every element: floats uniform in [lo, hi], integers uniform in [lo, hi], bool 0/1.
inline void fill_random(const TensorImpl& t, std::mt19937& rng, double lo = -2, double hi = 2) {
  const bool fp = is_floating(t.dtype());
  if (t.dtype() == DType::UInt8) lo = std::max(lo, 0.0);
  std::uniform_real_distribution<double> u(lo, hi);
  std::uniform_int_distribution<int64_t> ui(static_cast<int64_t>(lo), static_cast<int64_t>(hi));
  std::uniform_int_distribution<int> ub(0, 1);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (t.dtype() == DType::Bool) {
      set(t, i, ub(rng));
    } else {
      set(t, i, fp ? u(rng) : static_cast<double>(ui(rng)));
    }
  }
}

enum class Layout { Contiguous, Transposed, Strided };

// A tensor with logical `sizes` in the given memory layout: Transposed = dims stored in reverse
// order (a permuted view), Strided = every other element of a larger buffer along each dim.
inline TensorImplPtr make_tensor(const Dims& sizes, DType dt, Layout layout, std::mt19937& rng,
                                 double lo = -2, double hi = 2) {
  const int64_t r = static_cast<int64_t>(sizes.size());
  TensorImplPtr t;
  if (layout == Layout::Contiguous || r == 0) {
    t = empty(sizes, dt);
  } else if (layout == Layout::Transposed) {
    Dims rev(sizes.size());
    Dims perm(sizes.size());
    for (int64_t i = 0; i < r; ++i) {
      rev[i] = sizes[r - 1 - i];
      perm[i] = r - 1 - i;
    }
    auto base = empty(rev, dt);
    t = views::permute(*base, perm);
  } else {
    Dims big(sizes.size());
    for (int64_t i = 0; i < r; ++i) big[i] = sizes[i] * 2;
    auto base = empty(big, dt);
    t = base;
    for (int64_t i = 0; i < r; ++i) t = views::slice(*t, i, 0, big[i], 2);
  }
  fill_random(*t, rng, lo, hi);
  return t;
}

inline bool close(double got, double want, double atol, double rtol) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::fabs(got - want) <= atol + rtol * std::fabs(want);
}

}  // namespace kiln::testutil
