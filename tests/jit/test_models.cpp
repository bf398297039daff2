// The zoo's models (eval mode) compiled with the JIT match eager: max relative error <= 1e-4.
#include <gtest/gtest.h>

#include "helpers.h"
#include "kiln/jit/compile.h"
#include "kiln/kiln.h"
#include "kiln/models.h"
#include "kiln/trace/trace.h"

using namespace kiln;
using kiln::test::max_rel_error;
using kiln::test::rnd;

namespace {

// Traces model(x) with its parameters and buffers named, compiles, and compares with eager on a
// second input (not the one traced).
void expect_compiled_matches_eager(nn::Module& model, const Tensor& trace_input,
                                   const Tensor& input, double tol = 1e-4) {
  model.eval();
  autograd::NoGradGuard no_grad;
  auto fn = [&](const TensorList& t) { return TensorList{model.forward(t[0])}; };
  jit::TraceOptions options;
  for (const auto& [name, p] : model.named_parameters())
    options.named_captures.push_back({name, p});
  for (const auto& [name, b] : model.named_buffers()) options.named_captures.push_back({name, b});
  jit::TracedFunction traced = jit::trace(fn, {trace_input}, options);
  jit::CompileOptions copts;
  copts.disk_cache = false;
  jit::CompiledFunction compiled = jit::compile(traced, copts);
  Tensor eager = model.forward(input);
  Tensor got = compiled({input})[0];
  ASSERT_EQ(got.sizes(), eager.sizes());
  EXPECT_LE(max_rel_error(got, eager), tol);
}

}  // namespace

TEST(JitModels, TinyUNet) {
  test::TinyUNet m;
  expect_compiled_matches_eager(m, rnd({2, 3, 16, 16}, 7), rnd({2, 3, 16, 16}, 8), 1e-5);
}

TEST(JitModels, LeNet) {
  auto m = models::lenet();
  expect_compiled_matches_eager(*m, rnd({2, 1, 28, 28}, 1), rnd({2, 1, 28, 28}, 2));
}

TEST(JitModels, ResNet18) {
  auto m = models::resnet18(10);
  expect_compiled_matches_eager(*m, rnd({1, 3, 64, 64}, 3), rnd({1, 3, 64, 64}, 4));
}

TEST(JitModels, MobileNetV2) {
  auto m = models::mobilenet_v2(10);
  expect_compiled_matches_eager(*m, rnd({2, 3, 64, 64}, 5), rnd({2, 3, 64, 64}, 6));
}

TEST(JitModels, TransformerClassifier) {
  auto m = models::transformer_classifier(50, 5);
  Tensor a = randint(0, 50, {2, 12}), b = randint(0, 50, {2, 12});
  expect_compiled_matches_eager(*m, a, b);
}

TEST(JitModels, LSTMClassifier) {
  auto m = models::lstm_classifier(50, 5, 16, 32);
  Tensor a = randint(0, 50, {3, 7}), b = randint(0, 50, {3, 7});
  expect_compiled_matches_eager(*m, a, b);
}
