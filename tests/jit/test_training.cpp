// A compiled training step (forward + backward + SGD update of an MLP, one trace) updates the
// parameters in place and follows eager step for step.
#include <gtest/gtest.h>

#include "helpers.h"
#include "kiln/jit/compile.h"
#include "kiln/kiln.h"
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
