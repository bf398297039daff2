// The custom Function API: forward/backward, saved tensors, dirty inputs, non-differentiable
// outputs, non-tensor arguments.
#include <gtest/gtest.h>

#include "kiln/gradcheck.h"
#include "kiln/kiln.h"

using namespace kiln;
using autograd::AutogradContext;

namespace {

// y = x * scale + x³ (scale a plain double argument).
struct CubicScale : autograd::Function<CubicScale> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, double scale) {
    ctx->save_for_backward({x});
    ctx->saved_data["scale"] = scale;
    return x * scale + x * x * x;
  }
  static TensorList backward(AutogradContext* ctx, TensorList g) {
    Tensor x = ctx->get_saved_variables()[0];
    const double scale = std::any_cast<double>(ctx->saved_data["scale"]);
    return {g[0] * (x * x * 3.0 + scale), Tensor()};
  }
};

// Returns (x sorted-ish mask, x * 2): the mask is non-differentiable.
struct TwoOutputs : autograd::Function<TwoOutputs> {
  static TensorList forward(AutogradContext* ctx, const Tensor& x) {
    Tensor mask = gt(x, zeros_like(x));
    ctx->mark_non_differentiable({mask});
    return {mask, x * 2.0};
  }
  static TensorList backward(AutogradContext*, TensorList g) { return {g[1] * 2.0}; }
};

// Doubles its input in place and saves the result.
struct DoubleInPlace : autograd::Function<DoubleInPlace> {
  static Tensor forward(AutogradContext* ctx, Tensor x) {
    mul_(x, 2.0);
    ctx->mark_dirty({x});
    return x;
  }
  static TensorList backward(AutogradContext*, TensorList g) { return {g[0] * 2.0}; }
};

// x³ with a backward that is wrong by a factor (3.3 x² instead of 3 x²): gradcheck must say so.
struct CubeWrongGrad : autograd::Function<CubeWrongGrad> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x) {
    ctx->save_for_backward({x});
    return x * x * x;
  }
  static TensorList backward(AutogradContext* ctx, TensorList g) {
    Tensor x = ctx->get_saved_variables()[0];
    return {g[0] * (x * x * 3.3)};
  }
};

// x³ whose backward is right but whose second derivative is wrong (the backward is built from
// a detached x, so its own gradient misses the 6 x term): only gradgradcheck can see it.
struct CubeWrongGradGrad : autograd::Function<CubeWrongGradGrad> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x) {
    ctx->save_for_backward({x});
    return x * x * x;
  }
  static TensorList backward(AutogradContext* ctx, TensorList g) {
    Tensor x = ctx->get_saved_variables()[0].detach();
    return {g[0] * (x * x * 3.0)};
  }
};

}  // namespace

TEST(CustomFunction, GradcheckRejectsAWrongGradient) {
  Tensor x = tensor({0.3, -1.2, 2.0}, DType::Float64).requires_grad_();
  auto wrong = autograd::gradcheck(
      [](const TensorList& v) { return TensorList{CubeWrongGrad::apply(v[0])}; }, {x});
  EXPECT_FALSE(wrong.ok);
  EXPECT_NE(wrong.message.find("gradient mismatch"), std::string::npos) << wrong.message;
  auto first_order = autograd::gradcheck(
      [](const TensorList& v) { return TensorList{CubeWrongGradGrad::apply(v[0])}; }, {x});
  EXPECT_TRUE(first_order.ok) << first_order.message;
  auto second_order = autograd::gradgradcheck(
      [](const TensorList& v) { return TensorList{CubeWrongGradGrad::apply(v[0])}; }, {x});
  EXPECT_FALSE(second_order.ok);
}

TEST(CustomFunction, GradcheckWithScalarArgument) {
  Tensor x = tensor({0.3, -1.2, 2.0}, DType::Float64).requires_grad_();
  auto r = autograd::gradcheck(
      [](const TensorList& v) { return TensorList{CubicScale::apply(v[0], 1.5)}; }, {x});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(CustomFunction, NonDifferentiableOutputs) {
  Tensor x = tensor({-1.0, 2.0}, DType::Float64).requires_grad_();
  TensorList out = TwoOutputs::apply(x);
  EXPECT_FALSE(out[0].requires_grad());
  EXPECT_TRUE(out[1].requires_grad());
  sum(out[1]).backward();
  EXPECT_DOUBLE_EQ(x.grad().index({0}).item<double>(), 2.0);
}

TEST(CustomFunction, DirtyInputsAreRebased) {
  Tensor x = tensor({1.0, 2.0}, DType::Float64).requires_grad_();
  Tensor y = x * 1.0;
  const uint64_t v0 = y.version();
  Tensor z = DoubleInPlace::apply(y);
  EXPECT_TRUE(z.is_same(y));
  EXPECT_GT(y.version(), v0);
  sum(z * 3.0).backward();
  EXPECT_DOUBLE_EQ(x.grad().index({1}).item<double>(), 6.0);
}

// The node keeps no strong reference to the tensors it marked (a dirty input is an output whose
// grad_fn is the node itself): once the caller drops them, the graph is freed.
TEST(CustomFunction, GraphIsFreedWithItsOutputs) {
  Tensor x = tensor({1.0, 2.0}, DType::Float64).requires_grad_();
  std::weak_ptr<autograd::Node> dirty_node, two_node;
  {
    Tensor y = x * 1.0;
    Tensor z = DoubleInPlace::apply(y);
    dirty_node = z.grad_fn();
    TensorList out = TwoOutputs::apply(x);
    two_node = out[1].grad_fn();
    ASSERT_FALSE(dirty_node.expired());
    ASSERT_FALSE(two_node.expired());
  }
  EXPECT_TRUE(dirty_node.expired());
  EXPECT_TRUE(two_node.expired());
}

TEST(CustomFunction, NoGraphWithoutGradInputs) {
  Tensor x = tensor({1.0, 2.0}, DType::Float64);
  Tensor y = CubicScale::apply(x, 2.0);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_DOUBLE_EQ(y.index({1}).item<double>(), 12.0);
}
