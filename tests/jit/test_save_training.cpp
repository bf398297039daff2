// A traced training step (forward, backward, SGD update) saved as an artifact: each Session::run
// performs one step and updates the session's own copy of the parameters in place. Compared
// with the same steps taken eagerly.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <span>
#include <string>

#include "kiln/jit/save.h"
#include "kiln/kiln.h"
#include "kiln/runtime/model.h"

namespace kiln {
namespace {

Tensor rnd(Dims sizes, uint32_t seed, double scale = 1.0) {
  std::mt19937 g(seed);
  std::normal_distribution<double> d(0.0, scale);
  std::vector<double> v(static_cast<size_t>(Tensor(kiln::zeros(sizes, DType::Float32)).numel()));
  for (double& x : v) x = d(g);
  return from_blob(v.data(), sizes, TensorOptions(DType::Float64)).to(DType::Float32).clone();
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return amax(abs(a.to(DType::Float64) - b.to(DType::Float64))).item<double>();
}

using Step = std::function<TensorList(const TensorList&)>;

// Three steps taken eagerly on make()'s tensors; a second set traced through step 1 and saved;
// steps 2 and 3 run by a session: its losses and its state (names[i] is make()[i]) match eager.
void expect_saved_steps_match_eager(const std::function<TensorList()>& make,
                                    const std::function<Step(TensorList&)>& step,
                                    const TensorList& inputs,
                                    const std::vector<std::string>& names) {
  TensorList eager = make();
  Step eager_step = step(eager);
  std::vector<double> eager_losses;
  for (int i = 0; i < 3; ++i) eager_losses.push_back(eager_step(inputs)[0].item<double>());
  EXPECT_GT(std::abs(eager_losses[2] - eager_losses[0]), 1e-4);  // the steps do learn

  TensorList traced = make();
  jit::TraceOptions options;
  for (size_t i = 0; i < names.size(); ++i) options.named_captures.push_back({names[i], traced[i]});
  jit::TracedFunction t = jit::trace(step(traced), inputs, options);
  auto model = rt::Model::from_bytes(jit::save_to_bytes(t));
  rt::Session s(model);
  std::vector<const TensorImpl*> in;
  for (const Tensor& x : inputs) in.push_back(x.impl());
  for (int i = 1; i < 3; ++i) {
    auto out = s.run(std::span<const TensorImpl* const>(in));
    EXPECT_NEAR(Tensor(out[0]).item<double>(), eager_losses[i], 1e-5) << "step " << i + 1;
  }
  for (size_t i = 0; i < names.size(); ++i) {
    const TensorImpl* w = s.state(names[i]);
    ASSERT_NE(w, nullptr) << names[i];
    EXPECT_LE(max_abs_diff(Tensor(TensorImplPtr(const_cast<TensorImpl*>(w))).clone(), eager[i]),
              1e-5)
        << names[i];
  }
}

// A weighted loss's gradient in a saved training step: the class weights are an input, and
// kiln.cross_entropy_backward takes them as an operand (a dropped weight changes the gradient).
TEST(SaveTraining, ClassWeightsReachTheGradient) {
  Tensor w = rnd({3, 5}, 74, 0.5).requires_grad_();
  auto step = [&w](const TensorList& x) {
    Tensor loss = cross_entropy(linear(x[0], w), x[1], x[2]);
    loss.backward();
    Tensor g = w.grad().clone();
    w.set_grad(Tensor());
    return TensorList{loss.detach(), g};
  };
  const Tensor y = tensor({0.0, 2.0, 1.0, 2.0}, DType::Int64);
  jit::TraceOptions options;
  options.named_captures = {{"w", w}};
  jit::TracedFunction t = jit::trace(step, {rnd({4, 5}, 75), y, tensor({1.0, 0.5, 2.0})}, options);
  EXPECT_NE(t.str().find("kiln.cross_entropy_backward"), std::string::npos);
  auto model = rt::Model::from_bytes(jit::save_to_bytes(t));
  rt::Session s(model);
  const Tensor x2 = rnd({4, 5}, 76), weights2 = tensor({3.0, 0.25, 1.0});
  const TensorList want = step({x2, y, weights2});
  auto got = s.run({x2.impl(), y.impl(), weights2.impl()});
  ASSERT_EQ(got.size(), 2u);
  EXPECT_NEAR(Tensor(got[0]).item<double>(), want[0].item<double>(), 1e-5);
  EXPECT_LE(max_abs_diff(Tensor(got[1]), want[1]), 1e-5);
}

// native_code: SaveOptions::native_code (the elementwise updates and gradients as generated code).
void expect_sgd_steps_like_eager(const std::vector<std::string>& native_code) {
  auto make = [] {
    return TensorList{rnd({16, 8}, 71, 0.3).requires_grad_(), zeros({16}).requires_grad_(),
                      rnd({3, 16}, 72, 0.3).requires_grad_()};
  };
  auto step = [](TensorList& p) {
    return [&p](const TensorList& x) {
      Tensor h = relu(linear(x[0], p[0], p[1]));
      Tensor loss = cross_entropy(linear(h, p[2]), x[1]);
      loss.backward();
      {
        autograd::NoGradGuard no_grad;
        for (Tensor& w : p) {
          sub_(w, w.grad(), 0.1);
          w.set_grad(Tensor());
        }
      }
      return TensorList{loss.detach()};
    };
  };
  Tensor x = rnd({4, 8}, 73);
  Tensor y = tensor({0.0, 2.0, 1.0, 2.0}, DType::Int64);

  // Eager: three steps.
  TensorList eager = make();
  auto eager_step = step(eager);
  std::vector<double> eager_losses;
  for (int i = 0; i < 3; ++i) eager_losses.push_back(eager_step({x, y})[0].item<double>());

  // Traced: tracing runs step 1; the artifact starts from the parameters after it.
  TensorList traced = make();
  auto traced_step = step(traced);
  jit::TraceOptions options;
  options.named_captures = {
      {"fc1.weight", traced[0]}, {"fc1.bias", traced[1]}, {"fc2.weight", traced[2]}};
  jit::TracedFunction t = jit::trace(traced_step, {x, y}, options);
  ASSERT_EQ(t.mutated_captures().size(), 3u);
  jit::SaveOptions so;
  so.native_code = native_code;
  auto model = rt::Model::from_bytes(jit::save_to_bytes(t, so));
  ASSERT_EQ(model->outputs().size(), 1u);  // the loss; the parameters are state, not outputs
  if (!native_code.empty()) EXPECT_GE(model->stats().native_instructions, 1u);
  rt::Session s(model);
  for (int i = 1; i < 3; ++i) {
    auto out = s.run({x.impl(), y.impl()});
    EXPECT_NEAR(Tensor(out[0]).item<double>(), eager_losses[i], 1e-5) << "step " << i + 1;
  }
  const char* names[] = {"fc1.weight", "fc1.bias", "fc2.weight"};
  for (int i = 0; i < 3; ++i) {
    const TensorImpl* w = s.state(names[i]);
    ASSERT_NE(w, nullptr) << names[i];
    EXPECT_LE(max_abs_diff(Tensor(TensorImplPtr(const_cast<TensorImpl*>(w))).clone(), eager[i]),
              1e-5)
        << names[i];
  }
  // A second session starts again from the saved parameters.
  rt::Session fresh(model);
  EXPECT_NEAR(Tensor(fresh.run({x.impl(), y.impl()})[0]).item<double>(), eager_losses[1], 1e-5);
}

TEST(SaveTraining, SgdStepsUpdateSessionStateLikeEager) {
  expect_sgd_steps_like_eager({});
}

TEST(SaveTraining, SgdStepsWithGeneratedCodeUpdateStateLikeEager) {
  expect_sgd_steps_like_eager({"host"});
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// A conv net's training step (conv2d -> batch_norm (training) -> relu -> max_pool2d -> linear ->
// cross_entropy, backward, SGD) as an artifact: conv2d_backward, batch_norm_backward,
// max_pool2d_backward and the running-statistics update run on the registry's kernels.
TEST(SaveTraining, ConvNetStepsMatchEager) {
  auto make = [] {
    return TensorList{rnd({4, 1, 3, 3}, 81, 0.3).requires_grad_(),
                      zeros({4}).requires_grad_(),
                      ones({4}).requires_grad_(),
                      zeros({4}).requires_grad_(),
                      rnd({3, 4 * 3 * 3}, 82, 0.2).requires_grad_(),
                      zeros({4}),
                      ones({4})};
  };
  auto step = [](TensorList& p) {
    return [&p](const TensorList& x) {
      Tensor h = conv2d(x[0], p[0], p[1], Pair2(1, 1), Pair2(1, 1));
      h = relu(batch_norm(h, p[5], p[6], p[2], p[3], true, 0.1, 1e-5));
      h = max_pool2d(h, Pair2(2, 2));
      Tensor loss = cross_entropy(linear(h.reshape({h.size(0), -1}), p[4]), x[1]);
      loss.backward();
      {
        autograd::NoGradGuard no_grad;
        for (int i = 0; i < 5; ++i) {
          sub_(p[i], p[i].grad(), 0.1);
          p[i].set_grad(Tensor());
        }
      }
      return TensorList{loss.detach()};
    };
  };
  expect_saved_steps_match_eager(make, step,
                                 {rnd({2, 1, 6, 6}, 83), tensor({0.0, 2.0}, DType::Int64)},
                                 {"conv.weight", "conv.bias", "bn.weight", "bn.bias", "fc.weight",
                                  "bn.running_mean", "bn.running_var"});
}

// interpolate's gradient (kiln.interpolate_backward) in a saved training step.
TEST(SaveTraining, UpsamplingNetStepsMatchEager) {
  auto make = [] {
    return TensorList{rnd({3, 1, 3, 3}, 91, 0.3).requires_grad_(), zeros({3}).requires_grad_(),
                      rnd({2, 3 * 10 * 10}, 92, 0.1).requires_grad_()};
  };
  auto step = [](TensorList& p) {
    return [&p](const TensorList& x) {
      Tensor h = conv2d(x[0], p[0], p[1], 1, 1);  // [2, 3, 4, 4]
      h = relu(interpolate(h, InterpolateOptions().scale_factor({2.5}).mode(
                                  InterpolateMode::Bilinear)));  // [2, 3, 10, 10]
      Tensor loss = cross_entropy(linear(h.reshape({h.size(0), -1}), p[2]), x[1]);
      loss.backward();
      {
        autograd::NoGradGuard no_grad;
        for (int i = 0; i < 3; ++i) {
          sub_(p[i], p[i].grad(), 0.5);
          p[i].set_grad(Tensor());
        }
      }
      return TensorList{loss.detach()};
    };
  };
  expect_saved_steps_match_eager(make, step,
                                 {rnd({2, 1, 4, 4}, 93), tensor({1.0, 0.0}, DType::Int64)},
                                 {"conv.weight", "conv.bias", "fc.weight"});
}

}  // namespace
}  // namespace kiln
