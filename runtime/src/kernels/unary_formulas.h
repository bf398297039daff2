// The scalar formula of each op of the schema's unary family (ir/ops.toml), one function named
// like the op, for float and double: what kernels::unary_out runs for float64, and for float32
// where elementwise_vecmath.inc has no vector kernel (the vector kernels are checked against
// these in tests/runtime/test_elementwise.cpp). A new unary op adds its schema entry and its
// function here; the generated run_floating case (elementwise_unary.cpp) calls it.
// Integer inputs: ops with `integers = "keep"` have their integer cases in run_integral.
#pragma once

#include <cmath>

namespace kiln::kernels::scalar {

template <typename T>
T neg(T x) {
  return -x;
}
template <typename T>
T abs(T x) {
  return std::fabs(x);
}
template <typename T>
T sign(T x) {
  return x != x ? x : static_cast<T>((x > 0) - (x < 0));  // NaN stays NaN
}
template <typename T>
T relu(T x) {
  return x < 0 ? T(0) : x;
}
template <typename T>
T floor(T x) {
  return std::floor(x);
}
template <typename T>
T ceil(T x) {
  return std::ceil(x);
}
template <typename T>
T round(T x) {
  return std::nearbyint(x);  // half to even in the default rounding mode
}
template <typename T>
T exp(T x) {
  return std::exp(x);
}
template <typename T>
T log(T x) {
  return std::log(x);
}
template <typename T>
T log1p(T x) {
  return std::log1p(x);
}
template <typename T>
T expm1(T x) {
  return std::expm1(x);
}
template <typename T>
T sqrt(T x) {
  return std::sqrt(x);
}
template <typename T>
T rsqrt(T x) {
  return T(1) / std::sqrt(x);
}
template <typename T>
T sin(T x) {
  return std::sin(x);
}
template <typename T>
T cos(T x) {
  return std::cos(x);
}
template <typename T>
T tanh(T x) {
  return std::tanh(x);
}
template <typename T>
T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}
template <typename T>
T silu(T x) {
  return x / (T(1) + std::exp(-x));
}
template <typename T>
T erf(T x) {
  return std::erf(x);
}
template <typename T>
T reciprocal(T x) {
  return T(1) / x;
}

}  // namespace kiln::kernels::scalar
