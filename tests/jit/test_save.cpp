// trace -> kiln::jit::save -> kiln::rt::Model (kiln_runtime alone) -> Session::run, compared with
// the eager forward of the zoo models in eval mode.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "kiln/jit/save.h"
#include "kiln/kiln.h"
#include "kiln/models.h"
#include "kiln/runtime/model.h"

namespace kiln {
namespace {

double max_abs_diff(const TensorImplPtr& a, const Tensor& b) {
  Tensor bf = b.to(DType::Float64).contiguous();
  Tensor af = Tensor(a).to(DType::Float64).contiguous();
  return amax(abs(af - bf)).item<double>();
}

struct Exported {
  std::shared_ptr<const rt::Model> model;
  Tensor eager;
};

jit::TracedFunction trace_module(nn::Module& module, const Tensor& x) {
  module.eval();
  autograd::NoGradGuard no_grad;
  jit::TraceOptions options;
  for (const auto& [name, t] : module.named_parameters())
    options.named_captures.push_back({name, t});
  for (const auto& [name, t] : module.named_buffers()) options.named_captures.push_back({name, t});
  options.warn_on_read_back = false;
  return jit::trace([&](const TensorList& in) { return TensorList{module.forward(in[0])}; }, {x},
                    options);
}

// Traces module.forward(x) in eval mode with parameters and buffers as named captures.
Exported export_module(nn::Module& module, const Tensor& x) {
  jit::TracedFunction traced = trace_module(module, x);
  jit::SaveOptions so;
  so.input_names = {"x"};
  so.output_names = {"logits"};
  const std::vector<uint8_t> bytes = jit::save_to_bytes(traced, so);
  autograd::NoGradGuard no_grad;
  return {rt::Model::from_bytes(bytes), module.forward(x)};
}

// Traced and saved on x, run on x and then on x2 (same shape and dtype, other values) against
// eager on each: an op the tracer did not record would replay as a constant captured from x.
void expect_matches(nn::Module& module, const Tensor& x, const Tensor& x2, double tol) {
  Exported e = export_module(module, x);
  rt::Session session(e.model);
  auto out = session.run({x.impl()});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0]->sizes(), e.eager.sizes());
  EXPECT_LE(max_abs_diff(out[0], e.eager), tol);
  // Planning reuses memory: the arena is no larger than the sum of the values.
  const rt::ModelStats& st = e.model->stats();
  EXPECT_LE(st.arena_bytes, st.naive_bytes);
  // A second run on the same arena gives the same answer.
  auto again = session.run({x.impl()});
  EXPECT_EQ(max_abs_diff(again[0], Tensor(out[0])), 0.0);
  // The second input, on the same session.
  ASSERT_EQ(x2.sizes(), x.sizes());
  ASSERT_GT(amax(abs(x2.to(DType::Float64) - x.to(DType::Float64))).item<double>(), 0.0);
  Tensor want2;
  {
    autograd::NoGradGuard no_grad;
    want2 = module.forward(x2);
  }
  auto out2 = session.run({x2.impl()});
  ASSERT_EQ(out2.size(), 1u);
  EXPECT_EQ(out2[0]->sizes(), want2.sizes());
  EXPECT_LE(max_abs_diff(out2[0], want2), tol) << "second input";
}

TEST(Save, MlpMatchesEager) {
  manual_seed(1);
  auto m = models::mlp({32, 64, 10});
  expect_matches(*m, randn({4, 32}), randn({4, 32}), 1e-5);
}

TEST(Save, LeNetMatchesEager) {
  manual_seed(2);
  auto m = models::lenet();
  expect_matches(*m, randn({2, 1, 28, 28}), randn({2, 1, 28, 28}), 1e-4);
}

TEST(Save, ResNet18MatchesEager) {
  manual_seed(3);
  auto m = models::resnet18(10);
  expect_matches(*m, randn({1, 3, 64, 64}), randn({1, 3, 64, 64}), 1e-3);
}

// Full-size ResNet-18: the executor prepares its 3x3 stride-1 convs for Winograd F(4x4, 3x3) in
// layers 1-3 (layer 4's 7x7 maps have too few tiles), the stem for the direct kernel and packs the
// rest for the GEMM; the output stays within the bound (max |a - b| / max |b| <= 1e-4).
TEST(Save, ResNet18At224WithWinogradMatchesEager) {
  manual_seed(8);
  auto m = models::resnet18(10);
  Exported e = export_module(*m, randn({1, 3, 224, 224}));
  const Tensor x = randn({1, 3, 224, 224});
  Tensor want;
  {
    autograd::NoGradGuard no_grad;
    want = m->forward(x);
  }
  rt::Session session(e.model);
  auto out = session.run({x.impl()});
  const double scale = amax(abs(want.to(DType::Float64))).item<double>();
  EXPECT_LE(max_abs_diff(out[0], want) / scale, 1e-4);
  const rt::PreparedStats ps = e.model->prepared_stats();
  ASSERT_TRUE(ps.ready);
  size_t winograd = 0, gemm = 0, direct = 0;
  for (const auto& [what, n] : ps.counts) {
    if (what.find("winograd") != std::string::npos) winograd += n;
    if (what.find("gemm") != std::string::npos) gemm += n;
    if (what.find("direct") != std::string::npos) direct += n;
  }
  EXPECT_EQ(winograd,
            10u);  // layer1: 4, layer2: 3, layer3: 3 (the 13 stride-1 3x3 convs minus layer4's)
  EXPECT_EQ(gemm, 9u);    // 3 stride-2 3x3, 3 downsample 1x1, layer4's 3
  EXPECT_EQ(direct, 1u);  // the 7x7 stem (3 input channels)
  EXPECT_GT(ps.bytes, e.model->stats().weight_bytes / 2);
}

TEST(Save, MobileNetV2MatchesEager) {
  manual_seed(4);
  auto m = models::mobilenet_v2(10);
  // The fused blocks' intermediates live in arena bytes no tensor holds at that instruction
  // (ScratchLease): the outputs still match eager, run after run.
  const int64_t leased = scratch_bytes_from_leases();
  expect_matches(*m, randn({1, 3, 64, 64}), randn({1, 3, 64, 64}), 1e-3);
  EXPECT_GT(scratch_bytes_from_leases(), leased);
}

// Every inverted-residual block as one fused instruction (kiln inspect: op "mbconv"), on the
// runtime alone.
TEST(Save, MobileNetV2WithFusedBlocksMatchesEager) {
  manual_seed(4);
  auto m = models::mobilenet_v2(10);
  const Tensor x = randn({2, 3, 64, 64});
  jit::TracedFunction traced = trace_module(*m, x);
  jit::SaveOptions so;
  so.mbconv_min_bytes = 0;
  auto model = rt::Model::from_bytes(jit::save_to_bytes(traced, so));
  size_t fused = 0;
  for (const auto& [op, n] : model->stats().op_counts)
    if (op == "mbconv") fused = n;
  EXPECT_EQ(fused, 17u);  // MobileNetV2's 17 inverted-residual blocks
  Tensor want;
  {
    autograd::NoGradGuard no_grad;
    want = m->forward(x);
  }
  rt::Session session(model);
  auto out = session.run({x.impl()});
  const double scale = amax(abs(want.to(DType::Float64))).item<double>();
  EXPECT_LE(max_abs_diff(out[0], want) / scale, 1e-4);
  // A second input with other values, on the same session.
  const Tensor x2 = randn({2, 3, 64, 64});
  Tensor want2;
  {
    autograd::NoGradGuard no_grad;
    want2 = m->forward(x2);
  }
  auto out2 = session.run({x2.impl()});
  const double scale2 = amax(abs(want2.to(DType::Float64))).item<double>();
  EXPECT_LE(max_abs_diff(out2[0], want2) / scale2, 1e-4) << "second input";
}

TEST(Save, TransformerClassifierMatchesEager) {
  manual_seed(5);
  auto m = models::transformer_classifier(50, 3);
  expect_matches(*m, randint(0, 50, {2, 12}), randint(0, 50, {2, 12}), 1e-4);
}

TEST(Save, LstmClassifierMatchesEager) {
  manual_seed(6);
  auto m = models::lstm_classifier(50, 3);
  expect_matches(*m, randint(0, 50, {2, 7}), randint(0, 50, {2, 7}), 1e-4);
}

TEST(Save, FileRoundTripAndGuards) {
  manual_seed(7);
  auto m = models::mlp({8, 4});
  Tensor x = randn({3, 8});
  jit::TracedFunction traced = trace_module(*m, x);
  const std::string path = ::testing::TempDir() + "/kiln_save_test.kiln";
  jit::SaveOptions so;
  so.name = "tiny";
  so.input_names = {"x"};
  jit::save(traced, path, so);
  auto model = rt::Model::load(path);
  EXPECT_EQ(model->name(), "tiny");
  rt::Session s(model);
  Tensor bad = randn({3, 9});
  try {
    s.run({bad.impl()});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("input \"x\": expected [3,8] f32, got [3,9] f32"),
              std::string::npos)
        << e.what();
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace kiln
