// Eager overhead and a small training step. Run: build/release/bench/bench_eager
#include <benchmark/benchmark.h>

#include "kiln/kiln.h"
#include "kiln/models.h"
#include "kiln/optim.h"

using namespace kiln;

// The per-op overhead case: add a scalar to a 5x5 tensor.
static void BM_AddScalar5x5(benchmark::State& state) {
  Tensor x = ones({5, 5});
  if (state.range(0)) x.requires_grad_();
  for (auto _ : state) {
    Tensor y = x + 1.0;
    benchmark::DoNotOptimize(y.impl());
  }
  state.SetLabel(state.range(0) ? "requires_grad" : "no grad");
}
BENCHMARK(BM_AddScalar5x5)->Arg(0)->Arg(1);

static void BM_AddTensor5x5(benchmark::State& state) {
  Tensor x = ones({5, 5});
  Tensor b = ones({5, 5});
  if (state.range(0)) x.requires_grad_();
  for (auto _ : state) {
    Tensor y = x + b;
    benchmark::DoNotOptimize(y.impl());
  }
  state.SetLabel(state.range(0) ? "requires_grad" : "no grad");
}
BENCHMARK(BM_AddTensor5x5)->Arg(0)->Arg(1);

// One SGD training step of a zoo model (forward, backward, update) — compare with PyTorch 1.13 on
// this machine: LeNet batch 64 5.2 ms, ResNet-18 batch 8 570 ms.
template <typename Model>
static void train_step_bench(benchmark::State& state, std::shared_ptr<Model> model, Dims input) {
  Tensor x = randn(input);
  Tensor y = randint(0, 10, {input[0]});
  optim::SGD sgd(model->parameters(), optim::SGDOptions(0.01).momentum(0.9));
  for (auto _ : state) {
    Tensor loss = cross_entropy((*model)(x), y);
    sgd.zero_grad();
    loss.backward();
    sgd.step();
  }
}
// MLP 784-512-256-10 at batch 64 (PyTorch 1.13 here: 2.3 ms).
static void BM_MlpTrainStep(benchmark::State& state) {
  train_step_bench(state, models::mlp({784, 512, 256, 10}), Dims{64, 784});
}
BENCHMARK(BM_MlpTrainStep)->Unit(benchmark::kMillisecond)->UseRealTime();
static void BM_LeNetTrainStep(benchmark::State& state) {
  train_step_bench(state, models::lenet(10), Dims{64, 1, 28, 28});
}
BENCHMARK(BM_LeNetTrainStep)->Unit(benchmark::kMillisecond)->UseRealTime();
static void BM_ResNet18TrainStep(benchmark::State& state) {
  train_step_bench(state, models::resnet18(10), Dims{8, 3, 224, 224});
}
BENCHMARK(BM_ResNet18TrainStep)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);

BENCHMARK_MAIN();
