// The gradient formulas of ir/ops.toml (derivatives.yaml style), in float64: against central
// finite differences of the op (an independent reference: most eager gradients are generated
// from these formulas), and against eager autograd (the hand-written gradients with fused
// backward kernels must agree with their formula).
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "kiln/kiln.h"

namespace kiln {
namespace {

struct Derivative {
  const char* op;
  std::function<Tensor(const Tensor&)> forward;
  std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)> input_grad;
};

const Derivative kDerivatives[] = {
#include "kiln/ir/KilnDerivatives.inc"
};

// Inside every op's domain (log, sqrt, rsqrt) and away from kinks (relu, abs, sign at 0,
// floor/ceil/round at their steps): x in [0.25, 1.75), and its negation where the op allows.
bool positive_only(const std::string& op) {
  return op == "log" || op == "sqrt" || op == "rsqrt" || op == "log1p";
}

TEST(SchemaDerivatives, FormulasMatchFiniteDifferences) {
  ASSERT_GE(std::size(kDerivatives), 15u);
  manual_seed(5);
  const TensorOptions f64 = TensorOptions(DType::Float64);
  const Tensor x = rand({64}, f64) * 1.5 + 0.25;
  const double h = 1e-6;
  for (const Derivative& d : kDerivatives) {
    SCOPED_TRACE(d.op);
    for (const double side : {1.0, -1.0}) {
      if (side < 0 && positive_only(d.op)) continue;
      const Tensor input = x * side;
      const Tensor result = d.forward(input);
      const Tensor grad = randn(result.sizes(), f64);
      // An elementwise op: d result_i / d input_i, one central difference per element.
      const Tensor slope = (d.forward(input + h) - d.forward(input - h)) / (2 * h);
      const Tensor want = grad * slope;
      const Tensor got = d.input_grad(grad, input, result);
      ASSERT_EQ(got.sizes(), want.sizes());
      EXPECT_LE(amax(abs(got - want)).item<double>(), 1e-6 * (1 + amax(abs(want)).item<double>()));
    }
  }
}

TEST(SchemaDerivatives, FormulasMatchAutograd) {
  ASSERT_GE(std::size(kDerivatives), 15u);
  manual_seed(3);
  const TensorOptions f64 = TensorOptions(DType::Float64);
  const Tensor x = rand({64}, f64) * 1.5 + 0.25;
  for (const Derivative& d : kDerivatives) {
    SCOPED_TRACE(d.op);
    for (const double side : {1.0, -1.0}) {
      if (side < 0 && positive_only(d.op)) continue;
      const Tensor input = x * side;
      const Tensor leaf = input.detach().requires_grad_();
      const Tensor result = d.forward(leaf);
      const Tensor grad = randn(result.sizes(), f64);
      const Tensor want = autograd::grad({sum(result * grad)}, {leaf})[0];
      const Tensor got = d.input_grad(grad, input, result.detach());
      ASSERT_EQ(got.sizes(), want.sizes());
      EXPECT_LE(amax(abs(got - want)).item<double>(), 1e-12 * (1 + amax(abs(want)).item<double>()));
    }
  }
}

}  // namespace
}  // namespace kiln
