#pragma once
// Per-tensor quantization parameters and random bytes for the int8 kernel tests
// (test_qadd.cpp, test_qpool.cpp).

#include <random>
#include <vector>

#include "nn_test_util.h"

namespace quant_test {

// One side's parameters as numbers and as the 0-dim tensors the kernels take.
struct Side {
  float scale;
  int64_t zero_point;
  kiln::TensorImplPtr s, z;
};
inline Side side(float scale, int64_t zero_point) {
  using kiln::DType;
  return {scale, zero_point, nn_test::from_vec({scale}, kiln::Dims{}, DType::Float32),
          nn_test::from_vec({double(zero_point)}, kiln::Dims{}, DType::Int32)};
}

// The range of an 8-bit dtype.
inline int64_t lo_of(kiln::DType d) {
  return d == kiln::DType::Int8 ? -128 : 0;
}
inline int64_t hi_of(kiln::DType d) {
  return d == kiln::DType::Int8 ? 127 : 255;
}

// n values spread over d's whole range.
inline std::vector<double> rand_bytes(int64_t n, kiln::DType d) {
  std::uniform_int_distribution<int> u(int(lo_of(d)), int(hi_of(d)));
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) x = u(nn_test::rng());
  return v;
}

}  // namespace quant_test
