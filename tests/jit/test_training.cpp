// A compiled training step (forward + backward + SGD update of an MLP, one trace) updates the
// parameters in place and follows eager step for step.
#include <gtest/gtest.h>

#include "helpers.h"
#include "kiln/jit/compile.h"
#include "kiln/kiln.h"
#include "kiln/models.h"
#include "kiln/optim.h"
#include "kiln/trace/trace.h"

using namespace kiln;
using kiln::test::max_abs_diff;
using kiln::test::rnd;

TEST(JitTraining, SgdStepOfMlpMatchesEagerOverSeveralSteps) {
  auto make = [] {
    return TensorList{rnd({32, 16}, 71, 0.3).requires_grad_(), zeros({32}).requires_grad_(),
                      rnd({5, 32}, 72, 0.3).requires_grad_(), zeros({5}).requires_grad_()};
  };
  auto step = [](TensorList& p) {
    return [&p](const TensorList& x) {
      Tensor h = relu(linear(x[0], p[0], p[1]));
      Tensor loss = cross_entropy(linear(h, p[2], p[3]), x[1]);
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
  Tensor x = rnd({8, 16}, 73);
  Tensor y = tensor({0.0, 2.0, 1.0, 4.0, 3.0, 2.0, 0.0, 1.0}, DType::Int64);

  TensorList eager_params = make();
  auto eager_step = step(eager_params);
  TensorList compiled_params = make();
  auto traced_step = step(compiled_params);
  jit::TraceOptions options;
  options.named_captures = {{"fc1.weight", compiled_params[0]},
                            {"fc1.bias", compiled_params[1]},
                            {"fc2.weight", compiled_params[2]},
                            {"fc2.bias", compiled_params[3]}};
  // Tracing runs step 1 eagerly on compiled_params; eager does the same.
  jit::TracedFunction traced = jit::trace(traced_step, {x, y}, options);
  ASSERT_EQ(traced.mutated_captures().size(), 4u);
  eager_step({x, y});
  jit::CompileOptions copts;
  copts.disk_cache = false;
  jit::CompiledFunction compiled = jit::compile(traced, copts);

  const Tensor before = compiled_params[0].detach().clone();
  double first_loss = 0, last_loss = 0;
  for (int s = 0; s < 5; ++s) {
    Tensor eager_loss = eager_step({x, y})[0];
    Tensor compiled_loss = compiled({x, y})[0];
    EXPECT_LE(max_abs_diff(compiled_loss, eager_loss), 1e-5) << "step " << s;
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_LE(max_abs_diff(compiled_params[i], eager_params[i]), 1e-5)
          << "parameter " << i << " after step " << s;
    }
    if (s == 0) first_loss = compiled_loss.item<double>();
    last_loss = compiled_loss.item<double>();
  }
  // The parameters really moved (in place, in the captured tensors) and the loss went down.
  EXPECT_GT(max_abs_diff(compiled_params[0], before), 1e-3);
  EXPECT_LT(last_loss, first_loss);
}

TEST(JitTraining, MomentumSgdStateIsUpdatedInPlace) {
  // optim::SGD with momentum and weight decay: the momentum buffers (created by an eager first
  // step) are in-out captures of the traced step, like the parameters.
  auto make_model = [] {
    auto m = models::mlp({12, 24, 4});
    // Same initial weights for both copies.
    autograd::NoGradGuard g;
    uint32_t seed = 90;
    for (auto& p : m->parameters()) copy_(p, rnd(p.sizes(), seed++, 0.3));
    return m;
  };
  Tensor x = rnd({6, 12}, 91);
  Tensor y = tensor({0.0, 1.0, 2.0, 3.0, 1.0, 0.0}, DType::Int64);
  auto run_step = [&](nn::Module& model, optim::SGD& sgd) {
    return [&](const TensorList& in) {
      sgd.zero_grad();
      Tensor loss = cross_entropy(model.forward(in[0]), in[1]);
      loss.backward();
      sgd.step();
      return TensorList{loss.detach()};
    };
  };
  auto eager_model = make_model(), compiled_model = make_model();
  optim::SGD eager_sgd(eager_model->parameters(),
                       optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-3));
  optim::SGD compiled_sgd(compiled_model->parameters(),
                          optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-3));
  auto eager_step = run_step(*eager_model, eager_sgd);
  auto traced_step = run_step(*compiled_model, compiled_sgd);
  eager_step({x, y});  // first steps create the momentum buffers
  traced_step({x, y});
  // The last bias's [4] momentum buffer is small enough to be inlined as a constant at first
  // sight; the tracer promotes it to an in-out argument because the step writes it.
  jit::TracedFunction traced = jit::trace(traced_step, {x, y});  // step 2, eagerly
  eager_step({x, y});
  // Parameters and momentum buffers are written in place by the traced step.
  EXPECT_GE(traced.mutated_captures().size(), 8u);
  jit::CompileOptions o;
  o.disk_cache = false;
  jit::CompiledFunction compiled = jit::compile(traced, o);
  for (int s = 0; s < 4; ++s) {
    Tensor le = eager_step({x, y})[0];
    Tensor lc = compiled({x, y})[0];
    EXPECT_LE(max_abs_diff(lc, le), 1e-5) << "step " << s;
  }
  auto pe = eager_model->parameters(), pc = compiled_model->parameters();
  for (size_t i = 0; i < pe.size(); ++i) {
    EXPECT_LE(max_abs_diff(pc[i], pe[i]), 1e-5) << "parameter " << i;
  }
}

// A conv net's step compiled by the JIT: conv2d, batch_norm (training, running statistics as
// in-out values), max_pool2d, avg_pool2d, adaptive_avg_pool2d and interpolate have their
// gradients as kiln.*_backward ops, lowered to calls of the runtime's kernels.
TEST(JitTraining, ConvNetStepFollowsEager) {
  auto make = [] {
    return TensorList{rnd({4, 2, 3, 3}, 81, 0.3).requires_grad_(),
                      zeros({4}).requires_grad_(),
                      ones({4}).requires_grad_(),
                      zeros({4}).requires_grad_(),
                      rnd({3, 4 * 2 * 2}, 82, 0.2).requires_grad_(),
                      zeros({4}),
                      ones({4})};
  };
  auto step = [](TensorList& p) {
    return [&p](const TensorList& x) {
      Tensor h = conv2d(x[0], p[0], p[1], 1, 1);  // 8x8
      h = relu(batch_norm(h, p[5], p[6], p[2], p[3], true, 0.1, 1e-5));
      h = max_pool2d(h, 2);  // 4x4
      h = interpolate(h, InterpolateOptions().size({6, 6}).mode(InterpolateMode::Bilinear));
      h = avg_pool2d(h, 3, 1, 1);          // 6x6
      h = adaptive_avg_pool2d(h, {2, 2});  // 2x2
      Tensor loss = cross_entropy(linear(h.reshape({h.size(0), -1}), p[4]), x[1]);
      loss.backward();
      {
        autograd::NoGradGuard no_grad;
        for (int i = 0; i < 5; ++i) {
          sub_(p[i], p[i].grad(), 0.2);
          p[i].set_grad(Tensor());
        }
      }
      return TensorList{loss.detach()};
    };
  };
  Tensor x = rnd({3, 2, 8, 8}, 83);
  Tensor y = tensor({0.0, 2.0, 1.0}, DType::Int64);
  TensorList eager_params = make();
  auto eager_step = step(eager_params);
  TensorList compiled_params = make();
  jit::TraceOptions options;
  const char* names[] = {"conv.weight", "conv.bias", "bn.weight", "bn.bias",
                         "fc.weight",   "bn.mean",   "bn.var"};
  for (int i = 0; i < 7; ++i) options.named_captures.push_back({names[i], compiled_params[i]});
  jit::TracedFunction traced = jit::trace(step(compiled_params), {x, y}, options);
  eager_step({x, y});
  jit::CompileOptions copts;
  copts.disk_cache = false;
  jit::CompiledFunction compiled = jit::compile(traced, copts);
  for (int s = 0; s < 3; ++s) {
    Tensor eager_loss = eager_step({x, y})[0];
    Tensor compiled_loss = compiled({x, y})[0];
    EXPECT_LE(max_abs_diff(compiled_loss, eager_loss), 1e-5) << "step " << s;
    for (int i = 0; i < 7; ++i)
      EXPECT_LE(max_abs_diff(compiled_params[i], eager_params[i]), 1e-5)
          << names[i] << " after step " << s;
  }
  EXPECT_GT(max_abs_diff(compiled_params[6], ones({4})), 1e-3);  // running variance moved
}
