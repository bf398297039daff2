// What the inference pipeline buys at run time: ResNet-18 and MobileNetV2 (batch 1, 3x224x224,
// eval), compiled by kiln::jit::compile from the plain eval trace (weights as arguments, conv +
// batch_norm + relu as separate ops) and from the frozen trace after
// kiln::passes::build_inference_pipeline (bn folded, epilogues fused, elementwise fused, memory
// planned). Same compiler, same kernels: the ratio is the passes' effect.
//   KILN_NUM_THREADS=2 build/release/bench/bench_passes
#include <benchmark/benchmark.h>

#include <map>

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

#include "kiln/jit/compile.h"
#include "kiln/kiln.h"
#include "kiln/models.h"
#include "kiln/passes/Passes.h"
#include "kiln/trace/freeze.h"
#include "kiln/trace/trace.h"

using namespace kiln;

namespace {

struct Compiled {
  std::shared_ptr<nn::Module> model;
  Tensor input;
  jit::TracedFunction traced;  // frozen modules point into the model's storage
  jit::CompiledFunction fn;
};

Compiled& compiled(const std::string& name, bool optimize) {
  static std::map<std::pair<std::string, bool>, Compiled> cache;
  auto key = std::make_pair(name, optimize);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  Compiled c;
  manual_seed(1);
  c.model = name == "resnet18" ? std::shared_ptr<nn::Module>(models::resnet18())
                               : std::shared_ptr<nn::Module>(models::mobilenet_v2());
  c.model->eval();
  c.input = randn(Dims{1, 3, 224, 224});
  c.traced = jit::trace(*c.model, {c.input});
  if (optimize) {
    jit::freeze(c.traced);
    mlir::PassManager pm(&c.traced.context());
    passes::build_inference_pipeline(pm);
    if (mlir::failed(pm.run(c.traced.module()))) fail("bench_passes", "pipeline failed");
  }
  jit::CompileOptions o;
  o.disk_cache = false;
  c.fn = jit::compile(c.traced, o);
  return cache.emplace(key, std::move(c)).first->second;
}

void run(benchmark::State& state, const std::string& name, bool optimize) {
  Compiled& c = compiled(name, optimize);
  for (auto _ : state) {
    Tensor y = c.fn({c.input})[0];
    benchmark::DoNotOptimize(y.impl());
  }
}

}  // namespace

static void BM_ResNet18_Plain(benchmark::State& s) {
  run(s, "resnet18", false);
}
static void BM_ResNet18_Optimized(benchmark::State& s) {
  run(s, "resnet18", true);
}
static void BM_MobileNetV2_Plain(benchmark::State& s) {
  run(s, "mobilenet_v2", false);
}
static void BM_MobileNetV2_Optimized(benchmark::State& s) {
  run(s, "mobilenet_v2", true);
}
BENCHMARK(BM_ResNet18_Plain)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ResNet18_Optimized)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_MobileNetV2_Plain)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_MobileNetV2_Optimized)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
