// The model zoo's real models trace, print, parse and interpret to what eager computes.
#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "kiln/models.h"
#include "kiln/trace/trace.h"
#include "trace_test_util.h"

using namespace kiln;
using namespace kiln::test;

namespace {

Tensor tokens(Dims sizes, int64_t vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  Tensor t = kiln::empty(sizes, TensorOptions(DType::Int64));
  for (int64_t i = 0; i < t.numel(); ++i) t.data_ptr<int64_t>()[i] = gen() % vocab;
  return t;
}

// Eval-mode trace of `model` on `input`: printed text re-parsed and interpreted must match eager
// within `tol` (relative to the output's largest magnitude); every parameter and buffer the
// forward reads is a named argument. Then both paths on `input2` (same shape and dtype, other
// values) against eager on it: an op the tracer did not record replays as a constant captured
// from `input`, which only a second input shows.
void expect_module_round_trip(nn::Module& model, const Tensor& input, const Tensor& input2,
                              double tol = 1e-5) {
  model.eval();
  manual_seed(0);
  Tensor eager = model.forward(input);
  jit::TracedFunction traced = jit::trace(model, {input});
  const std::string text = traced.str();
  for (const std::string& name : traced.arg_names()) {
    EXPECT_EQ(name.rfind("capture", 0), std::string::npos) << "unnamed capture " << name;
  }
  EXPECT_TRUE(traced.read_backs().empty());
  Tensor replay = interpret_printed(traced, {input})[0];
  ASSERT_EQ(replay.sizes(), eager.sizes());
  const double scale = std::max(1.0, amax(abs(eager)).item<double>());
  EXPECT_LE(max_abs_diff(replay, eager) / scale, tol) << text.substr(0, 4000);
  EXPECT_LE(max_abs_diff(traced({input})[0], eager) / scale, tol);

  ASSERT_EQ(input2.sizes(), input.sizes());
  ASSERT_EQ(input2.dtype(), input.dtype());
  ASSERT_GT(max_abs_diff(input2, input), 0.0);
  manual_seed(0);
  Tensor eager2 = model.forward(input2);
  Tensor replay2 = interpret_printed(traced, {input2})[0];
  ASSERT_EQ(replay2.sizes(), eager2.sizes());
  const double scale2 = std::max(1.0, amax(abs(eager2)).item<double>());
  EXPECT_LE(max_abs_diff(replay2, eager2) / scale2, tol) << "second input\n"
                                                         << text.substr(0, 4000);
  EXPECT_LE(max_abs_diff(traced({input2})[0], eager2) / scale2, tol) << "second input";
}

}  // namespace

TEST(TraceZoo, Mlp) {
  manual_seed(1);
  auto m = models::mlp({20, 64, 64, 10});
  expect_module_round_trip(*m, rnd({4, 20}, 1), rnd({4, 20}, 101));
}

TEST(TraceZoo, LeNet) {
  manual_seed(2);
  auto m = models::lenet();
  expect_module_round_trip(*m, rnd({2, 1, 28, 28}, 2), rnd({2, 1, 28, 28}, 102));
}

TEST(TraceZoo, ResNet18) {
  manual_seed(3);
  auto m = models::resnet18(100);
  expect_module_round_trip(*m, rnd({1, 3, 64, 64}, 3), rnd({1, 3, 64, 64}, 103), 1e-4);
}

TEST(TraceZoo, MobileNetV2) {
  manual_seed(4);
  auto m = models::mobilenet_v2(100);
  expect_module_round_trip(*m, rnd({1, 3, 64, 64}, 4), rnd({1, 3, 64, 64}, 104), 1e-4);
}

TEST(TraceZoo, TransformerClassifier) {
  manual_seed(5);
  auto m = models::transformer_classifier(50, 5);
  expect_module_round_trip(*m, tokens({2, 16}, 50, 5), tokens({2, 16}, 50, 105), 1e-4);
}

TEST(TraceZoo, LstmClassifier) {
  manual_seed(6);
  auto m = models::lstm_classifier(50, 5);
  expect_module_round_trip(*m, tokens({2, 12}, 50, 6), tokens({2, 12}, 50, 106), 1e-4);
}

// The zoo MLP's whole training step (forward, backward, SGD): traced once, then called on a new
// batch, it updates the parameters exactly as eager does on a copy of the model.
TEST(TraceZoo, MlpTrainingStep) {
  manual_seed(7);
  auto traced_model = models::mlp({8, 16, 3});
  manual_seed(7);
  auto eager_model = models::mlp({8, 16, 3});
  optim::SGD traced_opt(traced_model->parameters(), optim::SGDOptions(0.1));
  optim::SGD eager_opt(eager_model->parameters(), optim::SGDOptions(0.1));
  auto step = [](nn::Module& m, optim::Optimizer& opt) {
    return [&m, &opt](const TensorList& in) {
      opt.zero_grad();
      Tensor loss = cross_entropy(m.forward(in[0]), in[1]);
      loss.backward();
      opt.step();
      return TensorList{loss.detach()};
    };
  };
  Tensor x0 = rnd({4, 8}, 10), y0 = tokens({4}, 3, 10);
  jit::TraceOptions options;
  for (const auto& [name, t] : traced_model->named_parameters()) {
    options.named_captures.emplace_back(name, t);
  }
  jit::TracedFunction traced = jit::trace(step(*traced_model, traced_opt), {x0, y0}, options);
  step(*eager_model, eager_opt)({x0, y0});  // the trace ran one eager step too
  for (uint32_t k = 0; k < 3; ++k) {
    Tensor x = rnd({4, 8}, 20 + k), y = tokens({4}, 3, 20 + k);
    Tensor traced_loss = traced({x, y})[0];
    Tensor eager_loss = step(*eager_model, eager_opt)({x, y})[0];
    EXPECT_NEAR(traced_loss.item<double>(), eager_loss.item<double>(), 1e-5);
  }
  TensorList a = traced_model->parameters(), b = eager_model->parameters();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_LE(max_abs_diff(a[i], b[i]), 1e-5);
}

namespace {

// Traces one SGD training step of `model` on (x, y), then checks that calling the trace on new
// batches moves the parameters and buffers exactly as eager steps on an identical copy do.
void expect_training_step_matches_eager(const std::function<std::shared_ptr<nn::Module>()>& make,
                                        Dims input_shape, int64_t classes, double tol,
                                        double lr = 0.05) {
  manual_seed(21);
  auto traced_model = make();
  manual_seed(21);
  auto eager_model = make();
  traced_model->train();
  eager_model->train();
  optim::SGD traced_opt(traced_model->parameters(), optim::SGDOptions(lr).momentum(0.9));
  optim::SGD eager_opt(eager_model->parameters(), optim::SGDOptions(lr).momentum(0.9));
  auto step = [](nn::Module& m, optim::Optimizer& opt) {
    return [&m, &opt](const TensorList& in) {
      opt.zero_grad();
      Tensor loss = cross_entropy(m.forward(in[0]), in[1]);
      loss.backward();
      opt.step();
      return TensorList{loss.detach()};
    };
  };
  jit::TraceOptions options;
  for (const auto& [name, t] : traced_model->named_parameters()) {
    options.named_captures.emplace_back(name, t);
  }
  for (const auto& [name, t] : traced_model->named_buffers()) {
    options.named_captures.emplace_back(name, t);
  }
  // One eager step first (a trace could also start from the first step).
  Tensor xw = rnd(input_shape, 29), yw = tokens({input_shape[0]}, classes, 29);
  step(*traced_model, traced_opt)({xw, yw});
  step(*eager_model, eager_opt)({xw, yw});
  Tensor x0 = rnd(input_shape, 30), y0 = tokens({input_shape[0]}, classes, 30);
  jit::TracedFunction traced = jit::trace(step(*traced_model, traced_opt), {x0, y0}, options);
  step(*eager_model, eager_opt)({x0, y0});
  for (uint32_t k = 0; k < 3; ++k) {
    Tensor x = rnd(input_shape, 40 + k), y = tokens({input_shape[0]}, classes, 40 + k);
    const double traced_loss = traced({x, y})[0].item<double>();
    const double eager_loss = step(*eager_model, eager_opt)({x, y})[0].item<double>();
    EXPECT_NEAR(traced_loss, eager_loss, tol * std::max(1.0, std::abs(eager_loss)));
  }
  auto a = traced_model->named_parameters(), b = eager_model->named_parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_LE(max_abs_diff(a[i].second, b[i].second), tol) << a[i].first;
  }
  auto ab = traced_model->named_buffers(), bb = eager_model->named_buffers();
  for (size_t i = 0; i < ab.size(); ++i) {
    EXPECT_LE(max_abs_diff(ab[i].second, bb[i].second), tol) << ab[i].first;
  }
}

}  // namespace

// Conv, max-pool and linear gradients are traced ops: a LeNet training step is one trace.
TEST(TraceZoo, LeNetTrainingStep) {
  expect_training_step_matches_eager([] { return models::lenet(); }, {8, 1, 28, 28}, 10, 1e-5);
}

// Batch norm in training mode: batch-statistics gradients and running-statistics updates are
// traced too (the buffers are in-out values like the parameters), as are the residual adds,
// adaptive average pooling and the momentum buffers. Batch 8 and lr 0.002 keep it well
// conditioned: the traced update (a host-scalar multiply, then an add) rounds differently from
// eager's fused add, and at batch 2 layer4's batch norm of two values amplifies that.
TEST(TraceZoo, ResNet18TrainingStep) {
  expect_training_step_matches_eager([] { return models::resnet18(10); }, {8, 3, 32, 32}, 10, 1e-4,
                                     0.002);
}

// Steps of two forms: SGD's first step with dampening (its buffer starts as the gradient, unlike
// later steps) traces behind a host guard, which a later step fails (never replayed with the
// wrong form); LBFGS with its default max_iter (a data-dependent number of closure calls) is
// refused by name.
TEST(TraceZoo, StepsOfSeveralFormsAreGuardedOrRefused) {
  manual_seed(8);
  auto m = models::mlp({4, 3});
  auto step_with = [&](optim::Optimizer& opt) {
    return [&](const TensorList& in) {
      auto closure = [&] {
        opt.zero_grad();
        Tensor loss = sum(m->forward(in[0]));
        loss.backward();
        return loss;
      };
      return TensorList{opt.step(closure).detach()};
    };
  };
  optim::SGD sgd(m->parameters(), optim::SGDOptions(0.1).momentum(0.9).dampening(0.5));
  jit::TracedFunction first = jit::trace(step_with(sgd), {ones({2, 4})});
  EXPECT_THROW(first({ones({2, 4})}), GuardError);
  // Later steps have one form: they trace and replay.
  jit::TracedFunction later = jit::trace(step_with(sgd), {ones({2, 4})});
  EXPECT_NO_THROW(later({ones({2, 4})}));
  optim::LBFGS lbfgs(m->parameters(), optim::LBFGSOptions(0.1));
  try {
    jit::trace(step_with(lbfgs), {ones({2, 4})});
    FAIL() << "LBFGS with max_iter 20 was traced";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_iter"), std::string::npos) << e.what();
  }
}
