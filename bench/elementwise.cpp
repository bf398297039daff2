// Elementwise kernel throughput (GB/s of DRAM-visible traffic: every input read once, the output
// written once; write-allocate traffic is not counted). Run:
//   KILN_NUM_THREADS=1 build/bench/bench_elementwise --benchmark_min_time=0.2
//   KILN_NUM_THREADS=2 build/bench/bench_elementwise --benchmark_min_time=0.2
// Reference: STREAM triad on this machine is about 33 GB/s with 2 threads.
#include <benchmark/benchmark.h>

#include "kiln/runtime/kernels/elementwise.h"
#include "kiln/runtime/tensor.h"
#include "kiln/runtime/views.h"

using namespace kiln;
using namespace kiln::kernels;

namespace {

TensorImplPtr filled(Dims shape, float lo, float hi) {
  auto t = empty(shape, DType::Float32);
  float* p = t->data_ptr<float>();
  const int64_t n = t->numel();
  uint32_t s = 12345;
  for (int64_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    p[i] = lo + (hi - lo) * static_cast<float>(s >> 8) * (1.0f / 16777216.0f);
  }
  return t;
}

void BM_Add(benchmark::State& state) {
  const int64_t n = state.range(0);
  auto a = filled(Dims{n}, -1, 1), b = filled(Dims{n}, -1, 1);
  auto out = empty(Dims{n}, DType::Float32);
  add_out(*a, *b, *out);  // first touch of out's pages outside the timing
  for (auto _ : state) add_out(*a, *b, *out);
  state.SetBytesProcessed(state.iterations() * 3 * n * 4);
}
BENCHMARK(BM_Add)->Arg(1 << 20)->Arg(16 << 20)->UseRealTime();

void BM_AddInPlace(benchmark::State& state) {
  const int64_t n = state.range(0);
  auto a = filled(Dims{n}, -1, 1), b = filled(Dims{n}, -1e-6f, 1e-6f);
  for (auto _ : state) add_(*a, *b);
  state.SetBytesProcessed(state.iterations() * 3 * n * 4);
}
BENCHMARK(BM_AddInPlace)->Arg(16 << 20)->UseRealTime();

void BM_MulScalar(benchmark::State& state) {
  const int64_t n = state.range(0);
  auto a = filled(Dims{n}, -1, 1);
  auto out = empty(Dims{n}, DType::Float32);
  mul_scalar_out(*a, 1.0001, *out);
  for (auto _ : state) mul_scalar_out(*a, 1.0001, *out);
  state.SetBytesProcessed(state.iterations() * 2 * n * 4);
}
BENCHMARK(BM_MulScalar)->Arg(16 << 20)->UseRealTime();

void unary_bench(benchmark::State& state, UnaryOp op, float lo, float hi) {
  const int64_t n = state.range(0);
  auto x = filled(Dims{n}, lo, hi);
  auto out = empty(Dims{n}, DType::Float32);
  unary_out(op, *x, *out);
  for (auto _ : state) unary_out(op, *x, *out);
  state.SetBytesProcessed(state.iterations() * 2 * n * 4);
  state.counters["Gelem/s"] = benchmark::Counter(static_cast<double>(n) * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
void BM_Exp(benchmark::State& s) {
  unary_bench(s, UnaryOp::Exp, -10, 10);
}
void BM_Relu(benchmark::State& s) {
  unary_bench(s, UnaryOp::Relu, -1, 1);
}
void BM_Sigmoid(benchmark::State& s) {
  unary_bench(s, UnaryOp::Sigmoid, -10, 10);
}
void BM_Tanh(benchmark::State& s) {
  unary_bench(s, UnaryOp::Tanh, -5, 5);
}
void BM_Gelu(benchmark::State& s) {
  unary_bench(s, UnaryOp::Gelu, -5, 5);
}
void BM_GeluTanh(benchmark::State& s) {
  unary_bench(s, UnaryOp::GeluTanh, -5, 5);
}
void BM_Silu(benchmark::State& s) {
  unary_bench(s, UnaryOp::Silu, -5, 5);
}
void BM_Log(benchmark::State& s) {
  unary_bench(s, UnaryOp::Log, 0.01f, 10);
}
BENCHMARK(BM_Exp)->Arg(1 << 20)->Arg(16 << 20)->UseRealTime();
BENCHMARK(BM_Relu)->Arg(16 << 20)->UseRealTime();
BENCHMARK(BM_Sigmoid)->Arg(1 << 20)->Arg(16 << 20)->UseRealTime();
BENCHMARK(BM_Tanh)->Arg(1 << 20)->UseRealTime();
BENCHMARK(BM_Gelu)->Arg(1 << 20)->Arg(16 << 20)->UseRealTime();
BENCHMARK(BM_GeluTanh)->Arg(1 << 20)->UseRealTime();
BENCHMARK(BM_Silu)->Arg(1 << 20)->UseRealTime();
BENCHMARK(BM_Log)->Arg(1 << 20)->UseRealTime();

// relu(x * a + b) * c as four separate ops (what eager mode does without fusion).
void BM_Chain(benchmark::State& state) {
  const int64_t n = state.range(0);
  auto x = filled(Dims{n}, -1, 1), a = filled(Dims{n}, -1, 1), b = filled(Dims{n}, -1, 1),
       c = filled(Dims{n}, -1, 1);
  auto t = empty(Dims{n}, DType::Float32), out = empty(Dims{n}, DType::Float32);
  mul_out(*x, *a, *t);
  mul_out(*x, *a, *out);
  for (auto _ : state) {
    mul_out(*x, *a, *t);
    add_out(*t, *b, *t);
    relu_out(*t, *t);
    mul_out(*t, *c, *out);
  }
  state.SetBytesProcessed(state.iterations() * (3 + 3 + 2 + 3) * n * 4);
}
BENCHMARK(BM_Chain)->Arg(1 << 20)->Arg(16 << 20)->UseRealTime();

void BM_BroadcastAddRow(benchmark::State& state) {
  const int64_t m = 4096, n = 4096;
  auto a = filled(Dims{m, n}, -1, 1), b = filled(Dims{n}, -1, 1);
  auto out = empty(Dims{m, n}, DType::Float32);
  add_out(*a, *b, *out);
  for (auto _ : state) add_out(*a, *b, *out);
  state.SetBytesProcessed(state.iterations() * (2 * m * n + n) * 4);
}
BENCHMARK(BM_BroadcastAddRow)->UseRealTime();

void BM_BroadcastAddCol(benchmark::State& state) {
  const int64_t m = 4096, n = 4096;
  auto a = filled(Dims{m, n}, -1, 1), b = filled(Dims{m, 1}, -1, 1);
  auto out = empty(Dims{m, n}, DType::Float32);
  add_out(*a, *b, *out);
  for (auto _ : state) add_out(*a, *b, *out);
  state.SetBytesProcessed(state.iterations() * (2 * m * n + m) * 4);
}
BENCHMARK(BM_BroadcastAddCol)->UseRealTime();

// Non-contiguous and converting paths.
void BM_AddTransposed(benchmark::State& state) {
  const int64_t m = 2048, n = 2048;
  auto a = filled(Dims{m, n}, -1, 1), b = filled(Dims{n, m}, -1, 1);
  auto bt = views::transpose(*b, 0, 1);
  auto out = empty(Dims{m, n}, DType::Float32);
  add_out(*a, *bt, *out);
  for (auto _ : state) add_out(*a, *bt, *out);
  state.SetBytesProcessed(state.iterations() * 3 * m * n * 4);
}
BENCHMARK(BM_AddTransposed)->UseRealTime();

void BM_AddHalf(benchmark::State& state) {
  const int64_t n = state.range(0);
  auto a = empty(Dims{n}, DType::Float16), b = empty(Dims{n}, DType::Float16);
  add_out(*filled(Dims{n}, -1, 1), *filled(Dims{n}, 0, 0), *a);
  add_out(*filled(Dims{n}, -1, 1), *filled(Dims{n}, 0, 0), *b);
  auto out = empty(Dims{n}, DType::Float16);
  add_out(*a, *b, *out);
  for (auto _ : state) add_out(*a, *b, *out);
  state.SetBytesProcessed(state.iterations() * 3 * n * 2);
}
BENCHMARK(BM_AddHalf)->Arg(16 << 20)->UseRealTime();

// Eager-size op: fixed overhead of one small call.
void BM_AddSmall(benchmark::State& state) {
  auto a = filled(Dims{5, 5}, -1, 1), b = filled(Dims{5, 5}, -1, 1);
  auto out = empty(Dims{5, 5}, DType::Float32);
  for (auto _ : state) add_out(*a, *b, *out);
}
BENCHMARK(BM_AddSmall);

}  // namespace

BENCHMARK_MAIN();
