// The artifact writer on hand-written modules: frozen constants (dense_resource blobs, dense
// literals, splats stored as one element, i1 masks) become weights, offsets come from
// --kiln-plan-memory when it ran and from the writer's own fallback when it did not; missing
// parameter weights are named.

#include <gtest/gtest.h>

#include <cstring>

#include "helpers.h"
#include "kiln/codegen/artifact.h"
#include "kiln/control_flow.h"
#include "kiln/jit/save.h"
#include "kiln/kiln.h"
#include "kiln/passes/Passes.h"
#include "kiln/runtime/model.h"
#include "kiln/trace/module.h"
#include "kiln/trace/trace.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

namespace kiln {
namespace {

// w = [1, 2, 3, 4] as a little-endian f32 resource blob (alignment word 4 first).
constexpr const char* kModule = R"(
func.func @forward(%x: tensor<4xf32>, %p: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xi1>)
    attributes {kiln.arg_names = ["x", "scale"]} {
  %w = kiln.constant dense_resource<kiln_w> : tensor<4xf32> : tensor<4xf32>
  %m = kiln.constant dense<[true, false, true, true]> : tensor<4xi1> : tensor<4xi1>
  %s = kiln.constant dense<2.0> : tensor<4xf32> : tensor<4xf32>
  %0 = kiln.mul %x, %w : tensor<4xf32>, tensor<4xf32>
  %1 = kiln.add %0, %s : tensor<4xf32>, tensor<4xf32>
  %2 = kiln.mul %1, %p : tensor<4xf32>, tensor<4xf32>
  return %2, %m : tensor<4xf32>, tensor<4xi1>
}
{-#
  dialect_resources: {
    builtin: {
      kiln_w: "0x040000000000803F000000400000404000008040"
    }
  }
#-}
)";

struct Written {
  std::vector<uint8_t> bytes;
};

std::vector<uint8_t> write(bool plan, const std::vector<float>* scale) {
  auto ctx = jit::make_context();
  mlir::ModuleOp m = jit::parse_module(*ctx, kModule);
  if (plan) {
    m->getRegion(0).front().front().setAttr(
        "kiln.num_inputs", mlir::IntegerAttr::get(mlir::IntegerType::get(ctx.get(), 64), 1));
    mlir::PassManager pm(ctx.get());
    pm.addNestedPass<mlir::func::FuncOp>(passes::create_plan_memory_pass());
    EXPECT_TRUE(mlir::succeeded(pm.run(m)));
  }
  codegen::ArtifactOptions o;
  o.num_inputs = 1;
  o.output_names = {"y", "mask"};
  if (scale) {
    o.weights["scale"] = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(scale->data()),
                                                  scale->size() * sizeof(float));
  }
  std::vector<uint8_t> bytes;
  try {
    bytes = codegen::write_artifact(m, o);
  } catch (...) {
    m->erase();
    throw;
  }
  m->erase();
  return bytes;
}

TEST(Writer, ConstantsAndParametersBecomeWeights) {
  const std::vector<float> scale = {0.5f, -1.0f, 2.0f, 10.0f};
  for (bool plan : {false, true}) {
    auto model = rt::Model::from_bytes(write(plan, &scale));
    rt::Session s(model);
    std::vector<float> x = {1.0f, 1.5f, -2.0f, 0.25f};
    TensorImplPtr xt = kiln::from_blob(x.data(), std::vector<int64_t>{4}, DType::Float32);
    auto out = s.run({xt.get()});
    const float w[] = {1, 2, 3, 4};
    for (int i = 0; i < 4; ++i) {
      EXPECT_FLOAT_EQ(out[0]->data_ptr<float>()[i], (x[i] * w[i] + 2.0f) * scale[i]) << i;
    }
    ASSERT_EQ(out[1]->dtype(), DType::Bool);
    const bool mask[] = {true, false, true, true};
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out[1]->data_ptr<bool>()[i], mask[i]);
    // Planned: the in-place chain needs one 16-byte value (64 aligned); unplanned: one per value.
    EXPECT_EQ(model->arena_bytes(), plan ? 64u : 256u) << "plan " << plan;
    EXPECT_EQ(model->outputs()[1].name, "mask");
    // w and the scale parameter (16 bytes each), the mask (4) and the splat 2.0 stored as one
    // element (4 bytes, not 16).
    EXPECT_EQ(model->stats().weight_bytes, 16u + 16u + 4u + 4u);
  }
}

TEST(Writer, MissingParameterWeightsAreNamed) {
  try {
    write(true, nullptr);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no weights given for parameter arguments: scale"),
              std::string::npos)
        << e.what();
  }
}

// Two inverted-residual blocks handing their activation over channels-last, as artifacts written
// before kiln.mbconv recorded its strategy hold them: no `strategy` attribute (the module still
// parses), channels_last_out on the first and channels_last_in on the second. The runtime and the
// reference interpreter run both channels-last (the hand-over implies it) and match the blocks
// computed by eager convs.
constexpr const char* kOldMBConvChain = R"(
func.func @forward(%x: tensor<1x8x8x8xf32>, %we: tensor<24x8x1x1xf32>, %wd: tensor<24x1x3x3xf32>, %wp: tensor<8x24x1x1xf32>) -> tensor<1x8x8x8xf32>
    attributes {kiln.arg_names = ["x", "we", "wd", "wp"]} {
  %n = kiln.none
  %a = kiln.mbconv %x, %we, %n, %wd, %n, %wp, %n, %n {channels_last_out = true, dw_activation = 2 : i64, dw_clamp_max = 6.0 : f64, dw_clamp_min = 0.0 : f64, expand_activation = 2 : i64, expand_clamp_max = 6.0 : f64, expand_clamp_min = 0.0 : f64, padding = array<i64: 1, 1>, project_activation = 0 : i64, project_clamp_max = 0.0 : f64, project_clamp_min = 0.0 : f64, stride = array<i64: 1, 1>} : (tensor<1x8x8x8xf32>, tensor<24x8x1x1xf32>, none, tensor<24x1x3x3xf32>, none, tensor<8x24x1x1xf32>, none, none) -> tensor<1x8x8x8xf32>
  %b = kiln.mbconv %a, %we, %n, %wd, %n, %wp, %n, %n {channels_last_in = true, dw_activation = 2 : i64, dw_clamp_max = 6.0 : f64, dw_clamp_min = 0.0 : f64, expand_activation = 2 : i64, expand_clamp_max = 6.0 : f64, expand_clamp_min = 0.0 : f64, padding = array<i64: 1, 1>, project_activation = 0 : i64, project_clamp_max = 0.0 : f64, project_clamp_min = 0.0 : f64, stride = array<i64: 1, 1>} : (tensor<1x8x8x8xf32>, tensor<24x8x1x1xf32>, none, tensor<24x1x3x3xf32>, none, tensor<8x24x1x1xf32>, none, none) -> tensor<1x8x8x8xf32>
  return %b : tensor<1x8x8x8xf32>
}
)";

TEST(Writer, MBConvBlocksWithoutARecordedStrategyStillRun) {
  manual_seed(11);
  const Tensor x = randn({1, 8, 8, 8}), we = randn({24, 8, 1, 1}) * 0.3;
  const Tensor wd = randn({24, 1, 3, 3}) * 0.3, wp = randn({8, 24, 1, 1}) * 0.3;
  auto ctx = jit::make_context();
  mlir::ModuleOp m = jit::parse_module(*ctx, kOldMBConvChain);
  codegen::ArtifactOptions o;
  o.num_inputs = 1;
  auto bytes_of = [](const Tensor& t) {
    return std::span<const uint8_t>(static_cast<const uint8_t*>(t.impl()->data()),
                                    t.impl()->nbytes());
  };
  o.weights["we"] = bytes_of(we), o.weights["wd"] = bytes_of(wd), o.weights["wp"] = bytes_of(wp);
  std::vector<uint8_t> bytes = codegen::write_artifact(m, o);
  // The reference interpreter reads the absent strategy as banded, the channels-last hand-over
  // as the runtime does.
  const TensorList interpreted = jit::interpret(m, {x, we, wd, wp});
  m->erase();
  auto model = rt::Model::from_bytes(bytes);
  rt::Session session(model);
  auto out = session.run({x.impl()});
  auto block = [&](const Tensor& in) {
    Tensor e = clamp(conv2d(in, we), 0.0, 6.0);
    Tensor d = clamp(conv2d(e, wd, {}, 1, 1, 1, 24), 0.0, 6.0);
    return conv2d(d, wp);
  };
  const Tensor want = block(block(x));
  ASSERT_EQ(interpreted.size(), 1u);
  EXPECT_LE(test::max_abs_diff(interpreted[0], want),
            1e-4 * (1.0 + amax(abs(want)).item<double>()));
  ASSERT_EQ(out.size(), 1u);
  const float* got = out[0]->data_ptr<float>();
  const float* ref = want.data_ptr<float>();
  for (int64_t i = 0; i < want.numel(); ++i)
    EXPECT_NEAR(got[i], ref[i], 1e-4 * (1.0 + std::abs(ref[i]))) << i;
  // The runtime prepared both blocks for the strategy the hand-over implies.
  size_t channels_last = 0;
  for (const auto& [what, n] : model->prepared_stats().counts)
    if (what == "mbconv: channels-last") channels_last = n;
  EXPECT_EQ(channels_last, 2u);
}

// A fused chain without generated code runs its body op by op; the body's intermediates share
// a few blocks (reused once read for the last time, in place where the kernel allows) instead of
// one buffer each: the arena holds the input, the output and at most two such blocks, and the
// results are eager's. (Each of the seven intermediates had a buffer of its own before.)
TEST(Writer, FusedBodiesReuseTheirIntermediatesBlocks) {
  const Tensor x = test::rnd({64, 256}, 31), a = test::rnd({256}, 32), b = test::rnd({64, 1}, 33);
  auto fn = [&](const TensorList& in) {
    const Tensor& v = in[0];
    return TensorList{tanh(sigmoid(relu(v * a + b) * 0.5 - 1.0) + v) * a - b};
  };
  autograd::NoGradGuard no_grad;
  jit::TracedFunction traced = jit::trace(fn, {x});
  auto model = rt::Model::from_bytes(jit::save_to_bytes(traced));
  const size_t bytes = 64 * 256 * sizeof(float);
  EXPECT_LE(model->stats().arena_bytes, 4 * bytes) << model->describe_plan();
  EXPECT_GE(model->stats().num_instructions, 8u);  // the body, op by op
  rt::Session session(model);
  for (uint32_t seed : {31u, 34u}) {  // a second run reuses the arena
    const Tensor xi = test::rnd({64, 256}, seed);
    auto out = session.run({xi.impl()});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_LE(test::max_rel_error(Tensor(out[0]), fn({xi})[0]), 1e-6);
  }
}

// Inside a loop body the fused body's yielded values get space of their own while its pool is
// in use: the pool's next blocks go after them (an LSTM-like cell whose chain yields a value it
// also reads on).
TEST(Writer, FusedBodiesInLoopsKeepWhatTheyYieldApart) {
  auto cell = [](const TensorList& in) {
    return loop(3,
                [&](const Tensor&, const TensorList& c) {
                  const Tensor a = c[0] * in[1];
                  const Tensor cn = a + in[2];
                  return TensorList{cn, tanh(cn) * in[3] + a};
                },
                {in[0], in[0]});
  };
  TensorList in;
  for (uint32_t seed = 1; seed <= 4; ++seed) in.push_back(test::rnd({16, 32}, seed));
  autograd::NoGradGuard no_grad;
  auto model = rt::Model::from_bytes(jit::save_to_bytes(jit::trace(cell, in)));
  rt::Session session(model);
  std::vector<const TensorImpl*> args;
  for (const Tensor& t : in) args.push_back(t.impl());
  auto out = session.run(args);
  const TensorList want = cell(in);
  ASSERT_EQ(out.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_LE(test::max_rel_error(Tensor(out[i]), want[i]), 1e-6) << "output " << i;
}

// A body op runs in place over its operand's block only when that operand has the result's type
// (the loader's exact alias): here the broadcast add reads a [64, 1] value from a block that held
// a [64, 256] one before.
TEST(Writer, FusedBodiesRunInPlaceOnlyOverAnOperandOfTheirType) {
  constexpr const char* kBody = R"(
func.func @forward(%x: tensor<64x256xf32>, %b: tensor<64x1xf32>) -> tensor<64x256xf32>
    attributes {kiln.num_inputs = 2 : i64} {
  %0 = kiln.fused(%x, %b) : (tensor<64x256xf32>, tensor<64x1xf32>) -> tensor<64x256xf32> {
  ^bb0(%p: tensor<64x256xf32>, %q: tensor<64x1xf32>):
    %u = kiln.exp %p : tensor<64x256xf32> -> tensor<64x256xf32>
    %m = kiln.gt %u, %p : tensor<64x256xf32>, tensor<64x256xf32>
    %s = kiln.neg %q : tensor<64x1xf32> -> tensor<64x1xf32>
    %r = kiln.add %s, %p : tensor<64x1xf32>, tensor<64x256xf32>
    %o = kiln.where %m, %r, %p : (tensor<64x256xi1>, tensor<64x256xf32>, tensor<64x256xf32>) -> tensor<64x256xf32>
    kiln.yield %o : tensor<64x256xf32>
  }
  return %0 : tensor<64x256xf32>
}
)";
  auto ctx = jit::make_context();
  mlir::ModuleOp m = jit::parse_module(*ctx, kBody);
  mlir::PassManager pm(ctx.get());
  pm.addNestedPass<mlir::func::FuncOp>(passes::create_plan_memory_pass());
  ASSERT_TRUE(mlir::succeeded(pm.run(m)));
  codegen::ArtifactOptions o;
  o.num_inputs = 2;
  const std::vector<uint8_t> bytes = codegen::write_artifact(m, o);
  m->erase();
  auto model = rt::Model::from_bytes(bytes);
  const Tensor x = test::rnd({64, 256}, 41), b = test::rnd({64, 1}, 42);
  auto out = rt::Session(model).run({x.impl(), b.impl()});
  const Tensor want = where(exp(x) > x, x - b, x);
  EXPECT_LE(test::max_rel_error(Tensor(out[0]), want), 1e-6);
}

}  // namespace
}  // namespace kiln
