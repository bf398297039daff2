// kiln::quant::quantize_dynamic: an MLP and a two-layer LSTM (its unrolled projections sharing
// one int8 copy of each weight) become kiln.qlinear_dynamic, stay close to float32 on inputs of
// any range, and give the same values on the interpreter, the runtime (saved artifact) and the
// JIT; what cannot be quantized stays float32 with the reason.
#include <gtest/gtest.h>

#include "helpers.h"
#include "kiln/jit/compile.h"
#include "kiln/jit/quantize.h"
#include "kiln/jit/save.h"
#include "kiln/kiln.h"
#include "kiln/runtime/model.h"

namespace kiln {
namespace {

using test::rnd;

Tensor run_artifact(const std::vector<uint8_t>& bytes, const Tensor& x) {
  rt::Session session(rt::Model::from_bytes(bytes));
  return Tensor(session.run({x.impl()})[0]);
}

bool contains(const std::vector<uint8_t>& bytes, const std::string& s) {
  return std::search(bytes.begin(), bytes.end(), s.begin(), s.end()) != bytes.end();
}

TEST(QuantDynamic, MlpRunsInt8WeightsOnEveryBackend) {
  manual_seed(11);
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Linear>(64, 128));
  net->push_back(std::make_shared<nn::ReLU>());
  net->push_back(std::make_shared<nn::Linear>(128, 10));
  net->eval();
  autograd::NoGradGuard no_grad;
  const Tensor example = rnd({4, 64}, 1);
  const size_t fp32 = jit::save_to_bytes(jit::trace(*net, {example})).size();
  std::vector<quant::LayerReport> layers;
  jit::TracedFunction q = quant::quantize_dynamic(jit::trace(*net, {example}), {}, &layers);
  ASSERT_EQ(layers.size(), 2u);
  for (const quant::LayerReport& r : layers) EXPECT_TRUE(r.quantized) << r.reason;
  const std::vector<uint8_t> bytes = jit::save_to_bytes(q);
  EXPECT_TRUE(contains(bytes, "qlinear_dynamic"));
  EXPECT_LT(static_cast<double>(bytes.size()), 0.35 * static_cast<double>(fp32));
  const jit::CompiledFunction compiled = jit::compile(q);
  for (uint32_t s = 0; s < 3; ++s) {
    // A batch of another range each time: the input parameters follow it.
    const Tensor x = rnd({4, 64}, 20 + s) * static_cast<double>(1 + 10 * s);
    const Tensor reference = (*net)(x);
    const Tensor interpreted = q({x})[0];
    EXPECT_GT(quant::sqnr(reference, interpreted), 30.0);
    EXPECT_EQ(test::max_abs_diff(run_artifact(bytes, x), interpreted), 0.0);
    EXPECT_EQ(test::max_abs_diff(compiled({x})[0], interpreted), 0.0);
  }
}

TEST(QuantDynamic, LstmProjectionsShareTheirInt8Weights) {
  manual_seed(12);
  nn::LSTM lstm(nn::RNNOptions(16, 32).num_layers(2));
  lstm.eval();
  autograd::NoGradGuard no_grad;
  const Tensor example = rnd({12, 3, 16}, 2);  // (T, N, I)
  const size_t fp32 =
      rt::Model::from_bytes(jit::save_to_bytes(jit::trace(lstm, {example})))->stats().weight_bytes;
  std::vector<quant::LayerReport> layers;
  jit::TracedFunction q = quant::quantize_dynamic(jit::trace(lstm, {example}), {}, &layers);
  // Per layer one input projection and one hidden projection, the latter in the loop over the
  // steps (recorded once).
  ASSERT_EQ(layers.size(), 2u * 2u);
  for (const quant::LayerReport& r : layers) EXPECT_TRUE(r.quantized) << r.reason;
  const std::vector<uint8_t> bytes = jit::save_to_bytes(q);
  // One int8 copy of each weight, not one per step (scales and float biases besides).
  const size_t int8 = rt::Model::from_bytes(bytes)->stats().weight_bytes;
  EXPECT_LT(static_cast<double>(int8), 0.35 * static_cast<double>(fp32)) << int8 << " vs " << fp32;
  for (uint32_t s = 0; s < 2; ++s) {
    const Tensor x = rnd({12, 3, 16}, 40 + s);
    const Tensor reference = lstm(x).output;
    const Tensor interpreted = q({x})[0];
    EXPECT_GT(quant::sqnr(reference, interpreted), 30.0);
    EXPECT_EQ(test::max_abs_diff(run_artifact(bytes, x), interpreted), 0.0);
  }
}

TEST(QuantDynamic, WhatCannotBeQuantizedStaysFloat) {
  // A linear whose weight is an input of the function, not a constant.
  auto fn = [](const TensorList& t) { return TensorList{linear(t[0], t[1], Tensor())}; };
  const Tensor x = rnd({2, 8}, 3), w = rnd({4, 8}, 4);
  std::vector<quant::LayerReport> layers;
  jit::TracedFunction q = quant::quantize_dynamic(jit::trace(fn, {x, w}), {}, &layers);
  ASSERT_EQ(layers.size(), 1u);
  EXPECT_FALSE(layers[0].quantized);
  EXPECT_EQ(layers[0].reason, "its weight is not a float32 constant");
  EXPECT_LE(test::max_rel_error(q({x, w})[0], fn({x, w})[0]), 1e-6);
}

TEST(QuantDynamic, TrainingStepIsRefused) {
  nn::Linear fc(3, 2);
  try {
    quant::quantize_dynamic(test::trace_sgd_step(fc, rnd({2, 3}, 1)));
    ADD_FAILURE() << "a training step was quantized";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kiln::quant::quantize_dynamic: the traced function "
                                         "writes"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kiln
