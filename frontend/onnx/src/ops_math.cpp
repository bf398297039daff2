// Elementwise, reduction and matrix ops of ONNX's default domain on kiln's eager ops.

#include <numeric>

#include "graph.h"

namespace kiln::onnx::detail {
namespace {

using C = const NodeContext&;

template <Tensor (*F)(const Tensor&, const Tensor&)>
TensorList binary(C c) {
  return {F(c.in(0), c.in(1))};
}
template <Tensor (*F)(const Tensor&)>
TensorList unary(C c) {
  return {F(c.in(0))};
}

Tensor add2(const Tensor& a, const Tensor& b) {
  return add(a, b);
}
Tensor sub2(const Tensor& a, const Tensor& b) {
  return sub(a, b);
}

// Max/Min/Sum/Mean take one or more inputs, broadcasting.
template <Tensor (*F)(const Tensor&, const Tensor&)>
TensorList variadic(C c) {
  Tensor r = c.in(0);
  for (size_t i = 1; i < c.num_inputs(); ++i) r = F(r, c.in(i));
  return {r};
}
TensorList mean_of(C c) {
  return {div(variadic<add2>(c)[0], static_cast<double>(c.num_inputs()))};
}

TensorList identity(C c) {
  return {c.in(0)};
}

// Integer Div truncates toward zero (C's); kiln's div is true division.
TensorList div_op(C c) {
  const Tensor &a = c.in(0), &b = c.in(1);
  if (a.is_floating_point() || b.is_floating_point()) return {div(a, b)};
  return {div(a.to(DType::Float64), b.to(DType::Float64)).to(promote_types(a.dtype(), b.dtype()))};
}

TensorList cast(C c) {
  const auto to = dtype_of_onnx(c.i("to"));
  if (!to) c.fail("cast to ONNX type " + std::to_string(c.i("to")) + " is not supported");
  return {c.in(0).to(*to)};
}

// Clip: bounds as attributes (opset < 11) or optional inputs.
TensorList clip(C c) {
  std::optional<double> lo, hi;
  if (c.opset() < 11) {
    lo = c.f("min", -std::numeric_limits<double>::infinity());
    hi = c.f("max", std::numeric_limits<double>::infinity());
  } else {
    lo = c.scalar_of(1);
    hi = c.scalar_of(2);
  }
  // relu6 and relu as kiln's activations, which the fusion passes recognize.
  if (lo && *lo == 0 && !hi) return {relu(c.in(0))};
  return {clamp(c.in(0), lo, hi)};
}

TensorList leaky_relu_op(C c) {
  return {leaky_relu(c.in(0), c.f("alpha", 0.01))};
}
TensorList hard_sigmoid(C c) {
  const double alpha = c.f("alpha", 0.2), beta = c.f("beta", 0.5);
  return {clamp(add(mul(c.in(0), alpha), beta), 0.0, 1.0)};
}
TensorList hard_swish(C c) {
  const Tensor& x = c.in(0);
  return {mul(x, clamp(add(mul(x, 1.0 / 6), 0.5), 0.0, 1.0))};
}
TensorList softplus(C c) {
  return {log1p(exp(c.in(0)))};
}
TensorList elu(C c) {
  const Tensor& x = c.in(0);
  const double alpha = c.f("alpha", 1.0);
  return {where(gt(x, zeros_like(x)), x, mul(expm1(x), alpha))};
}
TensorList not_op(C c) {
  return {logical_not(c.in(0))};
}
TensorList where_op(C c) {
  return {where(c.in(0), c.in(1), c.in(2))};
}

// Reductions: axes as an attribute, or (ReduceSum from 13, the others from 18) an input.
TensorList reduce(C c, Tensor (*f)(const Tensor&, std::span<const int64_t>, bool)) {
  const Tensor& x = c.in(0);
  std::vector<int64_t> axes = c.ints("axes", std::vector<int64_t>{});
  if (c.has(1)) axes = c.ints_of(1);
  const bool keep = c.i("keepdims", 1) != 0;
  if (axes.empty() && c.i("noop_with_empty_axes", 0)) return {x};
  for (int64_t& a : axes) a = norm_axis(c, a, x.dim());
  return {f(x, axes, keep)};
}
TensorList reduce_mean(C c) {
  return reduce(c, mean);
}
TensorList reduce_sum(C c) {
  return reduce(c, sum);
}
TensorList reduce_max(C c) {
  return reduce(c, amax);
}
TensorList reduce_min(C c) {
  return reduce(c, amin);
}
TensorList reduce_prod(C c) {
  return reduce(c, prod);
}

TensorList arg_reduce(C c, bool is_max) {
  const Tensor& x = c.in(0);
  if (c.i("select_last_index", 0)) c.fail("select_last_index = 1 is not supported");
  const int64_t axis = norm_axis(c, c.i("axis", 0), x.dim());
  const bool keep = c.i("keepdims", 1) != 0;
  return {is_max ? argmax(x, axis, keep) : argmin(x, axis, keep)};
}
TensorList arg_max(C c) {
  return arg_reduce(c, true);
}
TensorList arg_min(C c) {
  return arg_reduce(c, false);
}

// Softmax before opset 13 works on the input coerced to 2-d at `axis` (default 1).
TensorList softmax_like(C c, Tensor (*f)(const Tensor&, int64_t)) {
  const Tensor& x = c.in(0);
  if (c.opset() >= 13) return {f(x, norm_axis(c, c.i("axis", -1), x.dim()))};
  const int64_t axis = norm_axis(c, c.i("axis", 1), x.dim());
  int64_t rows = 1;
  for (int64_t d = 0; d < axis; ++d) rows *= x.size(d);
  return {f(x.reshape({rows, -1}), 1).reshape(x.sizes())};
}
TensorList softmax_op(C c) {
  return softmax_like(c, softmax);
}
TensorList log_softmax_op(C c) {
  return softmax_like(c, log_softmax);
}

// numpy.matmul: 1-d operands are promoted and the added dim dropped after.
TensorList matmul_op(C c) {
  Tensor a = c.in(0), b = c.in(1);
  const bool a1 = a.dim() == 1, b1 = b.dim() == 1;
  if (a1) a = a.unsqueeze(0);
  if (b1) b = b.unsqueeze(1);
  Tensor r = matmul(a, b);
  if (a1) r = r.squeeze(-2);
  if (b1) r = r.squeeze(-1);
  return {r};
}

// Y = alpha * A' B' + beta * C; the common case (B transposed, no scaling) is kiln.linear.
TensorList gemm(C c) {
  Tensor a = c.in(0), b = c.in(1);
  const double alpha = c.f("alpha", 1.0), beta = c.f("beta", 1.0);
  if (a.dim() != 2 || b.dim() != 2) c.fail("A and B must be 2-d");
  if (c.i("transA", 0)) a = a.transpose(0, 1);
  const bool trans_b = c.i("transB", 0) != 0;
  if (alpha == 1.0 && trans_b &&
      (!c.has(2) || (beta == 1.0 && c.in(2).dim() <= 1 && c.in(2).numel() == b.size(0)))) {
    return {linear(a, b, c.has(2) ? c.in(2).reshape({b.size(0)}) : Tensor())};
  }
  Tensor y = matmul(a, trans_b ? b.transpose(0, 1) : b);
  if (alpha != 1.0) y = mul(y, alpha);
  if (c.has(2)) y = add(y, beta == 1.0 ? c.in(2) : mul(c.in(2), beta));
  return {y};
}

}  // namespace

std::vector<OpDef> math_ops() {
  return {
      {"Add", 1, binary<add2>},
      {"Sub", 1, binary<sub2>},
      {"Mul", 1, binary<mul>},
      {"Div", 1, div_op},
      {"Pow", 1, binary<pow>},
      {"Max", 1, variadic<maximum>},
      {"Min", 1, variadic<minimum>},
      {"Sum", 1, variadic<add2>},
      {"Mean", 1, mean_of},
      {"Equal", 1, binary<eq>},
      {"Less", 1, binary<lt>},
      {"Greater", 1, binary<gt>},
      {"LessOrEqual", 12, binary<le>},
      {"GreaterOrEqual", 12, binary<ge>},
      {"And", 1, binary<logical_and>},
      {"Or", 1, binary<logical_or>},
      {"Not", 1, not_op},
      {"Where", 9, where_op},
      {"Neg", 1, unary<neg>},
      {"Abs", 1, unary<abs>},
      {"Exp", 1, unary<exp>},
      {"Log", 1, unary<log>},
      {"Sqrt", 1, unary<sqrt>},
      {"Reciprocal", 1, unary<reciprocal>},
      {"Tanh", 1, unary<tanh>},
      {"Sigmoid", 1, unary<sigmoid>},
      {"Relu", 1, unary<relu>},
      {"Erf", 9, unary<erf>},
      {"Floor", 1, unary<floor>},
      {"Ceil", 1, unary<ceil>},
      {"Sin", 7, unary<sin>},
      {"Cos", 7, unary<cos>},
      {"Sign", 9, unary<sign>},
      {"Identity", 1, identity},
      {"Cast", 6, cast},
      {"Clip", 1, clip},
      {"LeakyRelu", 1, leaky_relu_op},
      {"HardSigmoid", 1, hard_sigmoid},
      {"HardSwish", 14, hard_swish},
      {"Softplus", 1, softplus},
      {"Elu", 1, elu},
      {"ReduceMean", 1, reduce_mean},
      {"ReduceSum", 1, reduce_sum},
      {"ReduceMax", 1, reduce_max},
      {"ReduceMin", 1, reduce_min},
      {"ReduceProd", 1, reduce_prod},
      {"ArgMax", 1, arg_max},
      {"ArgMin", 1, arg_min},
      {"Softmax", 1, softmax_op},
      {"LogSoftmax", 1, log_softmax_op},
      {"MatMul", 1, matmul_op},
      {"Gemm", 1, gemm},
  };
}

}  // namespace kiln::onnx::detail
