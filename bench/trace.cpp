// Tracing overhead: one traced ResNet-18 forward (eval, 1x3x224x224) against one eager forward,
// and the size of the IR it produces. The target: tracing <= 1.5x an eager forward.
//   build/release/bench/bench_trace --benchmark_min_time=2
#include <benchmark/benchmark.h>

#include "kiln/kiln.h"
#include "kiln/models.h"
#include "kiln/trace/trace.h"

using namespace kiln;

namespace {

struct Fixture {
  std::shared_ptr<models::ResNet> model;
  Tensor input;
  Fixture() {
    manual_seed(0);
    model = models::resnet18();
    model->eval();
    input = randn({1, 3, 224, 224});
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

void BM_ResNet18EagerForward(benchmark::State& state) {
  Fixture& f = fixture();
  autograd::NoGradGuard no_grad;
  for (auto _ : state) benchmark::DoNotOptimize(f.model->forward(f.input));
}

void BM_ResNet18Trace(benchmark::State& state) {
  Fixture& f = fixture();
  autograd::NoGradGuard no_grad;
  size_t text_bytes = 0, bytecode_bytes = 0, ops = 0;
  for (auto _ : state) {
    jit::TracedFunction traced = jit::trace(*f.model, {f.input});
    state.PauseTiming();
    const std::string text = traced.str();
    text_bytes = text.size();
    bytecode_bytes = traced.bytecode().size();
    ops = 0;
    for (size_t p = text.find(" = kiln."); p != std::string::npos;
         p = text.find(" = kiln.", p + 1)) {
      ++ops;
    }
    state.ResumeTiming();
  }
  state.counters["ir_text_bytes"] = static_cast<double>(text_bytes);
  state.counters["ir_bytecode_bytes"] = static_cast<double>(bytecode_bytes);
  state.counters["kiln_ops"] = static_cast<double>(ops);
}

}  // namespace

BENCHMARK(BM_ResNet18EagerForward)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ResNet18Trace)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
