// End-to-end checks of the optimization passes: trace (eager), freeze, run the passes, interpret,
// and compare with eager (or with the unoptimized module). Tolerance: max |a - b| <= 1e-4 *
// max |b| (float32; folding batch norm into weights reorders the arithmetic).
#include <gtest/gtest.h>

#include <random>

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

#include "kiln/ir/KilnDialect.h"
#include "kiln/kiln.h"
#include "kiln/models.h"
#include "kiln/passes/Passes.h"
#include "kiln/trace/eliminate_gradients.h"
#include "kiln/trace/freeze.h"
#include "kiln/trace/module.h"
#include "kiln/trace/trace.h"

using namespace kiln;

namespace {

Tensor rnd(Dims sizes, uint32_t seed, double scale = 1.0) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, static_cast<float>(scale));
  Tensor t = kiln::empty(sizes);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_ptr<float>()[i] = dist(gen);
  return t;
}

double max_abs(const Tensor& a) {
  return amax(abs(a.to(DType::Float64))).item<double>();
}
double max_abs_diff(const Tensor& a, const Tensor& b) {
  return amax(abs(a.to(DType::Float64) - b.to(DType::Float64))).item<double>();
}
void expect_close(const Tensor& got, const Tensor& want, double rel = 1e-4) {
  ASSERT_EQ(got.sizes(), want.sizes());
  EXPECT_LE(max_abs_diff(got, want), rel * std::max(1e-6, max_abs(want)))
      << "max |want| = " << max_abs(want);
}

int count(mlir::ModuleOp m, llvm::StringRef name) {
  int n = 0;
  m.walk([&](mlir::Operation* op) { n += op->getName().getStringRef() == name; });
  return n;
}

void run(mlir::ModuleOp m, const std::function<void(mlir::OpPassManager&)>& build) {
  mlir::PassManager pm(m.getContext());
  build(pm);
  ASSERT_TRUE(mlir::succeeded(pm.run(m)));
}

// Batch-norm statistics and affine parameters away from the identity, so folding them is visible.
void randomize_norms(nn::Module& model, uint32_t seed) {
  autograd::NoGradGuard no_grad;
  std::mt19937 gen(seed);
  auto fill = [&](Tensor t, double lo, double hi) {
    std::uniform_real_distribution<float> d(static_cast<float>(lo), static_cast<float>(hi));
    for (int64_t i = 0; i < t.numel(); ++i) t.data_ptr<float>()[i] = d(gen);
  };
  auto ends = [](const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() &&
           s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  auto buffers = model.named_buffers();
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (ends(buffers[i].first, "running_mean")) fill(buffers[i].second, -0.2, 0.2);
    if (ends(buffers[i].first, "running_var")) fill(buffers[i].second, 0.5, 1.5);
  }
  auto params = model.named_parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].second.dim() != 1) continue;
    if (ends(params[i].first, "weight")) fill(params[i].second, 0.5, 1.5);
    if (ends(params[i].first, "bias")) fill(params[i].second, -0.2, 0.2);
  }
}

jit::TracedFunction trace_module(nn::Module& model, const Tensor& x) {
  jit::TraceOptions options;
  auto params = model.named_parameters();
  for (size_t i = 0; i < params.size(); ++i) options.named_captures.push_back(params[i]);
  auto buffers = model.named_buffers();
  for (size_t i = 0; i < buffers.size(); ++i) options.named_captures.push_back(buffers[i]);
  return jit::trace([&](const TensorList& in) { return TensorList{model(in[0])}; }, {x}, options);
}

// Every conv ends up with its batch norm folded and its activation (and residual add) fused: no
// batch_norm, relu or clamp is left anywhere; the plain conv2d ops that remain feed a fused conv
// as its residual (ResNet's downsample) or had no activation to absorb (MobileNet's projections).
void expect_all_fused(mlir::ModuleOp m) {
  EXPECT_EQ(count(m, "kiln.batch_norm"), 0);
  EXPECT_EQ(count(m, "kiln.relu"), 0);
  EXPECT_EQ(count(m, "kiln.clamp"), 0);
  EXPECT_GT(count(m, "kiln.conv2d_fused"), 0);
  m.walk([](kiln::ir::Conv2dOp conv) {
    for (mlir::Operation* user : conv->getUsers()) {
      EXPECT_FALSE(mlir::isa<kiln::ir::BatchNormOp>(user));
    }
  });
}

}  // namespace

TEST(Optimize, FreezeReferencesTheCallersWeights) {
  Tensor w = rnd({8, 4}, 1), b = rnd({8}, 2);
  auto fn = [&](const TensorList& x) { return TensorList{relu(linear(x[0], w, b))}; };
  Tensor x = rnd({3, 4}, 3);
  jit::TraceOptions options;
  options.named_captures = {{"fc.weight", w}, {"fc.bias", b}};
  jit::TracedFunction t = jit::trace(fn, {x}, options);
  jit::freeze(t);
  auto forward = t.module().lookupSymbol<mlir::func::FuncOp>("forward");
  EXPECT_EQ(forward.getNumArguments(), 1u);
  EXPECT_TRUE(t.captures().empty());
  // The constants point at the tensors' own storage: no copy, no literal.
  std::vector<const void*> blobs;
  t.module().walk([&](kiln::ir::ConstantOp c) {
    if (auto r = mlir::dyn_cast<mlir::DenseResourceElementsAttr>(c.getValue()))
      blobs.push_back(r.getRawHandle().getBlob()->getData().data());
  });
  ASSERT_EQ(blobs.size(), 2u);
  EXPECT_TRUE(llvm::is_contained(blobs, w.data()));
  EXPECT_TRUE(llvm::is_contained(blobs, b.data()));
  const Tensor x2 = rnd({3, 4}, 4);  // an input it was not traced on
  expect_close(t({x})[0], fn({x})[0], 1e-6);
  expect_close(t({x2})[0], fn({x2})[0], 1e-6);
  // The printed module carries the bytes (dialect_resources) and parses back on its own.
  {
    auto ctx = jit::make_context();
    mlir::ModuleOp parsed = jit::parse_module(*ctx, t.str());
    expect_close(jit::interpret(parsed, {x})[0], fn({x})[0], 1e-6);
    expect_close(jit::interpret(parsed, {x2})[0], fn({x2})[0], 1e-6);
    parsed->erase();
  }
  // By reference: writing the weight changes what the frozen function computes.
  {
    autograd::NoGradGuard no_grad;
    mul_(w, 2.0);
  }
  expect_close(t({x})[0], fn({x})[0], 1e-6);
  expect_close(t({x2})[0], fn({x2})[0], 1e-6);
}

TEST(Optimize, FreezeRejectsBadInput) {
  Tensor w = rnd({8, 4}, 1);
  auto fn = [&](const TensorList& x) { return TensorList{linear(x[0], w)}; };
  jit::TraceOptions options;
  options.named_captures = {{"w", w}};
  jit::TracedFunction t = jit::trace(fn, {rnd({3, 4}, 3)}, options);
  std::vector<float> small(4);
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(&t.context(), [&](mlir::Diagnostic& d) {
    diagnostics += d.str();
    return mlir::success();
  });
  EXPECT_FALSE(passes::freeze(t.module(), {{"w", {small.data(), small.size() * 4}}}));
  EXPECT_NE(diagnostics.find("weight 'w' has 16 bytes"), std::string::npos) << diagnostics;
  diagnostics.clear();
  EXPECT_FALSE(passes::freeze(t.module(), {{"nope", {small.data(), 16}}}));
  EXPECT_NE(diagnostics.find("no @forward argument is named 'nope'"), std::string::npos)
      << diagnostics;
}

TEST(Optimize, SmallResidualConvNetMatchesEager) {
  // conv-bn-relu, then conv-bn + identity -> relu (the ResNet block), then a linear head + relu.
  auto c1 = std::make_shared<nn::Conv2d>(nn::Conv2dOptions(4, 4, 3).padding(1).bias(false));
  auto bn1 = std::make_shared<nn::BatchNorm2d>(4);
  auto c2 = std::make_shared<nn::Conv2d>(nn::Conv2dOptions(4, 4, 3).padding(1).bias(false));
  auto bn2 = std::make_shared<nn::BatchNorm2d>(4);
  auto fc = std::make_shared<nn::Linear>(4 * 6 * 6, 5);
  auto net = std::make_shared<nn::Sequential>(
      std::vector<std::shared_ptr<nn::Module>>{c1, bn1, c2, bn2, fc});
  randomize_norms(*net, 7);
  net->eval();
  auto forward = [&](const Tensor& x) {
    Tensor h = relu((*bn1)((*c1)(x)));
    h = relu((*bn2)((*c2)(h)) + x);
    return relu((*fc)(h.flatten(1)));
  };
  Tensor x = rnd({2, 4, 6, 6}, 8);
  Tensor eager = forward(x);
  jit::TraceOptions options;
  auto params = net->named_parameters();
  for (size_t i = 0; i < params.size(); ++i) options.named_captures.push_back(params[i]);
  auto buffers = net->named_buffers();
  for (size_t i = 0; i < buffers.size(); ++i) options.named_captures.push_back(buffers[i]);
  jit::TracedFunction t =
      jit::trace([&](const TensorList& in) { return TensorList{forward(in[0])}; }, {x}, options);
  jit::freeze(t);
  run(t.module(), [](mlir::OpPassManager& pm) { passes::build_inference_pipeline(pm); });
  expect_all_fused(t.module());
  EXPECT_EQ(count(t.module(), "kiln.conv2d_fused"), 2) << t.str();
  EXPECT_EQ(count(t.module(), "kiln.linear_fused"), 1) << t.str();
  // The second conv took the block input as its residual, with relu.
  int residuals = 0;
  t.module().walk([&](kiln::ir::Conv2dFusedOp op) {
    residuals += !mlir::isa<mlir::NoneType>(op.getResidual().getType());
    EXPECT_EQ(op.getActivation(), ir::Activation::Relu);
  });
  EXPECT_EQ(residuals, 1);
  expect_close(t({x})[0], eager);
  // An input it was not traced on.
  Tensor x2 = rnd({2, 4, 6, 6}, 9);
  expect_close(t({x2})[0], forward(x2));
}

TEST(Optimize, ElementwiseChainsFuseAndMatchEager) {
  Tensor w = rnd({6, 5}, 11, 0.5), b = rnd({6}, 12);
  auto fn = [&](const TensorList& in) {
    Tensor h = matmul(in[0], w.t());
    // tanh-GELU written out: 0.5 h (1 + tanh(0.79788 (h + 0.044715 h^3))) + b
    Tensor g = h * 0.5 * (tanh((h + h * h * h * 0.044715) * 0.7978845608) + 1.0);
    return TensorList{sigmoid(g + b) * 2.0 - 1.0, exp(h)};
  };
  Tensor x = rnd({4, 5}, 13);
  TensorList eager = fn({x});
  jit::TraceOptions options;
  options.named_captures = {{"w", w}, {"b", b}};
  jit::TracedFunction t = jit::trace(fn, {x}, options);
  const int before = count(t.module(), "kiln.mul") + count(t.module(), "kiln.add");
  jit::freeze(t);
  run(t.module(), [](mlir::OpPassManager& pm) { passes::build_inference_pipeline(pm); });
  EXPECT_GE(before, 6);
  EXPECT_EQ(count(t.module(), "kiln.fused"), 1) << t.str();
  // Outside the region only the matmul (and its transposed weight) remain.
  int outside = 0;
  auto fwd = t.module().lookupSymbol<mlir::func::FuncOp>("forward");
  for (mlir::Operation& op : fwd.getBody().front()) {
    outside += mlir::isa<kiln::ir::MulOp, kiln::ir::AddOp, kiln::ir::TanhOp>(op);
  }
  EXPECT_EQ(outside, 0) << t.str();
  TensorList got = t({x});
  expect_close(got[0], eager[0], 1e-5);
  expect_close(got[1], eager[1], 1e-5);
  // An input it was not traced on.
  Tensor x2 = rnd({4, 5}, 14);
  TensorList eager2 = fn({x2}), got2 = t({x2});
  expect_close(got2[0], eager2[0], 1e-5);
  expect_close(got2[1], eager2[1], 1e-5);
}

TEST(Optimize, EliminatedTrainingStepMatchesForwardTrace) {
  TensorList p = {rnd({16, 8}, 71, 0.3).requires_grad_(), rnd({16}, 74).requires_grad_(),
                  rnd({3, 16}, 72, 0.3).requires_grad_()};
  auto forward = [&](const Tensor& x) { return linear(relu(linear(x, p[0], p[1])), p[2]); };
  jit::TraceOptions options;
  options.named_captures = {{"fc1.weight", p[0]}, {"fc1.bias", p[1]}, {"fc2.weight", p[2]}};
  Tensor x = rnd({4, 8}, 73);
  Tensor y = tensor({0.0, 2.0, 1.0, 2.0}, DType::Int64);
  // The forward-only reference, traced before the step changes the parameters.
  TensorList snapshot;
  for (const Tensor& w : p) snapshot.push_back(w.detach().clone());
  jit::TracedFunction fwd =
      jit::trace([&](const TensorList& in) { return TensorList{forward(in[0])}; }, {x}, options);
  jit::TracedFunction step = jit::trace(
      [&](const TensorList& in) {
        Tensor loss = cross_entropy(forward(in[0]), in[1]);
        loss.backward();
        autograd::NoGradGuard no_grad;
        for (Tensor& w : p) {
          sub_(w, w.grad(), 0.1);
          w.set_grad(Tensor());
        }
        return TensorList{loss.detach()};
      },
      {x, y}, options);
  ASSERT_EQ(step.mutated_captures().size(), 3u);
  run(step.module(), [](mlir::OpPassManager& pm) {
    pm.addPass(passes::create_eliminate_gradients_pass(/*drop_loss_head=*/true));
    pm.addNestedPass<mlir::func::FuncOp>(passes::create_cleanup_pass());
  });
  auto f = step.module().lookupSymbol<mlir::func::FuncOp>("forward");
  EXPECT_EQ(count(step.module(), "kiln.cross_entropy"), 0);
  EXPECT_EQ(count(step.module(), "kiln.cross_entropy_backward"), 0);
  EXPECT_EQ(count(step.module(), "kiln.matmul"), 0) << step.str();  // gradient GEMMs are gone
  EXPECT_EQ(f.getNumResults(), 1u);
  // Same signature as the forward-only trace: (input0, fc1.weight, fc1.bias, fc2.weight).
  // (Each trace has its own MLIR context: compare the printed attributes.)
  auto names = [](mlir::ModuleOp m) {
    std::string s;
    llvm::raw_string_ostream os(s);
    m.lookupSymbol<mlir::func::FuncOp>("forward")->getAttr("kiln.arg_names").print(os);
    return s;
  };
  EXPECT_EQ(names(step.module()), names(fwd.module()));
  EXPECT_EQ(names(fwd.module()), R"(["input0", "fc1.weight", "fc1.bias", "fc2.weight"])");
  EXPECT_EQ(count(step.module(), "kiln.linear"), count(fwd.module(), "kiln.linear"));
  TensorList args = {x};
  args.insert(args.end(), snapshot.begin(), snapshot.end());
  Tensor a = jit::interpret(step.module(), args)[0];
  Tensor b = jit::interpret(fwd.module(), args)[0];
  expect_close(a, b, 1e-6);
  // Both on an input they were not traced on, and against eager with the same parameters.
  Tensor x2 = rnd({4, 8}, 75);
  TensorList args2 = {x2};
  args2.insert(args2.end(), snapshot.begin(), snapshot.end());
  Tensor a2 = jit::interpret(step.module(), args2)[0];
  Tensor b2 = jit::interpret(fwd.module(), args2)[0];
  Tensor want2;
  {
    autograd::NoGradGuard no_grad;
    want2 = linear(relu(linear(x2, snapshot[0], snapshot[1])), snapshot[2]);
  }
  expect_close(a2, want2, 1e-6);
  expect_close(b2, want2, 1e-6);
}

TEST(Optimize, ResNet18EveryConvFoldedAndFused) {
  auto model = models::resnet18(10);
  randomize_norms(*model, 21);
  model->eval();
  Tensor x = rnd({1, 3, 64, 64}, 22);
  Tensor eager;
  {
    autograd::NoGradGuard no_grad;
    eager = (*model)(x);
  }
  jit::TracedFunction t = trace_module(*model, x);
  EXPECT_EQ(count(t.module(), "kiln.conv2d"), 20);
  jit::freeze(t);
  run(t.module(), [](mlir::OpPassManager& pm) { passes::build_inference_pipeline(pm); });
  expect_all_fused(t.module());
  // 17 convs carry relu (8 with the block's residual); the 3 downsample convs feed a residual.
  EXPECT_EQ(count(t.module(), "kiln.conv2d_fused"), 17) << t.str();
  EXPECT_EQ(count(t.module(), "kiln.conv2d"), 3);
  int with_residual = 0;
  t.module().walk([&](kiln::ir::Conv2dFusedOp op) {
    EXPECT_EQ(op.getActivation(), ir::Activation::Relu);
    with_residual += !mlir::isa<mlir::NoneType>(op.getResidual().getType());
  });
  EXPECT_EQ(with_residual, 8);
  expect_close(t({x})[0], eager);
  // An input it was not traced on.
  Tensor x2 = rnd({1, 3, 64, 64}, 23);
  Tensor eager2;
  {
    autograd::NoGradGuard no_grad;
    eager2 = (*model)(x2);
  }
  expect_close(t({x2})[0], eager2);
}

TEST(Optimize, MobileNetV2EveryConvFoldedAndFused) {
  auto model = models::mobilenet_v2(10);
  randomize_norms(*model, 31);
  model->eval();
  Tensor x = rnd({1, 3, 64, 64}, 32);
  Tensor eager;
  {
    autograd::NoGradGuard no_grad;
    eager = (*model)(x);
  }
  jit::TracedFunction t = trace_module(*model, x);
  const int convs = count(t.module(), "kiln.conv2d");
  jit::freeze(t);
  // Blocks left as convs (at 64x64 every block is small enough for kiln.mbconv by default).
  passes::PipelineOptions no_blocks;
  no_blocks.mbconv.small_max_bytes = -1;
  run(t.module(),
      [&](mlir::OpPassManager& pm) { passes::build_inference_pipeline(pm, no_blocks); });
  expect_all_fused(t.module());
  int relu6 = 0;
  t.module().walk(
      [&](kiln::ir::Conv2dFusedOp op) { relu6 += op.getActivation() == ir::Activation::Relu6; });
  t.module().walk(
      [&](kiln::ir::Conv2dAvgpoolOp op) { relu6 += op.getActivation() == ir::Activation::Relu6; });
  // Two ReLU6 convs per expanding block (16 of 17 blocks expand), one in block 0, stem and head
  // (the head with its pool: kiln.conv2d_avgpool).
  EXPECT_EQ(relu6, 35);
  EXPECT_EQ(count(t.module(), "kiln.conv2d_avgpool"), 1);
  EXPECT_EQ(count(t.module(), "kiln.adaptive_avg_pool2d"), 0);
  EXPECT_EQ(count(t.module(), "kiln.conv2d") + count(t.module(), "kiln.conv2d_fused") +
                count(t.module(), "kiln.conv2d_avgpool"),
            convs);
  expect_close(t({x})[0], eager);
  // An input it was not traced on.
  Tensor x2 = rnd({1, 3, 64, 64}, 33);
  Tensor eager2;
  {
    autograd::NoGradGuard no_grad;
    eager2 = (*model)(x2);
  }
  expect_close(t({x2})[0], eager2);

  // The default pipeline: all 17 inverted-residual blocks become kiln.mbconv (channels-last in
  // the runtime), the stem stays a fused conv, the head and its pool one kiln.conv2d_avgpool.
  jit::TracedFunction blocks = trace_module(*model, x);
  jit::freeze(blocks);
  run(blocks.module(), [](mlir::OpPassManager& pm) { passes::build_inference_pipeline(pm); });
  EXPECT_EQ(count(blocks.module(), "kiln.mbconv"), 17);
  EXPECT_EQ(count(blocks.module(), "kiln.conv2d_fused"), 1);
  EXPECT_EQ(count(blocks.module(), "kiln.conv2d_avgpool"), 1);
  // They hand their activations over channels-last (every residual is its block's input): the
  // first writes channels-last, the last reads it, the 15 between do both.
  int cl_in = 0, cl_out = 0;
  blocks.module().walk([&](mlir::Operation* op) {
    cl_in += op->hasAttr("channels_last_in");
    cl_out += op->hasAttr("channels_last_out");
  });
  EXPECT_EQ(cl_in, 16);
  EXPECT_EQ(cl_out, 16);
  EXPECT_EQ(count(blocks.module(), "kiln.conv2d"), 0);
  expect_close(blocks({x})[0], eager);
  expect_close(blocks({x2})[0], eager2);
}

TEST(Optimize, TrainingPipelineKeepsTheStepExact) {
  // A compiled training step must still update the parameters exactly like eager: fusion may only
  // touch values that backward does not read.
  auto make = [] {
    return TensorList{rnd({16, 8}, 81, 0.3).requires_grad_(), rnd({16}, 82).requires_grad_(),
                      rnd({3, 16}, 83, 0.3).requires_grad_()};
  };
  auto step = [](TensorList& p) {
    return [&p](const TensorList& in) {
      Tensor h = tanh(linear(in[0], p[0], p[1]) * 0.5 + 0.1);
      Tensor loss = cross_entropy(linear(relu(h), p[2]), in[1]);
      loss.backward();
      autograd::NoGradGuard no_grad;
      for (Tensor& w : p) {
        sub_(w, w.grad(), 0.1);
        w.set_grad(Tensor());
      }
      return TensorList{loss.detach()};
    };
  };
  Tensor x = rnd({4, 8}, 84);
  Tensor y = tensor({0.0, 2.0, 1.0, 2.0}, DType::Int64);
  TensorList eager_params = make();
  auto eager_step = step(eager_params);
  eager_step({x, y});
  Tensor eager_loss = eager_step({x, y})[0];

  TensorList traced_params = make();
  auto traced_step = step(traced_params);
  jit::TraceOptions options;
  options.named_captures = {
      {"w1", traced_params[0]}, {"b1", traced_params[1]}, {"w2", traced_params[2]}};
  jit::TracedFunction t = jit::trace(traced_step, {x, y}, options);  // step 1, eagerly
  run(t.module(), [](mlir::OpPassManager& pm) { passes::build_training_pipeline(pm); });
  EXPECT_GE(count(t.module(), "kiln.fused"), 1) << t.str();
  Tensor loss = t({x, y})[0];  // step 2 through the optimized module
  expect_close(loss, eager_loss, 1e-5);
  for (size_t i = 0; i < 3; ++i) expect_close(traced_params[i], eager_params[i], 1e-5);
  // Step 3 on a new batch (other values and targets).
  Tensor x2 = rnd({4, 8}, 85);
  Tensor y2 = tensor({2.0, 1.0, 0.0, 0.0}, DType::Int64);
  Tensor eager_loss2 = eager_step({x2, y2})[0];
  expect_close(t({x2, y2})[0], eager_loss2, 1e-5);
  for (size_t i = 0; i < 3; ++i) expect_close(traced_params[i], eager_params[i], 1e-5);
}

namespace {

// Eval-mode trace of a sequence model on int64 tokens, frozen and optimized, against eager.
// Returns the optimized module's text for op-level checks.
std::string expect_sequence_model_optimizes(nn::Module& model, int64_t vocab, uint32_t seed) {
  model.eval();
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int64_t> token(0, vocab - 1);
  Tensor tokens(kiln::empty(Dims{2, 7}, DType::Int64));
  for (int64_t i = 0; i < tokens.numel(); ++i) tokens.data_ptr<int64_t>()[i] = token(gen);
  Tensor eager;
  {
    autograd::NoGradGuard no_grad;
    eager = model(tokens);
  }
  jit::TracedFunction t = trace_module(model, tokens);
  jit::freeze(t);
  run(t.module(), [](mlir::OpPassManager& pm) { passes::build_inference_pipeline(pm); });
  expect_close(t({tokens})[0], eager);
  // Other tokens of the same shape.
  Tensor tokens2(kiln::empty(Dims{2, 7}, DType::Int64));
  for (int64_t i = 0; i < tokens2.numel(); ++i) tokens2.data_ptr<int64_t>()[i] = token(gen);
  Tensor eager2;
  {
    autograd::NoGradGuard no_grad;
    eager2 = model(tokens2);
  }
  expect_close(t({tokens2})[0], eager2);
  std::string text;
  llvm::raw_string_ostream os(text);
  t.module().lookupSymbol<mlir::func::FuncOp>("forward").print(os);
  return text;
}

int occurrences(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST(Optimize, TransformerClassifierMatchesEager) {
  auto model = models::transformer_classifier(50, 3, 16, 2, 2);
  const std::string text = expect_sequence_model_optimizes(*model, 50, 41);
  // Per layer: the FFN's first linear takes the GELU (4), the second the residual add.
  EXPECT_EQ(occurrences(text, "kiln.linear_fused"), 4) << text;
  EXPECT_EQ(occurrences(text, "activation = 4 : i64"), 2) << text;
  EXPECT_EQ(occurrences(text, "kiln.gelu"), 0) << text;
}

TEST(Optimize, LstmClassifierMatchesEager) {
  auto model = models::lstm_classifier(50, 3, 8, 16);
  const std::string text = expect_sequence_model_optimizes(*model, 50, 42);
  // The gate arithmetic (sigmoid, tanh, products, sums) of each step becomes fused regions.
  EXPECT_GE(occurrences(text, "kiln.fused"), 1) << text;
}

TEST(Optimize, StandaloneBatchNormBecomesScaleShift) {
  // Batch norm after a pool has no weights to fold into: it becomes x * scale + shift, fused with
  // the relu that follows into one elementwise region.
  auto bn = std::make_shared<nn::BatchNorm2d>(3);
  randomize_norms(*bn, 51);
  bn->eval();
  auto fn = [&](const TensorList& in) { return TensorList{relu((*bn)(max_pool2d(in[0], 2)))}; };
  Tensor x = rnd({2, 3, 6, 6}, 52);
  Tensor eager = fn({x})[0];
  jit::TraceOptions options;
  auto params = bn->named_parameters();
  for (size_t i = 0; i < params.size(); ++i) options.named_captures.push_back(params[i]);
  auto buffers = bn->named_buffers();
  for (size_t i = 0; i < buffers.size(); ++i) options.named_captures.push_back(buffers[i]);
  jit::TracedFunction t = jit::trace(fn, {x}, options);
  jit::freeze(t);
  run(t.module(), [](mlir::OpPassManager& pm) { passes::build_inference_pipeline(pm); });
  EXPECT_EQ(count(t.module(), "kiln.batch_norm"), 0) << t.str();
  EXPECT_EQ(count(t.module(), "kiln.fused"), 1) << t.str();
  expect_close(t({x})[0], eager, 1e-6);
  Tensor x2 = rnd({2, 3, 6, 6}, 53);  // an input it was not traced on
  expect_close(t({x2})[0], fn({x2})[0], 1e-6);
}

namespace {

// A traced training step (train-mode batch norm and dropout, SGD with momentum) turned into the
// inference function: gradients, optimizer and loss head eliminated, batch norm switched to its
// running statistics and dropout to identity, then frozen and optimized. It must compute what the
// eager model computes in eval mode with the parameters and statistics the step left behind.
// Counts kept for the caller's expectations.
struct StepCounts {
  int dropouts_in_step = -1;  // kiln.dropout ops in the traced training step
  int conv2d_fused = -1;      // in the optimized inference module
  int mbconv = -1;            // in the optimized inference module
  int conv2d_avgpool = -1;    // in the optimized inference module
};
void expect_training_step_to_inference(nn::Module& net, StepCounts* counts) {
  nn::Module* model = &net;
  model->train();
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.001).momentum(0.9));
  jit::TraceOptions options;
  auto params = model->named_parameters();
  for (size_t i = 0; i < params.size(); ++i) options.named_captures.push_back(params[i]);
  auto buffers = model->named_buffers();
  for (size_t i = 0; i < buffers.size(); ++i) options.named_captures.push_back(buffers[i]);
  Tensor x = rnd({4, 3, 32, 32}, 63);
  Tensor y = tensor({1.0, 7.0, 0.0, 3.0}, DType::Int64);
  auto train_step = [&](const TensorList& in) {
    opt.zero_grad();
    Tensor loss = cross_entropy(model->forward(in[0]), in[1]);
    loss.backward();
    opt.step();
    return TensorList{loss.detach()};
  };
  train_step({x, y});  // the optimizer creates its momentum buffers on the first (eager) step
  jit::TracedFunction step = jit::trace(train_step, {x, y}, options);
  ASSERT_GT(step.mutated_captures().size(), params.size());  // parameters, statistics, momentum
  mlir::ModuleOp m = step.module();
  counts->dropouts_in_step = count(m, "kiln.dropout");
  run(m, [](mlir::OpPassManager& pm) {
    pm.addPass(passes::create_eliminate_gradients_pass(/*drop_loss_head=*/true));
  });
  EXPECT_EQ(count(m, "kiln.dropout"), 0);
  EXPECT_EQ(count(m, "kiln.dropout_mask"), 0);
  int backward_ops = 0;
  m.walk([&](mlir::Operation* op) {
    backward_ops += op->getName().getStringRef().ends_with("_backward");
  });
  EXPECT_EQ(backward_ops, 0);
  EXPECT_EQ(count(m, "kiln.cross_entropy"), 0);
  // Bind the current parameters and statistics by name and optimize as for inference.
  auto f = m.lookupSymbol<mlir::func::FuncOp>("forward");
  auto names = f->getAttrOfType<mlir::ArrayAttr>("kiln.arg_names");
  ASSERT_EQ(names.size(), f.getNumArguments());
  passes::WeightMap weights;
  TensorList keep;
  for (auto name : names.getAsValueRange<mlir::StringAttr>()) {
    if (name == "input0") continue;
    const Tensor* t = params.find(name.str());
    if (!t) t = buffers.find(name.str());
    ASSERT_NE(t, nullptr) << "argument " << name.str() << " is neither a parameter nor a buffer";
    keep.push_back(t->detach().contiguous());
    weights[name.str()] = {keep.back().data(), keep.back().numel() * keep.back().element_size()};
  }
  ASSERT_TRUE(passes::freeze(m, weights));
  run(m, [](mlir::OpPassManager& pm) { passes::build_inference_pipeline(pm); });
  expect_all_fused(m);
  model->eval();
  Tensor eager;
  {
    autograd::NoGradGuard no_grad;
    eager = model->forward(x);
  }
  expect_close(jit::interpret(m, {x})[0], eager);
  // An input it was not traced on.
  Tensor x2 = rnd({4, 3, 32, 32}, 64);
  Tensor eager2;
  {
    autograd::NoGradGuard no_grad;
    eager2 = model->forward(x2);
  }
  expect_close(jit::interpret(m, {x2})[0], eager2);
  counts->conv2d_fused = count(m, "kiln.conv2d_fused");
  counts->mbconv = count(m, "kiln.mbconv");
  counts->conv2d_avgpool = count(m, "kiln.conv2d_avgpool");
}

}  // namespace

TEST(Optimize, ResNetTrainingStepToFrozenInference) {
  manual_seed(61);
  auto model = models::resnet18(10);
  randomize_norms(*model, 62);
  StepCounts counts;
  expect_training_step_to_inference(*model, &counts);
  EXPECT_EQ(counts.conv2d_fused, 17);
  EXPECT_EQ(counts.mbconv, 0);
}

TEST(Optimize, MobileNetTrainingStepToFrozenInference) {
  // MobileNetV2's classifier has Dropout(0.2): in the step it draws a mask from the trace's random
  // state; the inference function must drop both.
  manual_seed(65);
  auto model = models::mobilenet_v2(10);
  randomize_norms(*model, 66);
  StepCounts counts;
  expect_training_step_to_inference(*model, &counts);
  EXPECT_EQ(counts.dropouts_in_step, 1);
  // Every block small enough to run as one kiln.mbconv; the stem stays a fused conv, the head and
  // its pool become one kiln.conv2d_avgpool.
  EXPECT_EQ(counts.mbconv, 17);
  EXPECT_EQ(counts.conv2d_fused, 1);
  EXPECT_EQ(counts.conv2d_avgpool, 1);
}

TEST(Optimize, TrainingPipelineOnResNetStepMatchesEager) {
  // The training pipeline on a CNN step (conv/batch-norm backward in the trace): the optimized
  // step must move parameters and running statistics as eager steps do. Batch 8 and a small
  // learning rate keep the problem well conditioned (at batch 2 layer4's batch norm normalizes
  // two values, and one rounding difference in the update grows to 1e-2 within two steps).
  auto make = [] {
    manual_seed(71);
    auto m = models::resnet18(10);
    randomize_norms(*m, 72);
    m->train();
    return m;
  };
  auto traced_model = make(), eager_model = make();
  optim::SGD traced_opt(traced_model->parameters(), optim::SGDOptions(0.002).momentum(0.9));
  optim::SGD eager_opt(eager_model->parameters(), optim::SGDOptions(0.002).momentum(0.9));
  auto step = [](nn::Module& m, optim::Optimizer& opt) {
    return [&m, &opt](const TensorList& in) {
      opt.zero_grad();
      Tensor loss = cross_entropy(m.forward(in[0]), in[1]);
      loss.backward();
      opt.step();
      return TensorList{loss.detach()};
    };
  };
  Tensor x = rnd({8, 3, 32, 32}, 73);
  Tensor y = tensor({3.0, 5.0, 0.0, 9.0, 1.0, 1.0, 7.0, 2.0}, DType::Int64);
  step(*traced_model, traced_opt)({x, y});
  step(*eager_model, eager_opt)({x, y});
  jit::TraceOptions options;
  auto params = traced_model->named_parameters();
  for (size_t i = 0; i < params.size(); ++i) options.named_captures.push_back(params[i]);
  auto buffers = traced_model->named_buffers();
  for (size_t i = 0; i < buffers.size(); ++i) options.named_captures.push_back(buffers[i]);
  jit::TracedFunction t = jit::trace(step(*traced_model, traced_opt), {x, y}, options);
  step(*eager_model, eager_opt)({x, y});  // tracing ran step 2 eagerly
  run(t.module(), [](mlir::OpPassManager& pm) { passes::build_training_pipeline(pm); });
  EXPECT_GE(count(t.module(), "kiln.fused"), 1);
  for (uint32_t k = 0; k < 2; ++k) {
    Tensor xk = rnd({8, 3, 32, 32}, 80 + k);
    Tensor traced_loss = t({xk, y})[0];
    Tensor eager_loss = step(*eager_model, eager_opt)({xk, y})[0];
    expect_close(traced_loss, eager_loss, 1e-4);
  }
  TensorList a = traced_model->parameters(), b = eager_model->parameters();
  for (size_t i = 0; i < a.size(); ++i) expect_close(a[i], b[i], 1e-4);
  auto ba = traced_model->named_buffers(), bb = eager_model->named_buffers();
  for (size_t i = 0; i < ba.size(); ++i) expect_close(ba[i].second, bb[i].second, 1e-4);
}

TEST(Optimize, TracedTrainingStepBecomesAFrozenInferenceCallable) {
  // The C++ path a user takes: trace a training step, keep its inference function, freeze it.
  TensorList p = {rnd({16, 8}, 91, 0.3).requires_grad_(), rnd({16}, 92).requires_grad_(),
                  rnd({3, 16}, 93, 0.3).requires_grad_()};
  auto forward = [&](const Tensor& x) { return linear(relu(linear(x, p[0], p[1])), p[2]); };
  jit::TraceOptions options;
  options.named_captures = {{"fc1.weight", p[0]}, {"fc1.bias", p[1]}, {"fc2.weight", p[2]}};
  Tensor x = rnd({4, 8}, 94);
  Tensor y = tensor({0.0, 2.0, 1.0, 2.0}, DType::Int64);
  jit::TracedFunction t = jit::trace(
      [&](const TensorList& in) {
        Tensor loss = cross_entropy(forward(in[0]), in[1]);
        loss.backward();
        autograd::NoGradGuard no_grad;
        for (Tensor& w : p) {
          sub_(w, w.grad(), 0.1);
          w.set_grad(Tensor());
        }
        return TensorList{loss.detach()};
      },
      {x, y}, options);
  jit::eliminate_gradients(t, /*drop_loss_head=*/true);
  EXPECT_EQ(t.num_inputs(), 1u);  // the targets are gone
  EXPECT_TRUE(t.mutated_captures().empty());
  Tensor want, want2;
  const Tensor x2 = rnd({4, 8}, 95);  // an input it was not traced on
  {
    autograd::NoGradGuard no_grad;
    want = forward(x);
    want2 = forward(x2);
  }
  TensorList before = p;
  for (Tensor& w : before) w = w.detach().clone();
  expect_close(t({x})[0], want, 1e-6);
  expect_close(t({x2})[0], want2, 1e-6);
  for (size_t i = 0; i < p.size(); ++i) expect_close(p[i], before[i], 0.0);  // nothing written
  jit::freeze(t);
  expect_close(t({x})[0], want, 1e-6);
  expect_close(t({x2})[0], want2, 1e-6);
  EXPECT_THROW(t({x, y}), kiln::Error);  // the old calling convention is refused
}

TEST(Optimize, ControlFlowRegionsOptimizeInPlace) {
  // kiln::cond / kiln::loop become scf.if / scf.for: bn folding, epilogue fusion and elementwise
  // fusion work inside the branch and loop bodies, and the result still follows both branches.
  auto conv1 = std::make_shared<nn::Conv2d>(nn::Conv2dOptions(3, 4, 3).padding(1).bias(false));
  auto bn1 = std::make_shared<nn::BatchNorm2d>(4);
  auto conv2 = std::make_shared<nn::Conv2d>(nn::Conv2dOptions(4, 4, 1).bias(false));
  auto bn2 = std::make_shared<nn::BatchNorm2d>(4);
  auto net = std::make_shared<nn::Sequential>(
      std::vector<std::shared_ptr<nn::Module>>{conv1, bn1, conv2, bn2});
  randomize_norms(*net, 101);
  net->eval();
  auto fn = [&](const TensorList& in) {
    Tensor h = relu((*bn1)((*conv1)(in[0])));
    return cond(
        gt(in[0].mean(), zeros({})),
        [&] {
          return loop(3,
                      [](const Tensor&, const TensorList& c) {
                        return TensorList{tanh(c[0] * 0.5 + 0.1) * 2.0};
                      },
                      {h});
        },
        [&] { return TensorList{relu((*bn2)((*conv2)(h))) * 2.0 + 1.0}; });
  };
  Tensor x = abs(rnd({1, 3, 6, 6}, 102)) + 0.1;
  jit::TraceOptions options;
  auto params = net->named_parameters();
  for (size_t i = 0; i < params.size(); ++i) options.named_captures.push_back(params[i]);
  auto buffers = net->named_buffers();
  for (size_t i = 0; i < buffers.size(); ++i) options.named_captures.push_back(buffers[i]);
  jit::TracedFunction t = jit::trace(fn, {x}, options);
  jit::freeze(t);
  run(t.module(), [](mlir::OpPassManager& pm) { passes::build_inference_pipeline(pm); });
  EXPECT_EQ(count(t.module(), "kiln.batch_norm"), 0) << t.str();
  EXPECT_EQ(count(t.module(), "kiln.conv2d_fused"), 2) << t.str();
  EXPECT_GE(count(t.module(), "kiln.fused"), 2) << t.str();  // the loop body and the else tail
  // x and -x take one branch each; x2 and -x2 (other values, the same signs: the same branches)
  // show an op left out of either branch's trace.
  Tensor x2 = abs(rnd({1, 3, 6, 6}, 103)) + 0.1;
  for (const Tensor& in : {x, -x, x2, -x2}) {
    Tensor want;
    {
      autograd::NoGradGuard no_grad;
      want = fn({in})[0];
    }
    expect_close(t({in})[0], want, 1e-5);
  }
}

// The QDQ form of an int8 conv layer (quantize the input, dequantize it and the int8 weights, a
// float conv with bias and relu, quantize the result) folds into one kiln.qconv2d in the inference
// pipeline, and the folded module agrees with the float QDQ graph to within one output step
// (the float graph rounds a real-valued sum; the integer kernel an exact sum with an int32 bias).
TEST(Optimize, QdqConvFoldsIntoIntegerConv) {
  Tensor wq = (rnd({6, 3, 3, 3}, 40) * 120.0).to(DType::Int8);
  Tensor bias = rnd({6}, 41, 0.5);
  auto forward = [&](const Tensor& x) {
    const Tensor xs = full(Dims{}, 0.03), xz = full(Dims{}, 128, TensorOptions(DType::Int32));
    const Tensor ws = tensor({0.01, 0.02, 0.005, 0.015, 0.01, 0.03});
    const Tensor wz = zeros({6}, TensorOptions(DType::Int32));
    const Tensor ys = full(Dims{}, 0.05), yz = full(Dims{}, 2, TensorOptions(DType::Int32));
    const Tensor xf = dequantize(quantize(x, xs, xz, DType::UInt8), xs, xz);
    const Tensor y = relu(conv2d(xf, dequantize(wq, ws, wz, 0), bias, 1, 1));
    return dequantize(quantize(y, ys, yz, DType::UInt8), ys, yz);
  };
  Tensor x = rnd({2, 3, 7, 7}, 42, 2.0);
  jit::TraceOptions options;
  options.named_captures = {{"wq", wq}, {"bias", bias}};
  jit::TracedFunction t =
      jit::trace([&](const TensorList& in) { return TensorList{forward(in[0])}; }, {x}, options);
  jit::freeze(t);
  run(t.module(), [](mlir::OpPassManager& pm) { passes::build_inference_pipeline(pm); });
  EXPECT_EQ(count(t.module(), "kiln.qconv2d"), 1) << t.str();
  EXPECT_EQ(count(t.module(), "kiln.conv2d"), 0) << t.str();
  EXPECT_EQ(count(t.module(), "kiln.conv2d_fused"), 0) << t.str();
  for (uint32_t seed : {42u, 43u}) {
    Tensor xi = rnd({2, 3, 7, 7}, seed, 2.0);
    const Tensor want = forward(xi), got = t({xi})[0];
    EXPECT_LE(max_abs_diff(got, want), 0.05 + 1e-6) << "seed " << seed;
    EXPECT_GT(max_abs(want), 1.0);  // not all clamped
  }
}
