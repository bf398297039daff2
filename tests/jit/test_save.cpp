// trace -> kiln::jit::save -> kiln::rt::Model (kiln_runtime alone) -> Session::run, compared with
// the eager forward of the zoo models in eval mode.

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>

#include "helpers.h"
#include "kiln/jit/compile.h"
#include "kiln/jit/save.h"
#include "kiln/kiln.h"
#include "kiln/models.h"
#include "kiln/runtime/model.h"
#include "kiln/runtime/target.h"

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
// rest (the classifier's linear too) for the GEMM; the output stays within the issue's bound (max
// |a - b| / max |b| <= 1e-4).
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
  EXPECT_EQ(gemm, 10u);   // 3 stride-2 3x3, 3 downsample 1x1, layer4's 3, the classifier
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

// What --kiln-fuse-mbconv makes of MobileNetV2's 17 inverted-residual blocks on an input of
// `batch` x 3 x `size` x `size` under these target parameters (`min_bytes` >= 0: that threshold
// instead of the target's): the blocks fused channels-last and fused banded.
struct ExpectedBlocks {
  size_t channels_last = 0, banded = 0;
};
ExpectedBlocks expected_mbconv_blocks(const rt::TargetParams& tp, int64_t batch, int64_t size,
                                      int64_t min_bytes = -1) {
  ExpectedBlocks want;
  const int64_t limit = tp.mbconv_whole_image_bytes;
  const int64_t banded_min = min_bytes >= 0 ? min_bytes : tp.mbconv_banded_min_bytes;
  // (expansion t, output channels c, repeats n, first stride s), after the stride-2 stem.
  int64_t C = 32, H = size / 2;
  for (auto [t, c, n, s] : std::vector<std::array<int64_t, 4>>{{1, 16, 1, 1},
                                                               {6, 24, 2, 2},
                                                               {6, 32, 3, 2},
                                                               {6, 64, 4, 2},
                                                               {6, 96, 3, 1},
                                                               {6, 160, 3, 2},
                                                               {6, 320, 1, 1}})
    for (int64_t i = 0; i < n; ++i) {
      const int64_t E = C * t, Ho = (H - 1) / (i == 0 ? s : 1) + 1;
      const int64_t image = E * H * H * 4, all = batch * image;
      const bool small = image <= limit;
      const bool large = all >= banded_min && (t > 1 || all >= tp.mbconv_no_expand_min_bytes);
      if (small && E * Ho * Ho * 4 <= limit)
        ++want.channels_last;
      else if (small || large)
        ++want.banded;
      C = c, H = Ho;
    }
  return want;
}

ExpectedBlocks prepared_mbconv_blocks(const rt::Model& model) {
  ExpectedBlocks got;
  for (const auto& [what, n] : model.prepared_stats().counts) {
    if (what == "mbconv: channels-last") got.channels_last = n;
    if (what == "mbconv: banded") got.banded = n;
  }
  return got;
}

// The strategy of each fused block is chosen when saving, from the active target's
// mbconv_whole_image_bytes, and recorded in the artifact: at 128x128 (every block fused) one
// block runs in bands (the first expanded one, 96 x 64 x 64 floats) and the others whole images
// channels-last (what the runtime prepared for each, from the artifact alone), and the artifact
// still matches eager.
TEST(Save, MobileNetV2BlocksCarryTheStrategyChosenWhenSaving) {
  manual_seed(7);
  auto m = models::mobilenet_v2(10);
  const Tensor x = randn({1, 3, 128, 128});
  jit::SaveOptions so;
  so.mbconv_min_bytes = 0;
  auto model = rt::Model::from_bytes(jit::save_to_bytes(trace_module(*m, x), so));
  const ExpectedBlocks want = expected_mbconv_blocks(rt::target_params(), 1, 128, 0);
  ASSERT_GT(want.channels_last, 0u);
  ASSERT_GT(want.banded, 0u);
  rt::Session session(model);
  const ExpectedBlocks got = prepared_mbconv_blocks(*model);
  EXPECT_EQ(got.channels_last, want.channels_last);
  EXPECT_EQ(got.banded, want.banded);
  Tensor want_y;
  {
    autograd::NoGradGuard no_grad;
    want_y = m->forward(x);
  }
  auto out = session.run({x.impl()});
  const double scale = amax(abs(want_y.to(DType::Float64))).item<double>();
  EXPECT_LE(max_abs_diff(out[0], want_y) / scale, 1e-4);
}

// Which blocks fuse follows the target description active when saving (KILN_CPU, or
// rt::set_active_target): a small L2 and L3 fuse more blocks in bands than large ones.
TEST(Save, MBConvFusionFollowsTheActiveTarget) {
  manual_seed(8);
  auto m = models::mobilenet_v2(10);
  const Tensor x = randn({2, 3, 128, 128});
  const jit::TracedFunction traced = trace_module(*m, x);
  const rt::TargetDescription saved = rt::active_target();
  std::vector<size_t> fused;
  for (const char* spec : {"host,l2=128K,l3=2M", "host,l2=4M,l3=64M"}) {
    SCOPED_TRACE(spec);
    rt::set_active_target(rt::parse_target(spec));
    auto model = rt::Model::from_bytes(jit::save_to_bytes(traced));
    const ExpectedBlocks want = expected_mbconv_blocks(rt::target_params(), 2, 128);
    rt::Session session(model);
    const ExpectedBlocks got = prepared_mbconv_blocks(*model);
    EXPECT_EQ(got.channels_last, want.channels_last);
    EXPECT_EQ(got.banded, want.banded);
    fused.push_back(got.channels_last + got.banded);
  }
  rt::set_active_target(saved);
  EXPECT_GT(fused[0], fused[1]);
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

// Indexing, scattering, sorting, one-hot and conv_transpose2d: every op of the function has a
// runtime kernel, and the artifact computes what eager does on an input it was not traced on.
TensorList indexing_ops(const TensorList& in) {
  const Tensor& x = in[0];                                   // [4, 6] f32
  const Tensor& idx = in[1];                                 // [3] i64 in [0, 4)
  const Tensor& img = in[2];                                 // [1, 2, 5, 5] f32
  Tensor rows = index_select(x, 0, idx);                     // [3, 6]
  Tensor cols = gather(x, 1, argsort(x, 1).slice(1, 0, 2));  // [4, 2]
  Tensor added = index_add(x, 0, idx, rows * 0.5, 2.0);      // [4, 6]
  Tensor sc = scatter(x, 0, idx.reshape({3, 1}).expand({3, 6}), rows * -1.0);
  Tensor sa = scatter_add(x, 0, idx.reshape({3, 1}).expand({3, 6}), rows);
  Tensor sv = scatter(x, 1, argsort(x, 1, true).slice(1, 0, 1), 7.0);
  Tensor mf = masked_fill(x, gt(x, full_like(x, 0.2)), -3.0);
  Tensor oh = one_hot(idx, 5).to(DType::Float32);  // [3, 5]
  auto [top, top_at] = topk(x, 3, 1, true, true);
  auto [sorted, order] = sort(x, 0, true);
  Tensor w = full({2, 3, 3, 3}, 0.1) + linspace(-1, 1, 54).reshape({2, 3, 3, 3});
  Tensor up = conv_transpose2d(img, w, linspace(0, 1, 3), 2);  // stride 2: [1, 3, 11, 11]
  return {rows, cols, added, sc, sa, sv, mf, oh, top, top_at, sorted, order, up};
}

TEST(Save, IndexingSortingAndConvTransposeRunInTheRuntime) {
  manual_seed(11);
  const Tensor idx = tensor({2.0, 0.0, 3.0}, DType::Int64);
  TensorList traced_on = {randn({4, 6}), idx, randn({1, 2, 5, 5})};
  jit::SaveOptions so;
  jit::TracedFunction traced = jit::trace(indexing_ops, traced_on);
  auto model = rt::Model::from_bytes(jit::save_to_bytes(traced, so));
  rt::Session session(model);
  const TensorList x2 = {randn({4, 6}), tensor({1.0, 3.0, 0.0}, DType::Int64), randn({1, 2, 5, 5})};
  const TensorList want = indexing_ops(x2);
  auto got = session.run({x2[0].impl(), x2[1].impl(), x2[2].impl()});
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i]->sizes(), want[i].sizes()) << "output " << i;
    EXPECT_EQ(got[i]->dtype(), want[i].dtype()) << "output " << i;
    EXPECT_LE(max_abs_diff(got[i], want[i]), 1e-5) << "output " << i;
  }
}

// Losses with their optional tensors (class weights, per-element weights, pos_weight) passed as
// inputs: the trace records them as operands, never drops them, so the interpreter, the saved
// artifact and the JIT compute with the weights of the call, not unweighted losses.
TensorList weighted_losses(const TensorList& in) {
  const Tensor& logits = in[0];      // [4, 3]
  const Tensor& target = in[1];      // [4] i64
  const Tensor& classes = in[2];     // [3] class weights, also pos_weight
  const Tensor& bce_target = in[3];  // [4, 3] in [0, 1]
  const Tensor& bce_weight = in[4];  // [4, 3]
  return {cross_entropy(logits, target, classes),
          cross_entropy(logits, target, classes, -100, Reduction::None, 0.1),
          nll_loss(log_softmax(logits, 1), target, classes, -100, Reduction::Sum),
          binary_cross_entropy_with_logits(logits, bce_target, bce_weight, classes),
          binary_cross_entropy_with_logits(logits, bce_target, {}, classes, Reduction::None)};
}

TEST(Save, LossWeightsAreOperandsNotDropped) {
  manual_seed(12);
  auto inputs = [](uint32_t seed) {
    manual_seed(seed);
    return TensorList{randn({4, 3}), tensor({0.0, 2.0, 1.0, 2.0}, DType::Int64),
                      rand({3}) * 2.0 + 0.1, rand({4, 3}), rand({4, 3}) + 0.5};
  };
  const TensorList a = inputs(1), b = inputs(2);
  jit::TracedFunction traced = jit::trace(weighted_losses, a);
  for (const char* op :
       {"kiln.cross_entropy", "kiln.nll_loss", "kiln.binary_cross_entropy_with_logits"})
    EXPECT_NE(traced.str().find(op), std::string::npos) << op;
  const TensorList want = weighted_losses(b);
  // Unweighted losses differ from the weighted ones: the test sees a dropped weight.
  EXPECT_GT(std::abs(cross_entropy(b[0], b[1]).item<double>() - want[0].item<double>()), 1e-3);

  const TensorList interpreted = traced(b);
  auto model = rt::Model::from_bytes(jit::save_to_bytes(traced));
  rt::Session session(model);
  std::vector<const TensorImpl*> args;
  for (const Tensor& t : b) args.push_back(t.impl());
  auto saved = session.run(std::span<const TensorImpl* const>(args));
  jit::CompileOptions copts;
  copts.disk_cache = false;
  const TensorList compiled = jit::compile(traced, copts)(b);
  ASSERT_EQ(saved.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_LE(max_abs_diff(interpreted[i].impl_ptr(), want[i]), 1e-6) << "interpreter, loss " << i;
    EXPECT_LE(max_abs_diff(saved[i], want[i]), 1e-6) << "artifact, loss " << i;
    EXPECT_LE(max_abs_diff(compiled[i].impl_ptr(), want[i]), 1e-6) << "JIT, loss " << i;
  }
}

// The random ops carry their generator state as an in-out value of the artifact: each run
// draws what the next eager call would have drawn from the state the trace started from.
TensorList random_ops(const TensorList& in) {
  Tensor kept = dropout(in[0], 0.3, true);
  Tensor u = rand({3, 4}) * 2.0 - 1.0;
  Tensor n = randn({5}) + in[0].sum();
  Tensor k = randint(-2, 9, {6});
  return {kept, u, n, k};
}

TEST(Save, RandomOpsDrawFreshValuesEachRun) {
  manual_seed(13);
  const Tensor x = randn({16, 9});
  manual_seed(21);
  const TensorList eager1 = random_ops({x}), eager2 = random_ops({x});
  manual_seed(21);
  jit::TracedFunction traced = jit::trace(random_ops, {x});
  auto model = rt::Model::from_bytes(jit::save_to_bytes(traced, {}));
  rt::Session session(model);
  auto run1 = session.run({x.impl()});
  auto run2 = session.run({x.impl()});
  ASSERT_EQ(run1.size(), eager1.size());
  for (size_t i = 0; i < eager1.size(); ++i) {
    EXPECT_EQ(run1[i]->dtype(), eager1[i].dtype()) << "output " << i;
    EXPECT_EQ(max_abs_diff(run1[i], eager1[i]), 0.0) << "output " << i;
    EXPECT_EQ(max_abs_diff(run2[i], eager2[i]), 0.0) << "output " << i;
    EXPECT_GT(max_abs_diff(run1[i], Tensor(run2[i])), 0.0)
        << "output " << i << " repeated its draw";
  }
}

// A runtime that registers only some kernels (a program linking what its models need): saving
// for it fails before writing, with one error naming every missing op and where it is.
TEST(Save, OpsTheRuntimeLacksAreListedBeforeWriting) {
  rt::Registry small;
  for (const char* name : {"index_select", "argsort", "slice", "scatter"})
    small.add(*rt::builtin_registry().find(name));
  manual_seed(12);
  TensorList in = {randn({4, 6}), tensor({2.0, 0.0, 3.0}, DType::Int64), randn({1, 2, 5, 5})};
  jit::SaveOptions so;
  so.registry = &small;
  try {
    jit::save_to_bytes(jit::trace(indexing_ops, in), so);
    FAIL() << "saved for a runtime without gather";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("the runtime has no kernel for"), std::string::npos) << msg;
    for (const char* op : {"kiln.gather (op #", "kiln.topk (op #", "kiln.conv_transpose2d (op #",
                           "kiln.one_hot (op #", "kiln.masked_fill (op #"})
      EXPECT_NE(msg.find(op), std::string::npos) << op << " missing in: " << msg;
    EXPECT_EQ(msg.find("kiln.index_select"), std::string::npos) << msg;
  }
}

// conv_transpose2d, cat, interpolate (bilinear and nearest) and a topk head, run by the runtime.
TEST(Save, TinyUNetMatchesEager) {
  test::TinyUNet m;
  expect_matches(m, randn({2, 3, 16, 16}), randn({2, 3, 16, 16}), 1e-5);
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
