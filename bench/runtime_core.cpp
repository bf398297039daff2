// Allocator and copy throughput. Run: build/bench/bench_runtime_core
#include <benchmark/benchmark.h>

#include "kiln/runtime/kernels/copy.h"
#include "kiln/runtime/tensor.h"
#include "kiln/runtime/thread_pool.h"
#include "kiln/runtime/views.h"

using namespace kiln;

static void BM_EmptySmallTensor(benchmark::State& state) {
  for (auto _ : state) {
    auto t = empty(Dims{5, 5}, DType::Float32);
    benchmark::DoNotOptimize(t.get());
  }
}
BENCHMARK(BM_EmptySmallTensor);

static void BM_CopyContiguous(benchmark::State& state) {
  const int64_t n = state.range(0);
  auto src = zeros(Dims{n}, DType::Float32);
  auto dst = empty(Dims{n}, DType::Float32);
  for (auto _ : state) kernels::copy_(*dst, *src);
  state.SetBytesProcessed(state.iterations() * n * 8);
}
BENCHMARK(BM_CopyContiguous)->Arg(1 << 20)->Arg(16 << 20)->UseRealTime();

static void BM_CopyTransposed(benchmark::State& state) {
  const int64_t n = state.range(0);
  auto src = zeros(Dims{n, n}, DType::Float32);
  auto t = views::transpose(*src, 0, 1);
  auto dst = empty(Dims{n, n}, DType::Float32);
  for (auto _ : state) kernels::copy_(*dst, *t);
  state.SetBytesProcessed(state.iterations() * n * n * 8);
}
BENCHMARK(BM_CopyTransposed)->Arg(1024)->UseRealTime();

// One parallel_for of one chunk per thread with no work: the cost of a synchronization point
// (publish, the spinning workers' pick-up, the wait for the last chunk), paid by every parallel
// kernel of a model run (MobileNetV2 b1: ~60 of them).
static void BM_ParallelForRoundTrip(benchmark::State& state) {
  const int n = num_threads();
  for (auto _ : state)
    parallel_for(0, n, 1, [](int64_t b, int64_t e) { benchmark::DoNotOptimize(b + e); });
  state.counters["threads"] = n;
}
BENCHMARK(BM_ParallelForRoundTrip)->UseRealTime();

BENCHMARK_MAIN();
