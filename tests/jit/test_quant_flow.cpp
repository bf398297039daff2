// kiln::quant::prepare / calibrate / convert on traced models: the parameters it chooses against
// hand-computed float64 formulas, the saved artifact running integer layers (kiln.qconv2d /
// kiln.qlinear) close to the float model, and the errors for bad calibration data.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "helpers.h"
#include "kiln/jit/compile.h"
#include "kiln/jit/quantize.h"
#include "kiln/jit/save.h"
#include "kiln/kiln.h"
#include "kiln/models.h"
#include "kiln/passes/Passes.h"
#include "kiln/runtime/model.h"
#include "kiln/trace/freeze.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"

namespace kiln {
namespace {

using test::rnd;

// conv-bn-relu, max pool, a residual block (two convs, an add), average pool, flatten, linear.
struct SmallNet : nn::Module {
  SmallNet() : Module("SmallNet") {
    conv = register_module(
        "conv", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(3, 32, 3).padding(1).bias(false)));
    bn = register_module("bn", std::make_shared<nn::BatchNorm2d>(32));
    pool = register_module("pool", std::make_shared<nn::MaxPool2d>(2, 2));
    block = register_module("block", std::make_shared<models::BasicBlock>(32, 32, 1, nullptr));
    gap = register_module("gap", std::make_shared<nn::AdaptiveAvgPool2d>(1));
    fc = register_module("fc", std::make_shared<nn::Linear>(32, 10));
  }
  Tensor forward(const Tensor& x) override {
    Tensor y = (*pool)(relu((*bn)((*conv)(x))));
    y = (*gap)((*block)(y));
    return (*fc)(y.reshape({y.size(0), -1}));
  }
  std::shared_ptr<nn::Conv2d> conv;
  std::shared_ptr<nn::BatchNorm2d> bn;
  std::shared_ptr<nn::MaxPool2d> pool;
  std::shared_ptr<models::BasicBlock> block;
  std::shared_ptr<nn::AdaptiveAvgPool2d> gap;
  std::shared_ptr<nn::Linear> fc;
};

// A trained-looking SmallNet: batch-norm statistics from a few training-mode batches.
std::shared_ptr<SmallNet> small_net() {
  manual_seed(7);
  auto net = std::make_shared<SmallNet>();
  net->train();
  {
    autograd::NoGradGuard no_grad;
    for (uint32_t s = 0; s < 4; ++s) (*net)(rnd({8, 3, 16, 16}, 100 + s));
  }
  net->eval();
  return net;
}

Tensor run_artifact(const std::vector<uint8_t>& bytes, const Tensor& x) {
  rt::Session session(rt::Model::from_bytes(bytes));
  return Tensor(session.run({x.impl()})[0]);
}

bool contains(const std::vector<uint8_t>& bytes, const std::string& s) {
  return std::search(bytes.begin(), bytes.end(), s.begin(), s.end()) != bytes.end();
}

// How many instructions of each kernel an artifact runs.
std::map<std::string, size_t> op_counts(const std::vector<uint8_t>& bytes) {
  std::map<std::string, size_t> ops;
  const auto model = rt::Model::from_bytes(bytes);
  for (const auto& [name, n] : model->stats().op_counts) ops[name] = n;
  return ops;
}

// fn (inputs of x's shape) calibrated on 4 batches from `seed` and converted; the report must
// not list `on_bytes` among the float32 ops.
jit::TracedFunction quantized(const std::function<TensorList(const TensorList&)>& fn,
                              const Tensor& x, uint32_t seed, const std::string& on_bytes) {
  quant::Prepared prepared = quant::prepare(jit::trace(fn, {x}));
  for (uint32_t s = 0; s < 4; ++s) prepared.calibrate({rnd(x.sizes(), seed + s)});
  const std::string report = prepared.report();
  EXPECT_EQ(report.find(on_bytes), std::string::npos) << report;
  return quant::convert(std::move(prepared));
}

// The artifact within quantization noise of the float function and of its QDQ simulation.
void expect_close(const std::function<TensorList(const TensorList&)>& fn, jit::TracedFunction& q,
                  const std::vector<uint8_t>& bytes, const Tensor& x) {
  EXPECT_GT(quant::sqnr(q({x})[0], run_artifact(bytes, x)), 30.0);
  EXPECT_GT(quant::sqnr(fn({x})[0], run_artifact(bytes, x)), 25.0);
}

TEST(QuantFlow, SmallNetRunsInt8CloseToFloat) {
  auto net = small_net();
  autograd::NoGradGuard no_grad;
  const Tensor example = rnd({4, 3, 16, 16}, 1);
  quant::Prepared prepared = quant::prepare(jit::trace(*net, {example}));
  for (uint32_t s = 0; s < 8; ++s) prepared.calibrate({rnd({4, 3, 16, 16}, 200 + s)});
  EXPECT_EQ(prepared.num_batches(), 8);
  ASSERT_EQ(prepared.layers().size(), 4u);  // conv, the block's two convs, fc
  for (const quant::LayerReport& r : prepared.layers()) EXPECT_TRUE(r.quantized) << r.reason;
  const std::string report = prepared.report();
  EXPECT_NE(report.find("4 of 4 conv2d/linear layers int8"), std::string::npos) << report;
  // The pools and the residual add run on the bytes (kiln.qadd, kiln.qavg_pool2d).
  EXPECT_EQ(report.find("kiln.max_pool2d"), std::string::npos) << report;
  EXPECT_EQ(report.find("kiln.add"), std::string::npos) << report;
  EXPECT_EQ(report.find("kiln.adaptive_avg_pool2d"), std::string::npos) << report;

  // Per-value errors: every observed value, then the output, agreeing with the converted
  // function run on its own.
  const Tensor held_out = rnd({4, 3, 16, 16}, 299);
  const std::vector<quant::PointError> errors = prepared.compare({held_out});
  // The output; x, the stem conv output, the pool, the two block convs, the pooled features, fc,
  // the residual add.
  ASSERT_EQ(errors.size(), 1u + 8u);
  EXPECT_EQ(errors[0].name, "output 0");
  EXPECT_EQ(errors[1].name, "input of conv2d #0");
  for (const quant::PointError& e : errors) EXPECT_GT(e.sqnr.db(), 25.0) << e.name;

  jit::TracedFunction q = quant::convert(std::move(prepared));
  EXPECT_NEAR(quant::sqnr((*net)(held_out), q({held_out})[0]), errors[0].sqnr.db(), 0.01);
  const std::vector<uint8_t> bytes = jit::save_to_bytes(q);
  EXPECT_TRUE(contains(bytes, "qconv2d"));
  EXPECT_TRUE(contains(bytes, "qlinear"));
  EXPECT_TRUE(contains(bytes, "qavg_pool2d"));
  {  // nothing runs in float32 between the input's quantize and the output's dequantize
    std::map<std::string, size_t> ops = op_counts(bytes);
    EXPECT_EQ(ops["quantize"], 1u);
    EXPECT_EQ(ops["dequantize"], 1u);
    EXPECT_EQ(ops["qavg_pool2d"], 1u);
    // The block's second convolution and the residual add: one kernel (--kiln-fuse-qconv-add).
    EXPECT_EQ(ops["qconv2d_add"], 1u);
    EXPECT_EQ(ops["qadd"], 0u);
  }
  for (uint32_t s = 0; s < 3; ++s) {
    const Tensor x = rnd({4, 3, 16, 16}, 300 + s);  // inputs calibration did not see
    const Tensor reference = (*net)(x);
    const Tensor simulated = q({x})[0];  // the QDQ graph in float32 (interpreter)
    const Tensor integer = run_artifact(bytes, x);
    EXPECT_GT(quant::sqnr(reference, simulated), 25.0);
    EXPECT_GT(quant::sqnr(reference, integer), 25.0);
    // The integer kernels and the float simulation differ only by requantization rounding.
    EXPECT_GT(quant::sqnr(simulated, integer), 30.0);
  }
}

// The eager entry: a module still in training mode is traced in eval mode (its batch norm
// folded with the running statistics) and left in training mode; calibrating it gives the
// same quantized function as tracing it by hand. quantize_dynamic takes a module too.
TEST(QuantFlow, ModulesAreTracedInEvalModeAndLeftAsTheyWere) {
  auto net = small_net();
  net->train();
  const Tensor example = rnd({4, 3, 16, 16}, 1);
  quant::Prepared from_module = quant::prepare(*net, {example});
  EXPECT_TRUE(net->is_training());
  net->eval();
  quant::Prepared from_trace = [&] {
    autograd::NoGradGuard no_grad;
    return quant::prepare(jit::trace(*net, {example}));
  }();
  for (uint32_t s = 0; s < 4; ++s) {
    from_module.calibrate({rnd({4, 3, 16, 16}, 200 + s)});
    from_trace.calibrate({rnd({4, 3, 16, 16}, 200 + s)});
  }
  EXPECT_EQ(from_module.report(), from_trace.report());
  const Tensor x = rnd({4, 3, 16, 16}, 299);
  const Tensor a = quant::convert(std::move(from_module))({x})[0];
  const Tensor b = quant::convert(std::move(from_trace))({x})[0];
  EXPECT_EQ(test::max_abs_diff(a, b), 0.0);
  autograd::NoGradGuard no_grad;
  EXPECT_GT(quant::sqnr((*net)(x), a), 25.0);

  nn::Linear fc(16, 8);
  fc.train();
  std::vector<quant::LayerReport> layers;
  jit::TracedFunction dyn = quant::quantize_dynamic(fc, {rnd({2, 16}, 3)}, {}, &layers);
  EXPECT_TRUE(fc.is_training());
  ASSERT_EQ(layers.size(), 1u);
  EXPECT_TRUE(layers[0].quantized) << layers[0].reason;
  const Tensor v = rnd({2, 16}, 4);
  EXPECT_GT(quant::sqnr(fc(v), dyn({v})[0]), 30.0);
  net->train();
  EXPECT_THROW(quant::prepare(*net, {rnd({4, 5, 16, 16}, 1)}), Error);  // 5 channels, not 3
  EXPECT_TRUE(net->is_training());  // its mode restored after the error too
}

// A view between two layers (a channel shuffle's transpose) runs on the bytes: the artifact
// quantizes the input once and dequantizes the output once, nothing in between.
TEST(QuantFlow, ViewOpsBetweenLayersRunOnTheBytes) {
  manual_seed(5);
  nn::Conv2d c1(nn::Conv2dOptions(3, 8, 3).padding(1)), c2(nn::Conv2dOptions(8, 4, 3).padding(1));
  autograd::NoGradGuard no_grad;
  auto fn = [&](const TensorList& in) { return TensorList{c2(relu(c1(in[0])).transpose(2, 3))}; };
  jit::TracedFunction q = quantized(fn, rnd({2, 3, 8, 8}, 6), 60, "kiln.transpose");
  const std::vector<uint8_t> bytes = jit::save_to_bytes(q);
  std::map<std::string, size_t> ops = op_counts(bytes);
  EXPECT_EQ(ops["quantize"], 1u);
  EXPECT_EQ(ops["dequantize"], 1u);
  EXPECT_EQ(ops["qconv2d"], 2u);
  expect_close(fn, q, bytes, rnd({2, 3, 8, 8}, 70));
}

// A cat of two int8 branches (an Inception / U-Net join): its inputs and output share one
// observer, so the branches' convolutions requantize to one scale and the cat moves bytes; the
// artifact quantizes once and dequantizes once.
TEST(QuantFlow, CatOfInt8BranchesRunsOnTheBytes) {
  manual_seed(9);
  nn::Conv2d a(nn::Conv2dOptions(3, 6, 3).padding(1)), b(nn::Conv2dOptions(3, 10, 1));
  nn::Conv2d c(nn::Conv2dOptions(16, 4, 3).padding(1));
  autograd::NoGradGuard no_grad;
  auto fn = [&](const TensorList& in) { return TensorList{c(cat({relu(a(in[0])), b(in[0])}, 1))}; };
  jit::TracedFunction q = quantized(fn, rnd({2, 3, 8, 8}, 10), 80, "kiln.cat");
  const std::vector<uint8_t> bytes = jit::save_to_bytes(q);
  std::map<std::string, size_t> ops = op_counts(bytes);
  EXPECT_EQ(ops["quantize"], 1u);
  EXPECT_EQ(ops["dequantize"], 1u);
  EXPECT_EQ(ops["cat"], 1u);
  EXPECT_EQ(ops["qconv2d"], 3u);
  expect_close(fn, q, bytes, rnd({2, 3, 8, 8}, 90));
}

// Weights dominate a wide model's file: the int8 artifact is under 0.3x the float one. The
// ReLU6 between the layers folds into the first (its output range is observed after it).
TEST(QuantFlow, ArtifactHoldsInt8Weights) {
  manual_seed(3);
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Conv2d>(nn::Conv2dOptions(64, 128, 3).padding(1)));
  net->push_back(std::make_shared<nn::ReLU6>());
  net->push_back(std::make_shared<nn::Conv2d>(nn::Conv2dOptions(128, 128, 3).padding(1)));
  net->eval();
  autograd::NoGradGuard no_grad;
  const Tensor x = rnd({1, 64, 8, 8}, 5);
  const size_t fp32 = jit::save_to_bytes(jit::trace(*net, {x})).size();
  quant::Prepared prepared = quant::prepare(jit::trace(*net, {x}));
  prepared.calibrate({rnd({1, 64, 8, 8}, 6)});
  const std::vector<uint8_t> int8 = jit::save_to_bytes(quant::convert(std::move(prepared)));
  EXPECT_LT(static_cast<double>(int8.size()), 0.3 * static_cast<double>(fp32))
      << int8.size() << " vs " << fp32;
  EXPECT_FALSE(contains(int8, "clamp"));
  const Tensor reference = (*net)(x);
  EXPECT_GT(quant::sqnr(reference, run_artifact(int8, x)), 25.0);
}

// One linear layer against the formulas in float64: activation parameters from the observed
// min/max (uint8 affine), weights int8 symmetric per row (scale max|w| / 127.5), bias at
// x_scale * w_scale, the output requantized at the output's observed range.
TEST(QuantFlow, LinearMatchesHandComputedQuantization) {
  manual_seed(11);
  nn::Linear fc(6, 4);
  fc.eval();
  autograd::NoGradGuard no_grad;
  const std::vector<Tensor> batches = {rnd({3, 6}, 21), rnd({3, 6}, 22) * 2.0,
                                       rnd({3, 6}, 23) + 0.5};
  quant::Prepared prepared = quant::prepare(jit::trace(fc, {batches[0]}));
  for (const Tensor& b : batches) prepared.calibrate({b});
  const std::vector<uint8_t> bytes = jit::save_to_bytes(quant::convert(std::move(prepared)));

  auto range = [](const std::vector<Tensor>& ts) {
    double lo = 0, hi = 0;  // the range always holds 0
    for (const Tensor& t : ts) {
      lo = std::min(lo, amin(t).item<double>());
      hi = std::max(hi, amax(t).item<double>());
    }
    const double scale = static_cast<float>((hi - lo) / 255.0);
    return std::pair<double, double>{scale, std::clamp(std::nearbyint(-lo / scale), 0.0, 255.0)};
  };
  std::vector<Tensor> outs;
  for (const Tensor& b : batches) outs.push_back(fc(b));
  const auto [xs, xz] = range(batches);
  const auto [ys, yz] = range(outs);

  const Tensor x = rnd({3, 6}, 24);
  const Tensor got = run_artifact(bytes, x);
  const Tensor w = fc.weight.to(DType::Float64), bias = fc.bias.to(DType::Float64);
  const Tensor xd = x.to(DType::Float64);
  for (int64_t n = 0; n < 3; ++n) {
    for (int64_t o = 0; o < 4; ++o) {
      double amax_w = 0;
      for (int64_t k = 0; k < 6; ++k)
        amax_w = std::max(amax_w, std::abs(w.index({o, k}).item<double>()));
      const double ws = static_cast<float>(amax_w / 127.5);
      double acc = std::nearbyint(bias.index({o}).item<double>() / (xs * ws));
      for (int64_t k = 0; k < 6; ++k) {
        const double xq =
            std::clamp(std::nearbyint(xd.index({n, k}).item<double>() / xs) + xz, 0.0, 255.0);
        const double wq =
            std::clamp(std::nearbyint(w.index({o, k}).item<double>() / ws), -128.0, 127.0);
        acc += (xq - xz) * wq;
      }
      const double yq = std::clamp(std::nearbyint(acc * xs * ws / ys) + yz, 0.0, 255.0);
      // The kernel's float32 multiplier may round an exact half the other way: one step at most.
      EXPECT_NEAR(got.index({n, o}).item<double>(), (yq - yz) * ys, 1.01 * ys)
          << "row " << n << ", output " << o;
    }
  }
}

TEST(QuantFlow, BadCalibrationIsRefusedNamingTheProblem) {
  auto net = small_net();
  autograd::NoGradGuard no_grad;
  quant::Prepared prepared = quant::prepare(jit::trace(*net, {rnd({2, 3, 16, 16}, 1)}));
  try {
    prepared.calibrate({rnd({2, 3, 8, 8}, 2)});
    FAIL() << "a batch of another shape was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected shape [2, 3, 16, 16]"), std::string::npos)
        << e.what();
  }
  Tensor bad = rnd({2, 3, 16, 16}, 3);
  bad.data_ptr<float>()[5] = NAN;
  try {
    prepared.calibrate({bad});
    FAIL() << "NaN was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("observer of the input of conv2d #0"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(quant::convert(std::move(prepared)), Error);  // no batch was calibrated
}

// A constant (zero-range) activation gets a safe scale, and a linear whose weight is an input
// stays float32 with the reason in the report.
TEST(QuantFlow, ConstantActivationsAndFloatLayers) {
  autograd::NoGradGuard no_grad;
  const Tensor w = rnd({4, 6}, 31);
  auto fn = [&](const TensorList& in) {
    return TensorList{linear(relu(in[0]), w, Tensor()), linear(in[0], in[1], Tensor())};
  };
  const TensorList example = {rnd({2, 6}, 32), rnd({4, 6}, 33)};
  quant::Prepared prepared = quant::prepare(jit::trace(fn, example));
  ASSERT_EQ(prepared.layers().size(), 2u);
  EXPECT_TRUE(prepared.layers()[0].quantized);
  EXPECT_FALSE(prepared.layers()[1].quantized);
  EXPECT_NE(prepared.report().find("its weight is not a float32 constant"), std::string::npos);
  const Tensor negative = -abs(rnd({2, 6}, 34));  // relu gives all zeros: a zero range
  prepared.calibrate({negative, example[1]});
  jit::TracedFunction q = quant::convert(std::move(prepared));
  const TensorList out = q({negative, example[1]});
  EXPECT_EQ(amax(abs(out[0])).item<double>(), 0.0);
  EXPECT_LT(test::max_abs_diff(out[1], linear(negative, example[1], Tensor())), 1e-5);
}

// A layer inside kiln::loop (an scf.for body) stays float32, named in the report; the layer
// after the loop is quantized and the converted function still runs.
TEST(QuantFlow, LayersInsideLoopsStayFloat) {
  autograd::NoGradGuard no_grad;
  const Tensor w = rnd({6, 6}, 41) * 0.3, w2 = rnd({3, 6}, 42);
  auto fn = [&](const TensorList& in) {
    TensorList carried = loop(3,
                              [&](const Tensor&, const TensorList& c) {
                                return TensorList{relu(linear(c[0], w, Tensor()))};
                              },
                              {in[0]});
    return TensorList{linear(carried[0], w2, Tensor())};
  };
  const Tensor x = rnd({2, 6}, 43);
  quant::Prepared prepared = quant::prepare(jit::trace(fn, {x}));
  ASSERT_EQ(prepared.layers().size(), 2u);
  EXPECT_FALSE(prepared.layers()[0].quantized);
  EXPECT_EQ(prepared.layers()[0].reason, "it is inside a loop or a branch");
  EXPECT_TRUE(prepared.layers()[1].quantized);
  prepared.calibrate({x});
  EXPECT_GT(prepared.compare({x})[0].sqnr.db(), 20.0);
  jit::TracedFunction q = quant::convert(std::move(prepared));
  EXPECT_THROW(prepared.num_batches(), Error);  // moved from
  EXPECT_GT(quant::sqnr(fn({x})[0], q({x})[0]), 20.0);
}

// SQNR by hand: reference (3, 4), test (3, 3): signal 25, noise 1, 10 log10 25 dB; a second batch
// adds its sums (signal 25 + 4, noise 1 + 4), and a shape mismatch is refused.
TEST(QuantFlow, SqnrSumsOverBatches) {
  const Tensor r = tensor({3.0, 4.0}), t = tensor({3.0, 3.0});
  EXPECT_NEAR(quant::sqnr(r, t), 10 * std::log10(25.0), 1e-12);
  quant::Sqnr e;
  e.add(r, t).add(tensor({2.0}), tensor({0.0}));
  EXPECT_NEAR(e.db(), 10 * std::log10(29.0 / 5.0), 1e-12);
  EXPECT_TRUE(std::isinf(quant::sqnr(r, r)));
  EXPECT_THROW(quant::sqnr(r, tensor({1.0})), Error);
}

TEST(QuantFlow, TrainingStepIsRefused) {
  nn::Linear fc(3, 2);
  EXPECT_THROW(quant::prepare(test::trace_sgd_step(fc, rnd({2, 3}, 1))), Error);
}

// MobileNetV2's int8 depthwise and 1x1 layers run channels-last (--kiln-choose-layout in the
// inference pipeline): the artifact and the JIT-compiled function give the bytes of the
// interpreter, which runs each channels-last convolution as the NCHW one between permutes.
TEST(QuantFlow, ChannelsLastLayersGiveTheNchwBytes) {
  auto net = models::mobilenet_v2(10, 0.25);
  net->eval();
  autograd::NoGradGuard no_grad;
  const Tensor example = rnd({2, 3, 64, 64}, 11);
  quant::Prepared prepared = quant::prepare(jit::trace(*net, {example}));
  for (uint32_t s = 0; s < 4; ++s) prepared.calibrate({rnd({2, 3, 64, 64}, 400 + s)});
  jit::TracedFunction q = quant::convert(std::move(prepared));
  const std::vector<uint8_t> bytes = jit::save_to_bytes(q);
  EXPECT_EQ(op_counts(bytes)["permute"], 2u);  // after the stem, before the pooling

  jit::freeze(q);
  mlir::PassManager pm(&q.context());
  passes::build_inference_pipeline(pm);
  ASSERT_TRUE(mlir::succeeded(pm.run(q.module())));
  EXPECT_NE(q.str().find("channels_last = true"), std::string::npos);
  jit::CompileOptions o;
  o.disk_cache = false;
  const jit::CompiledFunction compiled = jit::compile(q, o);
  for (uint32_t s = 0; s < 2; ++s) {
    const Tensor x = rnd({2, 3, 64, 64}, 500 + s);
    const Tensor interpreted = q({x})[0];
    EXPECT_EQ(test::max_abs_diff(run_artifact(bytes, x), interpreted), 0.0);
    EXPECT_EQ(test::max_abs_diff(compiled({x})[0], interpreted), 0.0);
  }
}

}  // namespace
}  // namespace kiln
