// The CPU process group and data-parallel training, run as separate processes by
// bench/distributed.sh (which also runs PyTorch's DDP with Gloo, bench/peers/ddp_torch.py, on the
// same models, batches and rank count). Every benchmark has a fixed iteration count, so every
// rank runs the same collectives; rank 0 reports.
//
// AllReduce/<bytes>: one float32 all_reduce; `busbw_GBps` is nccl-tests' bus bandwidth,
// bytes * 2(n-1)/n / time (what each rank sends), `algbw_GBps` bytes / time.
// DdpStep/<model>/<mode>: a training step (forward, backward with the gradient all-reduce,
// SGD momentum) on this rank's share of the global batch. mode 0: buckets of 25 MB started
// during backward; 1: one bucket started at the end of backward (no overlap); 2: local only,
// no communication (the floor: what the step costs without other ranks).
#include <benchmark/benchmark.h>

#include <vector>

#include "kiln/kiln.h"
#include "kiln/models.h"

namespace dist = kiln::distributed;
namespace nn = kiln::nn;
using kiln::Tensor;

namespace {

std::shared_ptr<dist::ProcessGroup> g_group;

void BM_AllReduce(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  Tensor t = kiln::ones({bytes / 4});
  for (int warmup = 0; warmup < 3; ++warmup) g_group->all_reduce(t);  // as the peer script
  g_group->barrier();
  for (auto _ : state) g_group->all_reduce(t);
  const int n = g_group->size();
  state.counters["algbw_GBps"] =
      benchmark::Counter(double(bytes) * 1e-9 * state.iterations(), benchmark::Counter::kIsRate);
  state.counters["busbw_GBps"] = benchmark::Counter(
      double(bytes) * 2.0 * (n - 1) / n * 1e-9 * state.iterations(), benchmark::Counter::kIsRate);
}

nn::ModulePtr make_model(int which) {
  kiln::manual_seed(1);
  if (which == 0) {
    // MLP 512-2048-2048-2048-10: 9.5 M parameters, 38 MB of gradients.
    return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
        std::make_shared<nn::Linear>(512, 2048), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Linear>(2048, 2048), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Linear>(2048, 2048), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Linear>(2048, 10)});
  }
  return kiln::models::resnet18(10);
}

// Global batches: MLP 128 rows, ResNet-18 8 images of 3x112x112 (split over the ranks).
void BM_DdpStep(benchmark::State& state) {
  const int which = static_cast<int>(state.range(0)), mode = static_cast<int>(state.range(1));
  const int n = g_group->size();
  const int64_t global = which == 0 ? 128 : 8, rows = global / n;
  kiln::manual_seed(2);
  Tensor x = which == 0 ? kiln::randn({rows, 512}) : kiln::randn({rows, 3, 112, 112});
  Tensor y = kiln::randint(0, 10, {rows});
  nn::ModulePtr model = make_model(which);
  std::shared_ptr<dist::DistributedDataParallel> ddp;
  if (mode != 2) {
    dist::DistributedDataParallelOptions o;
    o.group = g_group;
    o.bucket_cap_mb = mode == 0 ? 25 : 1e6;
    ddp = std::make_shared<dist::DistributedDataParallel>(model, o);
  }
  nn::Module& m = ddp ? static_cast<nn::Module&>(*ddp) : *model;
  kiln::optim::SGD opt(m.parameters(), kiln::optim::SGDOptions(0.01).momentum(0.9));
  auto step = [&] {
    opt.zero_grad();
    kiln::cross_entropy(m(x), y).backward();
    opt.step();
  };
  for (int warmup = 0; warmup < 2; ++warmup) step();  // as the peer script
  g_group->barrier();
  for (auto _ : state) step();
  if (ddp) state.counters["buckets"] = ddp->bucket_count();
  g_group->barrier();
}

}  // namespace

BENCHMARK(BM_AllReduce)
    ->Arg(64 << 10)
    ->Arg(1 << 20)
    ->Arg(16 << 20)
    ->Arg(64 << 20)
    ->Iterations(20)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_DdpStep)
    ->ArgsProduct({{0}, {0, 1, 2}})
    ->Iterations(20)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_DdpStep)
    ->ArgsProduct({{1}, {0, 1, 2}})
    ->Iterations(4)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

int main(int argc, char** argv) {
  g_group = dist::init_process_group();
  benchmark::Initialize(&argc, argv);
  // Every rank runs every benchmark (the collectives need all); only rank 0 prints.
  if (g_group->rank() != 0) {
    struct Quiet : benchmark::BenchmarkReporter {
      bool ReportContext(const Context&) override { return true; }
      void ReportRuns(const std::vector<Run>&) override {}
    } quiet;
    benchmark::RunSpecifiedBenchmarks(&quiet);
  } else {
    benchmark::RunSpecifiedBenchmarks();
  }
  g_group->barrier();
  dist::destroy_process_group();
  g_group.reset();
  return 0;
}
