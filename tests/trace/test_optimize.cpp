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
#include "kiln/trace/freeze.h"
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
  expect_close(t({x})[0], fn({x})[0], 1e-6);
  // By reference: writing the weight changes what the frozen function computes.
  {
    autograd::NoGradGuard no_grad;
    mul_(w, 2.0);
  }
  expect_close(t({x})[0], fn({x})[0], 1e-6);
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
    EXPECT_EQ(op.getActivation(), 1);
  });
  EXPECT_EQ(residuals, 1);
  expect_close(t({x})[0], eager);
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
    EXPECT_EQ(op.getActivation(), 1);
    with_residual += !mlir::isa<mlir::NoneType>(op.getResidual().getType());
  });
  EXPECT_EQ(with_residual, 8);
  expect_close(t({x})[0], eager);
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
  run(t.module(), [](mlir::OpPassManager& pm) { passes::build_inference_pipeline(pm); });
  expect_all_fused(t.module());
  int relu6 = 0;
  t.module().walk([&](kiln::ir::Conv2dFusedOp op) { relu6 += op.getActivation() == 2; });
  // Two ReLU6 convs per expanding block (16 of 17 blocks expand), one in block 0, stem and head.
  EXPECT_EQ(relu6, 35);
  EXPECT_EQ(count(t.module(), "kiln.conv2d") + count(t.module(), "kiln.conv2d_fused"), convs);
  expect_close(t({x})[0], eager);
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
}
