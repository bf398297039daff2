// report_passes: what the inference pipeline does to the zoo's CNNs (ResNet-18, MobileNetV2;
// eval mode, random weights with batch-norm statistics away from identity, batch 1, 3x224x224).
// Prints, per model: ops before/after (top level of @forward, kiln.constant/kiln.none excluded;
// a kiln.fused region counts once, its body separately), convs and how each was fused, batch
// norms left, the memory plan's arena vs the sum of all intermediates, and the max abs / relative
// error of the optimized module against the unoptimized
// one, both run by the reference interpreter. Relative error = max|opt - ref| / max|ref|. Then a
// traced ResNet-18 training step: op counts after the training pipeline and after gradient
// elimination.
// Exits non-zero if any batch_norm, relu or clamp survives or the relative error exceeds 1e-4.
//
//   build/release/bench/report_passes [--size 224]

#include <cstdio>
#include <cstring>
#include <map>
#include <random>

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
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

struct Counts {
  int top = 0, in_regions = 0;
  std::map<std::string, int> by_name;
};

Counts count_ops(mlir::ModuleOp m) {
  Counts c;
  auto fn = m.lookupSymbol<mlir::func::FuncOp>("forward");
  fn.walk([&](mlir::Operation* op) {
    llvm::StringRef name = op->getName().getStringRef();
    if (name == "kiln.constant" || name == "kiln.none" || name == "func.return" ||
        name == "kiln.yield" || op == fn.getOperation())
      return;
    c.by_name[name.str()]++;
    if (op->getParentOp() == fn.getOperation()) {
      ++c.top;
    } else {
      ++c.in_regions;
    }
  });
  return c;
}

void randomize_norms(nn::Module& model, uint32_t seed) {
  autograd::NoGradGuard no_grad;
  std::mt19937 gen(seed);
  auto fill = [&](Tensor t, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    for (int64_t i = 0; i < t.numel(); ++i) t.data_ptr<float>()[i] = d(gen);
  };
  auto ends = [](const std::string& s, const char* suffix) {
    const size_t n = std::strlen(suffix);
    return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
  };
  auto buffers = model.named_buffers();
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (ends(buffers[i].first, "running_mean")) fill(buffers[i].second, -0.2f, 0.2f);
    if (ends(buffers[i].first, "running_var")) fill(buffers[i].second, 0.5f, 1.5f);
  }
  auto params = model.named_parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].second.dim() != 1) continue;
    if (ends(params[i].first, "weight")) fill(params[i].second, 0.5f, 1.5f);
    if (ends(params[i].first, "bias")) fill(params[i].second, -0.2f, 0.2f);
  }
}

bool report(const char* label, nn::Module& model, int64_t size) {
  randomize_norms(model, 1234);
  model.eval();
  Tensor x = randn(Dims{1, 3, size, size});
  jit::TraceOptions options;
  auto params = model.named_parameters();
  for (size_t i = 0; i < params.size(); ++i) options.named_captures.push_back(params[i]);
  auto buffers = model.named_buffers();
  for (size_t i = 0; i < buffers.size(); ++i) options.named_captures.push_back(buffers[i]);
  auto fn = [&](const TensorList& in) { return TensorList{model(in[0])}; };
  jit::TracedFunction reference = jit::trace(fn, {x}, options);
  jit::TracedFunction optimized = jit::trace(fn, {x}, options);
  const Counts before = count_ops(reference.module());

  jit::freeze(optimized);
  mlir::PassManager pm(&optimized.context());
  passes::build_inference_pipeline(pm);
  if (mlir::failed(pm.run(optimized.module()))) {
    std::fprintf(stderr, "%s: the inference pipeline failed\n", label);
    return false;
  }
  const Counts after = count_ops(optimized.module());

  int relu = 0, relu6 = 0, none = 0, residual = 0;
  optimized.module().walk([&](kiln::ir::Conv2dFusedOp op) {
    relu += op.getActivation() == ir::Activation::Relu;
    relu6 += op.getActivation() == ir::Activation::Relu6;
    none += op.getActivation() == ir::Activation::None;
    residual += !mlir::isa<mlir::NoneType>(op.getResidual().getType());
  });
  int plain_conv_feeding_residual = 0;
  optimized.module().walk([&](kiln::ir::Conv2dOp op) {
    for (mlir::OpOperand& use : op->getUses()) {
      auto fused = mlir::dyn_cast<kiln::ir::Conv2dFusedOp>(use.getOwner());
      plain_conv_feeding_residual += fused && use.getOperandNumber() == 3;
    }
  });
  auto get = [](const Counts& c, const char* n) {
    auto it = c.by_name.find(n);
    return it == c.by_name.end() ? 0 : it->second;
  };

  Tensor ref = reference({x})[0];
  Tensor opt = optimized({x})[0];
  const double abs_err = amax(abs(opt.to(DType::Float64) - ref.to(DType::Float64))).item<double>();
  const double scale = amax(abs(ref.to(DType::Float64))).item<double>();
  const double rel_err = abs_err / scale;

  std::printf("%s (1x3x%lldx%lld, eval)\n", label, static_cast<long long>(size),
              static_cast<long long>(size));
  std::printf("  ops before: %d (conv2d %d, batch_norm %d, relu %d, clamp %d, add %d)\n",
              before.top, get(before, "kiln.conv2d"), get(before, "kiln.batch_norm"),
              get(before, "kiln.relu"), get(before, "kiln.clamp"), get(before, "kiln.add"));
  std::printf(
      "  ops after:  %d top-level + %d inside kiln.fused (conv2d_fused %d, conv2d %d, "
      "linear_fused %d, linear %d, fused regions %d)\n",
      after.top, after.in_regions, get(after, "kiln.conv2d_fused"), get(after, "kiln.conv2d"),
      get(after, "kiln.linear_fused"), get(after, "kiln.linear"), get(after, "kiln.fused"));
  std::printf(
      "  convs: %d with bn folded; fused epilogues: relu %d, relu6 %d, none %d, with "
      "residual %d; plain conv2d feeding a residual: %d of %d\n",
      get(before, "kiln.conv2d"), relu, relu6, none, residual, plain_conv_feeding_residual,
      get(after, "kiln.conv2d"));
  std::printf("  left: batch_norm %d, relu %d, clamp %d\n", get(after, "kiln.batch_norm"),
              get(after, "kiln.relu"), get(after, "kiln.clamp"));
  auto forward = optimized.module().lookupSymbol<mlir::func::FuncOp>("forward");
  auto mib = [&](const char* attr) {
    auto a = forward->getAttrOfType<mlir::IntegerAttr>(attr);
    return a ? static_cast<double>(a.getInt()) / (1 << 20) : -1.0;
  };
  std::printf("  memory plan: arena %.2f MiB vs %.2f MiB for all intermediates unshared\n",
              mib("kiln.arena_bytes"), mib("kiln.naive_bytes"));
  std::printf(
      "  optimized vs unoptimized (interpreter): max abs err %.3g, max |ref| %.3g, rel err "
      "%.3g\n",
      abs_err, scale, rel_err);
  return get(after, "kiln.batch_norm") == 0 && get(after, "kiln.relu") == 0 &&
         get(after, "kiln.clamp") == 0 && rel_err <= 1e-4;
}

// A traced ResNet-18 training step (SGD with momentum, batch 2, 3x64x64): ops in the step, after
// the training pipeline, and after gradient elimination (the inference function it contains).
void report_training_step() {
  manual_seed(7);
  auto model = models::resnet18();
  model->train();
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  auto step = [&](const TensorList& in) {
    opt.zero_grad();
    Tensor loss = cross_entropy(model->forward(in[0]), in[1]);
    loss.backward();
    opt.step();
    return TensorList{loss.detach()};
  };
  Tensor x = randn(Dims{2, 3, 64, 64});
  Tensor y = tensor({1.0, 2.0}, DType::Int64);
  step({x, y});  // the optimizer's state exists before tracing
  jit::TraceOptions options;
  auto params = model->named_parameters();
  for (size_t i = 0; i < params.size(); ++i) options.named_captures.push_back(params[i]);
  auto buffers = model->named_buffers();
  for (size_t i = 0; i < buffers.size(); ++i) options.named_captures.push_back(buffers[i]);
  jit::TracedFunction training = jit::trace(step, {x, y}, options);
  jit::TracedFunction inference = jit::trace(step, {x, y}, options);
  const Counts traced = count_ops(training.module());
  mlir::PassManager train_pm(&training.context());
  passes::build_training_pipeline(train_pm);
  mlir::PassManager infer_pm(&inference.context());
  infer_pm.addPass(passes::create_eliminate_gradients_pass(/*drop_loss_head=*/true));
  infer_pm.addNestedPass<mlir::func::FuncOp>(passes::create_cleanup_pass());
  if (mlir::failed(train_pm.run(training.module())) ||
      mlir::failed(infer_pm.run(inference.module()))) {
    std::fprintf(stderr, "resnet18 training step: a pipeline failed\n");
    return;
  }
  const Counts trained = count_ops(training.module()), eliminated = count_ops(inference.module());
  auto fn_args = [](mlir::ModuleOp m) {
    return m.lookupSymbol<mlir::func::FuncOp>("forward").getNumArguments();
  };
  std::printf("resnet18 training step (2x3x64x64, SGD momentum)\n");
  std::printf("  traced ops: %d, arguments %u, results %u\n", traced.top,
              fn_args(training.module()),
              training.module().lookupSymbol<mlir::func::FuncOp>("forward").getNumResults());
  std::printf("  training pipeline: %d top-level + %d inside %d kiln.fused regions\n", trained.top,
              trained.in_regions,
              trained.by_name.count("kiln.fused") ? trained.by_name.at("kiln.fused") : 0);
  std::printf("  gradient elimination (loss head dropped): %d ops, arguments %u, results 1\n",
              eliminated.top, fn_args(inference.module()));
}

}  // namespace

int main(int argc, char** argv) {
  int64_t size = 224;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--size") == 0) size = std::atoll(argv[i + 1]);
  }
  manual_seed(42);
  bool ok = report("resnet18", *models::resnet18(), size);
  ok &= report("mobilenet_v2", *models::mobilenet_v2(), size);
  report_training_step();
  return ok ? 0 : 1;
}
