// The whole inference path: trace → freeze (weights become constants) → kiln's inference pass
// pipeline (bn folding, conv/linear epilogue fusion, kiln.fused regions, memory plan) →
// compile. The compiled model matches eager (max relative error <= 1e-4).
#include <gtest/gtest.h>

#include <thread>

#include "helpers.h"
#include "kiln/jit/compile.h"
#include "kiln/kiln.h"
#include "kiln/models.h"
#include "kiln/passes/Passes.h"
#include "kiln/trace/freeze.h"
#include "kiln/trace/trace.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"

using namespace kiln;
using kiln::test::max_rel_error;
using kiln::test::rnd;

namespace {

void expect_optimized_compiled_matches_eager(nn::Module& model, const Tensor& trace_input,
                                             const Tensor& input,
                                             const passes::PipelineOptions& po = {},
                                             const char* must_contain = nullptr) {
  model.eval();
  autograd::NoGradGuard no_grad;
  // Batch-norm statistics away from identity, so folding them is not a no-op.
  uint32_t seed = 500;
  for (auto& [name, b] : model.named_buffers()) {
    if (b.dtype() == DType::Float32) copy_(b, abs(rnd(b.sizes(), seed++, 0.5)) + 0.5);
  }
  auto fn = [&](const TensorList& t) { return TensorList{model.forward(t[0])}; };
  jit::TraceOptions options;
  for (const auto& [n, p] : model.named_parameters()) options.named_captures.push_back({n, p});
  for (const auto& [n, b] : model.named_buffers()) options.named_captures.push_back({n, b});
  jit::TracedFunction traced = jit::trace(fn, {trace_input}, options);
  jit::freeze(traced);
  mlir::PassManager pm(&traced.context());
  passes::build_inference_pipeline(pm, po);
  ASSERT_TRUE(mlir::succeeded(pm.run(traced.module())));
  const std::string text = traced.str();
  if (must_contain) EXPECT_NE(text.find(must_contain), std::string::npos) << must_contain;
  jit::CompileOptions o;
  o.disk_cache = false;
  jit::CompiledFunction compiled = jit::compile(traced, o);
  Tensor want = model.forward(input);
  // Frozen conv weights are prepared (packed) by the first call of each call site, which two
  // threads make at once here; later calls reuse the prepared weights.
  Tensor first[2];
  std::thread other([&] { first[1] = compiled({input})[0]; });
  first[0] = compiled({input})[0];
  other.join();
  EXPECT_LE(max_rel_error(first[0], want), 1e-4);
  EXPECT_LE(max_rel_error(first[1], want), 1e-4);
  EXPECT_LE(max_rel_error(compiled({input})[0], want), 1e-4);
}

}  // namespace

TEST(JitPipeline, ResNet18FoldedAndFused) {
  auto m = models::resnet18(10);
  expect_optimized_compiled_matches_eager(*m, rnd({1, 3, 64, 64}, 1), rnd({1, 3, 64, 64}, 2));
}

TEST(JitPipeline, MobileNetV2FoldedAndFused) {
  auto m = models::mobilenet_v2(10);
  expect_optimized_compiled_matches_eager(*m, rnd({2, 3, 64, 64}, 3), rnd({2, 3, 64, 64}, 4));
}

// Every inverted-residual block fused (threshold 0): compiled code calls kiln_abi_mbconv_prepared.
TEST(JitPipeline, MobileNetV2WithFusedBlocks) {
  auto m = models::mobilenet_v2(10);
  passes::PipelineOptions po;
  po.mbconv.min_bytes = 0;
  expect_optimized_compiled_matches_eager(*m, rnd({2, 3, 64, 64}, 3), rnd({2, 3, 64, 64}, 4), po,
                                          "kiln.mbconv");
}

// The encoder's attention becomes one kiln.attention (passes/FuseAttention.cpp).
TEST(JitPipeline, TransformerClassifier) {
  auto m = models::transformer_classifier(50, 5);
  expect_optimized_compiled_matches_eager(*m, randint(0, 50, {2, 12}), randint(0, 50, {2, 12}), {},
                                          "kiln.attention");
}

// Self-attention with a causal float mask and a key padding mask (merged by MultiheadAttention
// into one additive [N * H, L, S] mask): fused with the mask as an operand.
class MaskedSelfAttention : public nn::Module {
 public:
  MaskedSelfAttention() : nn::Module("MaskedSelfAttention") {
    mha = register_module("mha", std::make_shared<nn::MultiheadAttention>(16, 4));
    Tensor causal = zeros({6, 6});
    Tensor padding = zeros({3, 6}, TensorOptions(DType::Bool));
    for (int64_t i = 0; i < 6; ++i)
      for (int64_t j = i + 1; j < 6; ++j) causal.data_ptr<float>()[i * 6 + j] = -INFINITY;
    padding.data_ptr<bool>()[0 * 6 + 5] = true;  // batch 0 ignores its last key
    padding.data_ptr<bool>()[2 * 6 + 4] = true;
    attn_mask = register_buffer("attn_mask", causal);
    key_padding_mask = register_buffer("key_padding_mask", padding);
  }
  Tensor forward(const Tensor& x) override {
    return mha->forward(x, x, x, key_padding_mask, false, attn_mask).first;
  }
  std::shared_ptr<nn::MultiheadAttention> mha;
  Tensor attn_mask, key_padding_mask;
};

TEST(JitPipeline, MaskedSelfAttentionFusesIntoOneOp) {
  MaskedSelfAttention m;
  expect_optimized_compiled_matches_eager(m, rnd({6, 3, 16}, 7), rnd({6, 3, 16}, 8), {},
                                          "kiln.attention");
}
