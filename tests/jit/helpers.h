#pragma once
// Shared helpers of the JIT tests: seeded random tensors and error measures in float64.
#include <random>

#include "kiln/kiln.h"

namespace kiln::test {

inline Tensor rnd(Dims sizes, uint32_t seed, double scale = 1.0) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, static_cast<float>(scale));
  Tensor t = kiln::empty(sizes);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_ptr<float>()[i] = dist(gen);
  return t;
}

inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  return amax(abs(a.to(DType::Float64) - b.to(DType::Float64))).item<double>();
}

// max |a - b| / max(max |b|, tiny): the relative error the tolerances are stated in.
inline double max_rel_error(const Tensor& a, const Tensor& b) {
  const double scale = amax(abs(b.to(DType::Float64))).item<double>();
  return max_abs_diff(a, b) / std::max(scale, 1e-30);
}

}  // namespace kiln::test
