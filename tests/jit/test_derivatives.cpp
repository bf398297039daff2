// The gradient formulas of ir/ops.toml (derivatives.yaml style) against eager autograd: for each
// unary op with a formula, the vector-Jacobian product autograd computes for a random cotangent
// equals the formula evaluated on the same grad, input and result, in float64. A formula that
// drifts from the op's implemented gradient fails here.
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

TEST(SchemaDerivatives, FormulasMatchAutograd) {
  ASSERT_GE(std::size(kDerivatives), 15u);
  manual_seed(3);
  const TensorOptions f64 = TensorOptions(DType::Float64);
  // Inside every op's domain (log, sqrt, rsqrt) and away from kinks (relu, abs, sign at 0,
  // floor/ceil/round at their steps).
  const Tensor x = rand({64}, f64) * 1.5 + 0.25;
  for (const Derivative& d : kDerivatives) {
    SCOPED_TRACE(d.op);
    const std::string op = d.op;
    const bool positive_only = op == "log" || op == "sqrt" || op == "rsqrt" || op == "log1p";
    for (const double side : {1.0, -1.0}) {
      if (side < 0 && positive_only) continue;
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
