// Reductions and softmax throughput (bytes = input read, plus output written for softmax).
// Run: KILN_NUM_THREADS=1 build/bench/bench_reduce --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include <random>

#include "kiln/runtime/kernels/random.h"
#include "kiln/runtime/kernels/reduce.h"
#include "kiln/runtime/tensor.h"

using namespace kiln;

namespace {
TensorImplPtr randn(Dims sizes) {
  auto t = empty(sizes, DType::Float32);
  std::mt19937 rng(0);
  std::normal_distribution<float> n;
  for (int64_t i = 0; i < t->numel(); ++i) t->data_ptr<float>()[i] = n(rng);
  return t;
}
}  // namespace

static void BM_SumAll(benchmark::State& state) {
  auto x = randn(Dims{16 << 20});
  auto out = empty(Dims{}, DType::Float32);
  for (auto _ : state) kernels::sum_out(*x, Dims{}, false, *out);
  state.SetBytesProcessed(state.iterations() * x->nbytes());
}
BENCHMARK(BM_SumAll)->UseRealTime()->Unit(benchmark::kMillisecond);

static void BM_AmaxAll(benchmark::State& state) {
  auto x = randn(Dims{16 << 20});
  auto out = empty(Dims{}, DType::Float32);
  for (auto _ : state) kernels::amax_out(*x, Dims{}, false, *out);
  state.SetBytesProcessed(state.iterations() * x->nbytes());
}
BENCHMARK(BM_AmaxAll)->UseRealTime()->Unit(benchmark::kMillisecond);

// [4096, 4096] summed along dim 0 (outer path) or dim 1 (inner path).
static void BM_RowSum(benchmark::State& state) {
  const int64_t dim = state.range(0);
  auto x = randn(Dims{4096, 4096});
  auto out = empty(Dims{4096}, DType::Float32);
  for (auto _ : state) kernels::sum_out(*x, Dims{dim}, false, *out);
  state.SetBytesProcessed(state.iterations() * x->nbytes());
}
BENCHMARK(BM_RowSum)->ArgName("dim")->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond);

// Many short rows: [262144, 16] summed along dim 1 (per-output overhead).
static void BM_SumShortRows(benchmark::State& state) {
  auto x = randn(Dims{262144, 16});
  auto out = empty(Dims{262144}, DType::Float32);
  for (auto _ : state) kernels::sum_out(*x, Dims{1}, false, *out);
  state.SetBytesProcessed(state.iterations() * x->nbytes());
}
BENCHMARK(BM_SumShortRows)->UseRealTime()->Unit(benchmark::kMillisecond);

static void BM_Var(benchmark::State& state) {
  const int64_t dim = state.range(0);
  auto x = randn(Dims{4096, 4096});
  auto out = empty(Dims{4096}, DType::Float32);
  for (auto _ : state) kernels::var_out(*x, Dims{dim}, 1, false, *out);
  state.SetBytesProcessed(state.iterations() * x->nbytes());
}
BENCHMARK(BM_Var)->ArgName("dim")->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond);

static void BM_Softmax(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1);
  auto x = randn(Dims{rows, cols});
  auto out = empty(Dims{rows, cols}, DType::Float32);
  for (auto _ : state) kernels::softmax_out(*x, -1, *out);
  state.SetBytesProcessed(state.iterations() * 2 * x->nbytes());
}
BENCHMARK(BM_Softmax)->Args({256, 1000})->Args({64, 32000})->UseRealTime();

static void BM_LogSoftmax(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1);
  auto x = randn(Dims{rows, cols});
  auto out = empty(Dims{rows, cols}, DType::Float32);
  for (auto _ : state) kernels::log_softmax_out(*x, -1, *out);
  state.SetBytesProcessed(state.iterations() * 2 * x->nbytes());
}
BENCHMARK(BM_LogSoftmax)->Args({256, 1000})->Args({64, 32000})->UseRealTime();

// Softmax over a middle dim (column path): [32, 1000, 64] along dim 1.
static void BM_SoftmaxDim1(benchmark::State& state) {
  auto x = randn(Dims{32, 1000, 64});
  auto out = empty(Dims{32, 1000, 64}, DType::Float32);
  for (auto _ : state) kernels::softmax_out(*x, 1, *out);
  state.SetBytesProcessed(state.iterations() * 2 * x->nbytes());
}
BENCHMARK(BM_SoftmaxDim1)->UseRealTime();

// Random fills (Philox4x32-10), 4M elements.
static void BM_UniformFill(benchmark::State& state) {
  auto x = empty(Dims{4 << 20}, DType::Float32);
  Generator g(1);
  for (auto _ : state) kernels::uniform_(*x, 0, 1, &g);
  state.SetBytesProcessed(state.iterations() * x->nbytes());
  state.SetItemsProcessed(state.iterations() * x->numel());
}
BENCHMARK(BM_UniformFill)->UseRealTime()->Unit(benchmark::kMillisecond);

static void BM_DropoutMask(benchmark::State& state) {
  auto m = empty(Dims{4 << 20}, DType::Bool);
  Generator g(1);
  for (auto _ : state) kernels::dropout_mask_out(0.1, *m, &g);
  state.SetItemsProcessed(state.iterations() * m->numel());
}
BENCHMARK(BM_DropoutMask)->UseRealTime()->Unit(benchmark::kMillisecond);

static void BM_NormalFill(benchmark::State& state) {
  auto x = empty(Dims{4 << 20}, DType::Float32);
  Generator g(1);
  for (auto _ : state) kernels::normal_(*x, 0, 1, &g);
  state.SetItemsProcessed(state.iterations() * x->numel());
}
BENCHMARK(BM_NormalFill)->UseRealTime()->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
