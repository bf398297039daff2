// max_pool2d throughput on ResNet-18's stem pool (3x3, stride 2, padding 1, [N, 64, 112, 112]):
// with indices (training: the argmax scan) and without (inference: the values-only kernel),
// reported as GB/s of input + output; float32, and uint8 (an int8 model's bytes) without indices.
// BM_MaxPoolLeNet: LeNet's first pool at batch 64 (2x2, stride 2, [64, 6, 28, 28]): short rows.
//
// Run: KILN_NUM_THREADS=2 build/release/bench/bench_pool --benchmark_min_time=0.3
#include <benchmark/benchmark.h>

#include "kiln/runtime/kernels/pool.h"
#include "kiln/runtime/tensor.h"

using namespace kiln;
using namespace kiln::kernels;

namespace {

// max_pool2d over an input of these sizes (deterministic values), with or without indices.
void run_max_pool(benchmark::State& state, Dims sizes, const Pool2dParams& p, DType dtype,
                  bool with_indices) {
  auto x = empty(sizes, dtype);
  for (int64_t i = 0; i < x->numel(); ++i) {
    if (dtype == DType::UInt8)
      x->data_ptr<uint8_t>()[i] = static_cast<uint8_t>((i * 7919) % 251);
    else
      x->data_ptr<float>()[i] = static_cast<float>((i * 7919) % 1001) * 1e-3f;
  }
  const Dims ys = max_pool2d_output_shape(x->sizes(), p);
  auto y = empty(ys, dtype);
  auto idx = with_indices ? empty(ys, DType::Int64) : TensorImplPtr{};
  for (auto _ : state) {
    max_pool2d_out(*x, p, *y, idx.get());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * (x->nbytes() + y->nbytes()));
}

void BM_MaxPoolResNetStem(benchmark::State& state) {
  const DType dtype = state.range(2) != 0 ? DType::UInt8 : DType::Float32;  // int8 models' bytes
  Pool2dParams p;
  p.kernel_h = p.kernel_w = 3;
  p.stride_h = p.stride_w = 2;
  p.pad_h = p.pad_w = 1;
  run_max_pool(state, Dims{state.range(0), 64, 112, 112}, p, dtype, state.range(1) != 0);
}
BENCHMARK(BM_MaxPoolResNetStem)
    ->ArgNames({"batch", "indices", "uint8"})
    ->Args({1, 0, 0})
    ->Args({1, 1, 0})
    ->Args({8, 0, 0})
    ->Args({8, 1, 0})
    ->Args({1, 0, 1})
    ->Args({8, 0, 1})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

void BM_MaxPoolLeNet(benchmark::State& state) {
  Pool2dParams p;
  p.kernel_h = p.kernel_w = 2;
  run_max_pool(state, Dims{64, 6, 28, 28}, p, DType::Float32, state.range(0) != 0);
}
BENCHMARK(BM_MaxPoolLeNet)
    ->ArgNames({"indices"})
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
