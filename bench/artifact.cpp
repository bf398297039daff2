// The artifact runtime on zoo models: load (mmap + verify), load-to-first-output, and steady-state
// runs through the executor. The artifacts are exported in-process first (random weights; the
// numbers do not depend on the values). Run with KILN_NUM_THREADS=2:
//   KILN_NUM_THREADS=2 build/release/bench/bench_artifact
#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>

#include "kiln/jit/save.h"
#include "kiln/kiln.h"
#include "kiln/models.h"
#include "kiln/runtime/model.h"

using namespace kiln;

namespace {

// Exports MODEL at batch N once per process; returns the artifact path.
const std::string& artifact(const std::string& model, int64_t batch) {
  static std::map<std::string, std::string> paths;
  const std::string key = model + "_b" + std::to_string(batch);
  auto it = paths.find(key);
  if (it != paths.end()) return it->second;
  manual_seed(0);
  std::shared_ptr<nn::Module> m = model == "resnet18"
                                      ? std::shared_ptr<nn::Module>(models::resnet18())
                                      : std::shared_ptr<nn::Module>(models::mobilenet_v2());
  m->eval();
  autograd::NoGradGuard no_grad;
  Tensor x = randn({batch, 3, 224, 224});
  jit::TraceOptions options;
  for (const auto& [k, t] : m->named_parameters()) options.named_captures.push_back({k, t});
  for (const auto& [k, t] : m->named_buffers()) options.named_captures.push_back({k, t});
  options.warn_on_read_back = false;
  jit::TracedFunction traced =
      jit::trace([&](const TensorList& in) { return TensorList{m->forward(in[0])}; }, {x}, options);
  const std::string path = "/tmp/kiln_bench_" + key + ".kiln";
  jit::save(traced, path);
  return paths[key] = path;
}

std::vector<Tensor> inputs_for(const rt::Model& m) {
  std::vector<Tensor> xs;
  for (const auto& s : m.inputs()) xs.push_back(randn(s.shape));
  return xs;
}

// Arg 0/1: LoadOptions::populate (MAP_POPULATE) off/on.
rt::LoadOptions load_options(const benchmark::State& state) {
  rt::LoadOptions o;
  o.populate = state.range(0) != 0;
  return o;
}

void BM_Load(benchmark::State& state, std::string model) {
  const std::string& path = artifact(model, 1);
  for (auto _ : state) {
    auto m = rt::Model::load(path, rt::builtin_registry(), load_options(state));
    benchmark::DoNotOptimize(m.get());
  }
}

// Load + session + the first run: what a process pays before its first answer.
void BM_LoadToFirstOutput(benchmark::State& state, std::string model) {
  const std::string& path = artifact(model, 1);
  auto probe = rt::Model::load(path);
  std::vector<Tensor> xs = inputs_for(*probe);
  for (auto _ : state) {
    auto m = rt::Model::load(path, rt::builtin_registry(), load_options(state));
    rt::Session s(m);
    auto y = s.run({xs[0].impl()});
    benchmark::DoNotOptimize(y[0].get());
  }
}

// The first run of a fresh session on an already loaded model (weights' pages mapped once).
void BM_FirstRun(benchmark::State& state, std::string model) {
  const std::string& path = artifact(model, 1);
  auto m = rt::Model::load(path);
  std::vector<Tensor> xs = inputs_for(*m);
  for (auto _ : state) {
    state.PauseTiming();
    // A new mapping: without MAP_POPULATE its pages fault in during the first run.
    auto fresh = rt::Model::load(path, rt::builtin_registry(), load_options(state));
    rt::Session s(fresh);
    state.ResumeTiming();
    auto y = s.run({xs[0].impl()});
    benchmark::DoNotOptimize(y[0].get());
  }
}

void BM_SteadyRun(benchmark::State& state, std::string model) {
  const std::string& path = artifact(model, state.range(0));
  auto m = rt::Model::load(path);
  rt::Session s(m);
  std::vector<Tensor> xs = inputs_for(*m);
  s.run({xs[0].impl()});
  for (auto _ : state) {
    auto y = s.run({xs[0].impl()});
    benchmark::DoNotOptimize(y[0].get());
  }
  state.counters["threads"] = num_threads();
}

}  // namespace

// Arg of Load / LoadToFirstOutput / FirstRun: MAP_POPULATE off (0) or on (1).
BENCHMARK_CAPTURE(BM_Load, resnet18, "resnet18")->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_LoadToFirstOutput, resnet18, "resnet18")
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_FirstRun, resnet18, "resnet18")
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
// Arg of SteadyRun: the batch size.
BENCHMARK_CAPTURE(BM_SteadyRun, resnet18, "resnet18")
    ->Arg(1)
    ->Arg(8)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_SteadyRun, mobilenet_v2, "mobilenet_v2")
    ->Arg(1)
    ->Arg(8)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

BENCHMARK_MAIN();
