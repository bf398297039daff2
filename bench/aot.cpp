// AOT compilation (kiln::jit::compile_aot): time to compile a traced ResNet-18 / MobileNetV2
// (224x224, batch 1, 1000 classes, weights frozen in) to a standalone executable, and the size of
// that executable (counter exe_MB) and of its code without the weights (code_MB). The issue's
// target: ResNet-18 AOT compile to an executable <= 10 s. Latency of the executables themselves:
// `OUT x.npy --repeat N` (the bench prints the command to use).

#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "kiln/jit/aot.h"
#include "kiln/kiln.h"
#include "kiln/models.h"
#include "kiln/trace/trace.h"

using namespace kiln;

namespace {

struct Traced {
  std::shared_ptr<nn::Module> model;
  jit::TracedFunction fn;
  double weight_bytes = 0;
};

Traced& traced(const std::string& name) {
  static std::map<std::string, Traced> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  Traced t;
  if (name == "resnet18")
    t.model = models::resnet18();
  else
    t.model = models::mobilenet_v2();
  t.model->eval();
  autograd::NoGradGuard no_grad;
  t.fn = jit::trace(*t.model, {randn({1, 3, 224, 224})});
  for (const Tensor& c : t.fn.captures()) t.weight_bytes += double(c.numel() * c.element_size());
  // KILN_BENCH_AOT_DUMP=DIR also writes DIR/NAME.mlir + DIR/NAME.safetensors, the input of
  // `kiln compile DIR/NAME.mlir --weights DIR/NAME.safetensors --emit exe -o NAME`.
  if (const char* dir = std::getenv("KILN_BENCH_AOT_DUMP"); dir && *dir) {
    std::ofstream(std::string(dir) + "/" + name + ".mlir") << t.fn.str();
    NamedTensors w;
    for (const auto& [n, p] : t.model->named_parameters()) w.emplace_back(n, p);
    for (const auto& [n, b] : t.model->named_buffers()) w.emplace_back(n, b);
    write_safetensors(std::string(dir) + "/" + name + ".safetensors", w);
  }
  return cache.emplace(name, std::move(t)).first->second;
}

void BM_AotCompileExe(benchmark::State& state, const char* name) {
  Traced& t = traced(name);
  const std::string out =
      (std::filesystem::temp_directory_path() / (std::string("kiln-bench-aot-") + name)).string();
  jit::AotOptions o;
  o.output = out;
  jit::AotResult r;
  for (auto _ : state) r = jit::compile_aot(t.fn, o);
  const double exe = double(std::filesystem::file_size(out));
  state.counters["exe_MB"] = exe / 1e6;
  state.counters["code_MB"] = (exe - t.weight_bytes) / 1e6;
  state.counters["lower_codegen_s"] = r.lower_and_codegen_s;
  state.counters["weights_s"] = r.package_s;
  state.counters["link_s"] = r.link_s;
  std::filesystem::remove(out);
}
BENCHMARK_CAPTURE(BM_AotCompileExe, resnet18, "resnet18")
    ->Unit(benchmark::kSecond)
    ->Iterations(2)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_AotCompileExe, mobilenet_v2, "mobilenet_v2")
    ->Unit(benchmark::kSecond)
    ->Iterations(2)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
