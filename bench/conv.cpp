// conv2d throughput: every distinct ResNet-18 conv layer at batch 1 (224x224 input), reported as
// GFLOP/s (2*N*Cout*Hout*Wout*Cin/groups*KH*KW) and % of the FMA peak (117 GFLOP/s per thread on
// the reference Zen 4 machine), plus MobileNetV2's depthwise 3x3 layers reported as GB/s
// (input + output + weights, float32).
//
// Run: KILN_NUM_THREADS=1 build/bench/bench_conv --benchmark_min_time=0.2
//      KILN_NUM_THREADS=2 build/bench/bench_conv --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "kiln/runtime/kernels/conv.h"
#include "kiln/runtime/tensor.h"
#include "kiln/runtime/thread_pool.h"

using namespace kiln;
using namespace kiln::kernels;

namespace {

constexpr double kPeakPerThread = 117e9;  // measured FMA peak, fp32, one Zen 4 core

struct Shape {
  const char* name;
  int64_t N, C, H, W, O, K, stride, pad, groups;
  int count;  // how many times the layer occurs in the network
};

// ResNet-18 (torchvision), batch 1, 224x224.
const std::vector<Shape> kResNet18 = {
    {"conv1_7x7s2_3-64@224", 1, 3, 224, 224, 64, 7, 2, 3, 1, 1},
    {"l1_3x3_64-64@56", 1, 64, 56, 56, 64, 3, 1, 1, 1, 4},
    {"l2_3x3s2_64-128@56", 1, 64, 56, 56, 128, 3, 2, 1, 1, 1},
    {"l2_3x3_128-128@28", 1, 128, 28, 28, 128, 3, 1, 1, 1, 3},
    {"l2_ds_1x1s2_64-128@56", 1, 64, 56, 56, 128, 1, 2, 0, 1, 1},
    {"l3_3x3s2_128-256@28", 1, 128, 28, 28, 256, 3, 2, 1, 1, 1},
    {"l3_3x3_256-256@14", 1, 256, 14, 14, 256, 3, 1, 1, 1, 3},
    {"l3_ds_1x1s2_128-256@28", 1, 128, 28, 28, 256, 1, 2, 0, 1, 1},
    {"l4_3x3s2_256-512@14", 1, 256, 14, 14, 512, 3, 2, 1, 1, 1},
    {"l4_3x3_512-512@7", 1, 512, 7, 7, 512, 3, 1, 1, 1, 3},
    {"l4_ds_1x1s2_256-512@14", 1, 256, 14, 14, 512, 1, 2, 0, 1, 1},
};

// MobileNetV2 depthwise 3x3 layers (channels @ input size, stride).
const std::vector<Shape> kMobileNetDw = {
    {"dw_32@112_s1", 1, 32, 112, 112, 32, 3, 1, 1, 32, 1},
    {"dw_96@112_s2", 1, 96, 112, 112, 96, 3, 2, 1, 96, 1},
    {"dw_144@56_s1", 1, 144, 56, 56, 144, 3, 1, 1, 144, 1},
    {"dw_144@56_s2", 1, 144, 56, 56, 144, 3, 2, 1, 144, 1},
    {"dw_192@28_s1", 1, 192, 28, 28, 192, 3, 1, 1, 192, 1},
    {"dw_192@28_s2", 1, 192, 28, 28, 192, 3, 2, 1, 192, 1},
    {"dw_384@14_s1", 1, 384, 14, 14, 384, 3, 1, 1, 384, 1},
    {"dw_576@14_s1", 1, 576, 14, 14, 576, 3, 1, 1, 576, 1},
    {"dw_576@14_s2", 1, 576, 14, 14, 576, 3, 2, 1, 576, 1},
    {"dw_960@7_s1", 1, 960, 7, 7, 960, 3, 1, 1, 960, 1},
};

Conv2dParams params(const Shape& s) {
  Conv2dParams p;
  p.stride_h = p.stride_w = s.stride;
  p.pad_h = p.pad_w = s.pad;
  p.groups = s.groups;
  return p;
}

struct Buffers {
  TensorImplPtr x, w, b, y;
  double flops = 0, bytes = 0;
};

Buffers make(const Shape& s) {
  Buffers b;
  b.x = empty(Dims{s.N, s.C, s.H, s.W}, DType::Float32);
  b.w = empty(Dims{s.O, s.C / s.groups, s.K, s.K}, DType::Float32);
  b.b = empty(Dims{s.O}, DType::Float32);
  for (auto* t : {b.x.get(), b.w.get(), b.b.get()}) {
    float* p = t->data_ptr<float>();
    for (int64_t i = 0; i < t->numel(); ++i)
      p[i] = 0.01f * static_cast<float>((i * 7919) % 201 - 100);
  }
  const Dims os = conv2d_output_shape(b.x->sizes(), b.w->sizes(), params(s));
  b.y = empty(os, DType::Float32);
  b.flops = 2.0 * static_cast<double>(b.y->numel()) * static_cast<double>(s.C / s.groups) *
            static_cast<double>(s.K * s.K);
  b.bytes = 4.0 * static_cast<double>(b.x->numel() + b.y->numel() + b.w->numel());
  return b;
}

void BM_Conv(benchmark::State& state, Shape s, bool fused_relu) {
  Buffers b = make(s);
  ConvEpilogue ep;
  if (fused_relu) ep.activation = Activation::Relu;
  const Conv2dParams p = params(s);
  for (auto _ : state) {
    conv2d_out(*b.x, *b.w, b.b.get(), p, *b.y, ep);
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(b.flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["peak%"] = benchmark::Counter(b.flops * 100.0 / (kPeakPerThread * num_threads()),
                                               benchmark::Counter::kIsIterationInvariantRate);
  state.SetBytesProcessed(static_cast<int64_t>(b.bytes) * state.iterations());
}

// All 20 convs of ResNet-18 in order (layer counts applied): the network's conv time.
void BM_ResNet18AllConvs(benchmark::State& state) {
  std::vector<Buffers> bufs;
  double flops = 0;
  for (const auto& s : kResNet18) {
    bufs.push_back(make(s));
    flops += bufs.back().flops * s.count;
  }
  for (auto _ : state) {
    for (size_t i = 0; i < kResNet18.size(); ++i)
      for (int r = 0; r < kResNet18[i].count; ++r)
        conv2d_out(*bufs[i].x, *bufs[i].w, bufs[i].b.get(), params(kResNet18[i]), *bufs[i].y);
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["peak%"] = benchmark::Counter(flops * 100.0 / (kPeakPerThread * num_threads()),
                                               benchmark::Counter::kIsIterationInvariantRate);
}

// Backward of the representative 3x3 layers (grad_input + grad_weight + grad_bias).
void BM_ConvBackward(benchmark::State& state, Shape s) {
  Buffers b = make(s);
  auto gx = empty(b.x->sizes(), DType::Float32);
  auto gw = empty(b.w->sizes(), DType::Float32);
  auto gb = empty(b.b->sizes(), DType::Float32);
  const Conv2dParams p = params(s);
  for (auto _ : state) {
    conv2d_backward_out(*b.y, *b.x, *b.w, p, gx.get(), gw.get(), gb.get());
    benchmark::ClobberMemory();
  }
  // grad_input and grad_weight are each one forward's worth of FLOPs.
  state.counters["GFLOP/s"] =
      benchmark::Counter(2 * b.flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["peak%"] =
      benchmark::Counter(2 * b.flops * 100.0 / (kPeakPerThread * num_threads()),
                         benchmark::Counter::kIsIterationInvariantRate);
}

const int kRegistered = [] {
  for (const auto& s : kResNet18)
    benchmark::RegisterBenchmark((std::string("ResNet18/") + s.name).c_str(), BM_Conv, s, false)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("ResNet18/l1_3x3_64-64@56+bias+relu", BM_Conv, kResNet18[1], true)
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("ResNet18/all_20_convs", BM_ResNet18AllConvs)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  for (const auto& s : kMobileNetDw)
    benchmark::RegisterBenchmark((std::string("MobileNetV2/") + s.name).c_str(), BM_Conv, s, false)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  for (int i : {1, 3, 6, 9})
    benchmark::RegisterBenchmark((std::string("Backward/") + kResNet18[i].name).c_str(),
                                 BM_ConvBackward, kResNet18[i])
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  return 0;
}();

}  // namespace

BENCHMARK_MAIN();
