// The scalar formula of each op of the schema's unary family (ir/ops.toml), one function named
// like the op, for float and double: what kernels::unary_out runs for float64, and for float32
// where elementwise_vecmath.inc has no vector kernel (the vector kernels are checked against
// these in tests/runtime/test_elementwise.cpp). A new unary op adds its schema entry and its
// function here; the generated run_floating case (elementwise_unary.cpp) calls it.
// Integer inputs: ops with `integers = "keep"` have their integer cases in run_integral.
// The CUDA backend compiles this same text with NVRTC (-DKILN_NVRTC, which maps the std:: calls
// onto CUDA's float functions), so each formula has one implementation for CPU and GPU.
#pragma once

#ifndef KILN_NVRTC
#include <cmath>
#endif

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
// The attribute variants (UnaryOp::Gelu, GeluTanh, LeakyRelu, Hardtanh).
template <typename T>
T gelu(T x) {
  return T(0.5) * x * std::erfc(-x * T(0.70710678118654752440));
}
template <typename T>
T gelu_tanh(T x) {
  const T u = T(0.79788456080286535588) * (x + T(0.044715) * x * x * x);
  return x / (T(1) + std::exp(-2 * u));
}
template <typename T>
T leaky_relu(T x, T negative_slope) {
  return x > 0 ? x : x * negative_slope;
}
template <typename T>
T hardtanh(T x, T min_val, T max_val) {
  const T r = x < min_val ? min_val : x;
  return r > max_val ? max_val : r;
}

// Gradients of the activations, grad_input = f(grad_output g, saved): x the input, or y the output.
template <typename T>
T threshold_backward(T g, T x, T threshold) {
  return x <= threshold ? T(0) : g;
}
template <typename T>
T leaky_relu_backward(T g, T x, T negative_slope) {
  return x > T(0) ? g : g * negative_slope;
}
template <typename T>
T hardtanh_backward(T g, T x, T min_val, T max_val) {
  return (x <= min_val || x >= max_val) ? T(0) : g;
}
template <typename T>
T sigmoid_backward(T g, T y) {
  return g * (T(1) - y) * y;
}
template <typename T>
T tanh_backward(T g, T y) {
  return g * (T(1) - y * y);
}
template <typename T>
T silu_backward(T g, T x) {
  const T s = T(1) / (T(1) + std::exp(-x));
  return g * s * (T(1) + x * (T(1) - s));
}
template <typename T>
T gelu_backward(T g, T x) {
  const T cdf = T(0.5) * std::erfc(-x * T(0.70710678118654752440));
  const T pdf = T(0.39894228040143267794) * std::exp(T(-0.5) * x * x);
  return g * (cdf + x * pdf);
}
template <typename T>
T gelu_tanh_backward(T g, T x) {
  const T kBeta = T(0.79788456080286535588), kKappa = T(0.044715);
  const T x2 = x * x;
  const T th = std::tanh(kBeta * (x + kKappa * x2 * x));
  const T left = T(0.5) * x, right = T(1) + th;
  const T dinner = kBeta * (T(1) + T(3) * kKappa * x2);
  return g * (T(0.5) * right + left * (T(1) - th * th) * dinner);
}

}  // namespace kiln::kernels::scalar
