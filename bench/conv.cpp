// conv2d throughput: every distinct ResNet-18 conv layer at batch 1 (224x224 input), reported as
// GFLOP/s (2*N*Cout*Hout*Wout*Cin/groups*KH*KW) and % of the FMA peak (117 GFLOP/s per thread on
// the reference Zen 4 machine), plus MobileNetV2's depthwise 3x3 layers reported as GB/s
// (input + output + weights, float32).
//
// Run: KILN_NUM_THREADS=1 build/bench/bench_conv --benchmark_min_time=0.2
//      KILN_NUM_THREADS=2 build/bench/bench_conv --benchmark_min_time=0.2
// On a machine shared with other jobs, KILN_BENCH_CPU=1 times with the process CPU time instead
// of the wall clock (rates are then per CPU-second: meaningful for 1 thread; with 2 threads the
// pool's spin-waits count too).
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "../runtime/src/kernels/conv_internal.h"  // depthwise_nhwc_f32 alone
#include "fma_peak.h"
#include "kiln/runtime/kernels/conv.h"
#include "kiln/runtime/kernels/mbconv.h"
#include "kiln/runtime/kernels/pool.h"
#include "kiln/runtime/kernels/qgemm.h"
#include "kiln/runtime/target.h"
#include "kiln/runtime/tensor.h"
#include "kiln/runtime/thread_pool.h"

using namespace kiln;
using namespace kiln::kernels;

namespace {

// The "peak%" denominator: this machine's measured FMA peak (fma_peak.h).
using kiln::bench::measured_fma_peak_per_thread;

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

// MobileNetV2's GEMM convs (batch 1, 224x224): the 3x3 stem, then the 1x1 expansions and
// projections of every stage.
const std::vector<Shape> kMobileNetGemm = {
    {"stem_3x3s2_3-32@224", 1, 3, 224, 224, 32, 3, 2, 1, 1, 1},
    {"pw_32-16@112", 1, 32, 112, 112, 16, 1, 1, 0, 1, 1},
    {"pw_16-96@112", 1, 16, 112, 112, 96, 1, 1, 0, 1, 1},
    {"pw_96-24@56", 1, 96, 56, 56, 24, 1, 1, 0, 1, 1},
    {"pw_24-144@56", 1, 24, 56, 56, 144, 1, 1, 0, 1, 2},
    {"pw_144-24@56", 1, 144, 56, 56, 24, 1, 1, 0, 1, 1},
    {"pw_144-32@28", 1, 144, 28, 28, 32, 1, 1, 0, 1, 1},
    {"pw_32-192@28", 1, 32, 28, 28, 192, 1, 1, 0, 1, 3},
    {"pw_192-32@28", 1, 192, 28, 28, 32, 1, 1, 0, 1, 2},
    {"pw_64-384@14", 1, 64, 14, 14, 384, 1, 1, 0, 1, 4},
    {"pw_384-64@14", 1, 384, 14, 14, 64, 1, 1, 0, 1, 3},
    {"pw_576-96@14", 1, 576, 14, 14, 96, 1, 1, 0, 1, 2},
    {"pw_96-576@14", 1, 96, 14, 14, 576, 1, 1, 0, 1, 3},
    {"pw_960-160@7", 1, 960, 7, 7, 160, 1, 1, 0, 1, 2},
    {"pw_160-960@7", 1, 160, 7, 7, 960, 1, 1, 0, 1, 3},
    {"pw_320-1280@7", 1, 320, 7, 7, 1280, 1, 1, 0, 1, 1},
    {"pw_320-1280@7_b8", 8, 320, 7, 7, 1280, 1, 1, 0, 1, 1},  // the head at batch 8
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

// GFLOP/s and the share of the FMA peak of the threads in use, for `flops` per iteration.
void set_rate_counters(benchmark::State& state, double flops) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["peak%"] =
      benchmark::Counter(flops * 100.0 / (measured_fma_peak_per_thread() * num_threads()),
                         benchmark::Counter::kIsIterationInvariantRate);
}

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

// prepared: the weight prepared once (prepare_conv2d_weight: packed for the GEMM, or Winograd
// for 3x3 stride-1 layers), as artifacts and compiled code run their constant weights.
void BM_Conv(benchmark::State& state, Shape s, bool fused_relu, bool prepared) {
  Buffers b = make(s);
  ConvEpilogue ep;
  if (fused_relu) ep.activation = Activation::Relu;
  const Conv2dParams p = params(s);
  const PreparedConv2dWeightPtr prep =
      prepared ? prepare_conv2d_weight(*b.w, p, b.x->sizes()) : nullptr;
  if (prepared) state.SetLabel(prep ? prep->algorithm() : "unprepared");
  for (auto _ : state) {
    conv2d_out(*b.x, *b.w, b.b.get(), p, *b.y, ep, prep.get());
    benchmark::ClobberMemory();
  }
  set_rate_counters(state, b.flops);
  state.SetBytesProcessed(static_cast<int64_t>(b.bytes) * state.iterations());
}

// All 20 convs of ResNet-18 in order (layer counts applied): the network's conv time. Arg 1:
// weights prepared once.
void BM_ResNet18AllConvs(benchmark::State& state) {
  std::vector<Buffers> bufs;
  std::vector<PreparedConv2dWeightPtr> prep;
  double flops = 0;
  for (const auto& s : kResNet18) {
    bufs.push_back(make(s));
    prep.push_back(state.range(0)
                       ? prepare_conv2d_weight(*bufs.back().w, params(s), bufs.back().x->sizes())
                       : nullptr);
    flops += bufs.back().flops * s.count;
  }
  for (auto _ : state) {
    for (size_t i = 0; i < kResNet18.size(); ++i)
      for (int r = 0; r < kResNet18[i].count; ++r)
        conv2d_out(*bufs[i].x, *bufs[i].w, bufs[i].b.get(), params(kResNet18[i]), *bufs[i].y, {},
                   prep[i].get());
    benchmark::ClobberMemory();
  }
  set_rate_counters(state, flops);
}

// Gradient buffers shaped like a layer's input, weight and bias.
struct Grads {
  TensorImplPtr x, w, b;
};
Grads grads_of(const Buffers& b) {
  return {empty(b.x->sizes(), DType::Float32), empty(b.w->sizes(), DType::Float32),
          empty(b.b->sizes(), DType::Float32)};
}

// Backward of the representative 3x3 layers (grad_input + grad_weight + grad_bias).
void BM_ConvBackward(benchmark::State& state, Shape s) {
  Buffers b = make(s);
  Grads g = grads_of(b);
  const Conv2dParams p = params(s);
  for (auto _ : state) {
    conv2d_backward_out(*b.y, *b.x, *b.w, p, g.x.get(), g.w.get(), g.b.get());
    benchmark::ClobberMemory();
  }
  // grad_input and grad_weight are each one forward's worth of FLOPs.
  set_rate_counters(state, 2 * b.flops);
}

// One part of a training step's convolution at the batch `s` is given with (issue #25 asks >= 70%
// of the FMA peak per ResNet-18 layer at batch 8): part 0 the forward (weight not prepared, as
// eager training runs it), 1 grad_input, 2 grad_weight (+ grad_bias). Each is one forward's FLOPs.
void BM_ConvTrainPart(benchmark::State& state, Shape s) {
  Buffers b = make(s);
  Grads g = grads_of(b);
  const Conv2dParams p = params(s);
  const int64_t part = state.range(0);
  for (auto _ : state) {
    if (part == 0) conv2d_out(*b.x, *b.w, b.b.get(), p, *b.y);
    if (part == 1) conv2d_backward_out(*b.y, *b.x, *b.w, p, g.x.get(), nullptr, nullptr);
    if (part == 2) conv2d_backward_out(*b.y, *b.x, *b.w, p, nullptr, g.w.get(), g.b.get());
    benchmark::ClobberMemory();
  }
  set_rate_counters(state, b.flops);
}

// MobileNetV2's inverted-residual blocks (224x224 input): the fused kernel (kernels/mbconv.h) vs
// its three convolutions run one after another (weights prepared in both).
struct Block {
  const char* name;
  int64_t C, H, E, P, stride;  // expand C -> E (E == C: none), depthwise 3x3, project E -> P
  bool residual;
};
const std::vector<Block> kMobileNetBlocks = {
    {"t1_32@112", 32, 112, 32, 16, 1, false},  {"96@112_s2", 16, 112, 96, 24, 2, false},
    {"144@56", 24, 56, 144, 24, 1, true},      {"144@56_s2", 24, 56, 144, 32, 2, false},
    {"192@28", 32, 28, 192, 32, 1, true},      {"192@28_s2", 32, 28, 192, 64, 2, false},
    {"384@14", 64, 14, 384, 64, 1, true},      {"576@14", 96, 14, 576, 96, 1, true},
    {"576@14_s2", 96, 14, 576, 160, 2, false}, {"960@7", 160, 7, 960, 160, 1, true},
};

// A float32 tensor of `dims` with deterministic values in [-scale, scale].
TensorImplPtr filled(const Dims& dims, float scale = 1.0f) {
  auto t = empty(dims, DType::Float32);
  float* p = t->data_ptr<float>();
  for (int64_t i = 0; i < t->numel(); ++i)
    p[i] = scale * static_cast<float>((i * 7919) % 201 - 100) / 100.0f;
  return t;
}

// The strategy --kiln-fuse-mbconv records on the block: channels-last when one image's expanded
// tensor is within the target's mbconv_whole_image_bytes before and after the depthwise.
MBConvStrategy target_strategy(const Block& b, int64_t Ho) {
  const int64_t limit = rt::target_params().mbconv_whole_image_bytes;
  return b.E * b.H * b.H * 4 <= limit && b.E * Ho * Ho * 4 <= limit ? MBConvStrategy::ChannelsLast
                                                                    : MBConvStrategy::Banded;
}

// The fused rows' strategy: KILN_MBCONV_STRATEGY=banded|channels-last, to compare the two with
// bench/paired.py, else the target's.
MBConvStrategy strategy_for(const Block& b, int64_t Ho) {
  const char* e = std::getenv("KILN_MBCONV_STRATEGY");
  if (e && std::string_view(e) == "banded") return MBConvStrategy::Banded;
  if (e && std::string_view(e) == "channels-last") return MBConvStrategy::ChannelsLast;
  return target_strategy(b, Ho);
}

void BM_MBConv(benchmark::State& state, Block blk) {
  const int64_t N = state.range(0);
  const bool fused = state.range(1) != 0;
  const bool expand = blk.E != blk.C;
  const int64_t Ho = (blk.H + 2 - 3) / blk.stride + 1;
  auto x = filled(Dims{N, blk.C, blk.H, blk.H}, 1.0f);
  auto we = filled(Dims{blk.E, blk.C, 1, 1}, 0.1f);
  auto wd = filled(Dims{blk.E, 1, 3, 3}, 0.3f);
  auto wp = filled(Dims{blk.P, blk.E, 1, 1}, 0.1f);
  auto be = filled(Dims{blk.E}, 0.1f), bd = filled(Dims{blk.E}, 0.1f);
  auto bp = filled(Dims{blk.P}, 0.1f);
  auto res = filled(Dims{N, blk.P, Ho, Ho}, 1.0f);
  auto e = empty(Dims{N, blk.E, blk.H, blk.H}, DType::Float32);
  auto d = empty(Dims{N, blk.E, Ho, Ho}, DType::Float32);
  auto y = empty(Dims{N, blk.P, Ho, Ho}, DType::Float32);
  MBConvOperands ops;
  ops.input = x.get(), ops.expand_weight = expand ? we.get() : nullptr;
  ops.expand_bias = expand ? be.get() : nullptr;
  ops.dw_weight = wd.get(), ops.dw_bias = bd.get(), ops.project_weight = wp.get();
  ops.project_bias = bp.get(), ops.residual = blk.residual ? res.get() : nullptr;
  MBConvParams p;
  p.stride_h = p.stride_w = blk.stride;
  p.pad_h = p.pad_w = 1;
  p.expand.activation = p.dw.activation = Activation::Relu6;
  p.strategy = strategy_for(blk, Ho);
  Conv2dParams pw, dw;
  dw.stride_h = dw.stride_w = blk.stride, dw.pad_h = dw.pad_w = 1, dw.groups = blk.E;
  auto prep = prepare_mbconv(ops, p.strategy);
  auto prep_e = expand ? prepare_conv2d_weight(*we, pw, x->sizes()) : nullptr;
  auto prep_p = prepare_conv2d_weight(*wp, pw, d->sizes());
  ConvEpilogue relu6, proj;
  relu6.activation = Activation::Relu6;
  proj.residual = ops.residual;
  // Mode 2: the expansion as its own conv, then depthwise + projection fused.
  MBConvOperands dw_proj = ops;
  dw_proj.input = expand ? e.get() : x.get();
  dw_proj.expand_weight = nullptr, dw_proj.expand_bias = nullptr;
  auto prep_dp = prepare_mbconv(dw_proj, p.strategy);
  // Mode 3: fused, with channels-last input, residual and output (a block inside a chain of them:
  // --kiln-mbconv-channels-last); the timing does not depend on the values.
  MBConvParams p_cl = p;
  p_cl.input_channels_last = p_cl.output_channels_last = true;
  p_cl.strategy = MBConvStrategy::ChannelsLast;
  auto prep_cl = prepare_mbconv(ops, p_cl.strategy);
  for (auto _ : state) {
    if (state.range(1) == 3) {
      mbconv_out(ops, p_cl, *y, prep_cl.get());
    } else if (state.range(1) == 2) {
      if (expand) conv2d_out(*x, *we, be.get(), pw, *e, relu6, prep_e.get());
      mbconv_out(dw_proj, p, *y, prep_dp.get());
    } else if (fused) {
      mbconv_out(ops, p, *y, prep.get());
    } else {
      if (expand) conv2d_out(*x, *we, be.get(), pw, *e, relu6, prep_e.get());
      conv2d_out(expand ? *e : *x, *wd, bd.get(), dw, *d, relu6);
      conv2d_out(*d, *wp, bp.get(), pw, *y, proj, prep_p.get());
    }
    benchmark::ClobberMemory();
  }
  state.SetLabel(state.range(1) == 3   ? "fused, channels-last in and out"
                 : state.range(1) == 2 ? "expand, then dw+project fused"
                 : fused               ? "fused"
                                       : "three convs");
}

// A classifier head: 1x1 conv + bias + relu6, then the global average pool -- MobileNetV2's
// 320 -> 1280 at 7x7 -- as two kernels (fused:0, conv2d_out + adaptive_avg_pool2d_out) or as
// conv2d_avgpool_out (fused:1). Weights prepared in both.
void BM_HeadAvgPool(benchmark::State& state) {
  const int64_t N = state.range(0), C = 320, H = 7, O = 1280;
  auto x = filled(Dims{N, C, H, H});
  auto w = filled(Dims{O, C, 1, 1});
  auto b = filled(Dims{O});
  auto y = empty(Dims{N, O, H, H}, DType::Float32),
       pooled = empty(Dims{N, O, 1, 1}, DType::Float32);
  Conv2dParams p;
  ConvEpilogue ep;
  ep.activation = Activation::Relu6;
  auto prep = prepare_conv2d_weight(*w, p, x->sizes());
  for (auto _ : state) {
    if (state.range(1)) {
      conv2d_avgpool_out(*x, *w, b.get(), p, *pooled, ep, prep.get());
    } else {
      conv2d_out(*x, *w, b.get(), p, *y, ep, prep.get());
      adaptive_avg_pool2d_out(*y, *pooled);
    }
    benchmark::ClobberMemory();
  }
  state.SetLabel(prep->algorithm());
}

// The channels-last depthwise 3x3 of the fused mbconv blocks (conv_detail::depthwise_nhwc_f32) on
// one image of C channels, H x H, one thread, relu6: the kernel alone, its input in L2 or L3 as the
// block leaves it (the expanded image: 200-600 KB).
void BM_DepthwiseNhwc(benchmark::State& state) {
  const int64_t C = state.range(0), H = state.range(1), s = state.range(2);
  kernels::conv_detail::ConvGeom g;
  g.N = 1, g.C = C, g.H = H, g.W = H, g.O = C, g.KH = 3, g.KW = 3, g.G = C, g.Cg = 1, g.Og = 1;
  g.sh = s, g.sw = s, g.ph = 1, g.pw = 1;
  g.Ho = (H + 2 - 3) / s + 1, g.Wo = g.Ho;
  auto x = filled(Dims{H * H * C}), w = filled(Dims{9 * C}), b = filled(Dims{C});
  auto y = empty(Dims{g.Ho * g.Wo * C}, DType::Float32);
  ConvEpilogue ep;
  ep.activation = Activation::Relu6;
  for (auto _ : state) {
    kernels::conv_detail::depthwise_nhwc_f32(g, x->data_ptr<float>(), w->data_ptr<float>(),
                                             b->data_ptr<float>(), y->data_ptr<float>(), ep, 0,
                                             g.Ho * g.Wo);
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * 9 * C * g.Ho * g.Wo * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

// The machine's fp32 FMA peak for one thread, measured the same way as the convs (12 independent
// AVX2 FMA chains in registers): the denominator for "% of measured peak".
void BM_FmaPeak(benchmark::State& state) {
  // Distinct starting values: identical chains would be merged by the compiler (CSE).
  __m256 a0 = _mm256_set1_ps(1.0f), a1 = _mm256_set1_ps(1.1f), a2 = _mm256_set1_ps(1.2f),
         a3 = _mm256_set1_ps(1.3f), a4 = _mm256_set1_ps(1.4f), a5 = _mm256_set1_ps(1.5f),
         a6 = _mm256_set1_ps(1.6f), a7 = _mm256_set1_ps(1.7f), a8 = _mm256_set1_ps(1.8f),
         a9 = _mm256_set1_ps(1.9f), a10 = _mm256_set1_ps(2.0f), a11 = _mm256_set1_ps(2.1f);
  const __m256 b = _mm256_set1_ps(0.9999999f), c = _mm256_set1_ps(1e-7f);
  constexpr int64_t kInner = 1 << 16;
  for (auto _ : state) {
    for (int64_t k = 0; k < kInner; ++k) {
#define KILN_FMA12(x) x = _mm256_fmadd_ps(x, b, c);
      KILN_FMA12(a0)
      KILN_FMA12(a1)
      KILN_FMA12(a2)
      KILN_FMA12(a3)
      KILN_FMA12(a4)
      KILN_FMA12(a5)
      KILN_FMA12(a6)
      KILN_FMA12(a7)
      KILN_FMA12(a8)
      KILN_FMA12(a9)
      KILN_FMA12(a10)
      KILN_FMA12(a11)
#undef KILN_FMA12
      __asm__ volatile("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5));
    }
  }
  __m256 sum = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
  sum = _mm256_add_ps(sum, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
  benchmark::DoNotOptimize(sum);
  state.counters["GFLOP/s"] =
      benchmark::Counter(kInner * 12 * 16 * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// The int8 convolution (kernels/qgemm.h) on the same layer: uint8 activations, per-channel int8
// weights, int32 bias, uint8 output with relu. "GOP/s" counts multiply-adds as 2 ops like the
// float rows' GFLOP/s; "fp32peak%" divides by the fp32 FMA peak so the rows compare directly.
// Arg: 0 the target's microkernel family, weights packed per call; 1 the portable family; 2 the
// target's family with the weights prepared once (as artifacts run their constant weights); 4
// as 2 on channels-last activations.
void BM_QConv(benchmark::State& state, Shape s) {
  const Buffers f = make(s);
  const int64_t mode = state.range(0);
  auto nhwc = [&](Dims d) { return mode == 4 ? Dims{d[0], d[2], d[3], d[1]} : d; };
  auto x = empty(nhwc(f.x->sizes()), DType::UInt8);
  auto w = empty(f.w->sizes(), DType::Int8);
  auto y = empty(nhwc(f.y->sizes()), DType::UInt8);
  auto bias = empty(Dims{s.O}, DType::Int32);
  for (int64_t i = 0; i < x->numel(); ++i) x->data_ptr<uint8_t>()[i] = uint8_t((i * 7919) % 251);
  for (int64_t i = 0; i < w->numel(); ++i) w->data_ptr<int8_t>()[i] = int8_t((i * 31) % 255 - 127);
  for (int64_t i = 0; i < s.O; ++i) bias->data_ptr<int32_t>()[i] = int32_t(i * 37 - 1000);
  auto scalar = [](DType d, double v) {
    auto t = empty(Dims{}, d);
    if (d == DType::Float32)
      t->data_ptr<float>()[0] = float(v);
    else
      t->data_ptr<int32_t>()[0] = int32_t(v);
    return t;
  };
  auto xs = scalar(DType::Float32, 0.02), xz = scalar(DType::Int32, 128);
  auto ys = scalar(DType::Float32, 0.5), yz = scalar(DType::Int32, 3);
  auto ws = empty(Dims{s.O}, DType::Float32), wz = empty(Dims{s.O}, DType::Int32);
  for (int64_t o = 0; o < s.O; ++o) {
    ws->data_ptr<float>()[o] = 0.001f * float(1 + o % 7);
    wz->data_ptr<int32_t>()[o] = 0;
  }
  const QuantizedOperands q{xs.get(),   xz.get(), ws.get(), wz.get(),
                            bias.get(), ys.get(), yz.get(), true};
  // mode 0: auto, packed per call; 1: portable; 2: auto, prepared; 3: VNNI, prepared (beside
  // AMX where the CPU has both); 4: auto, prepared, channels-last.
  if (mode == 3 && !qgemm_isa_available(QGemmIsa::Avx512Vnni))
    return state.SkipWithError("no AVX-512 VNNI on this CPU");
  set_qgemm_isa(mode == 1 ? QGemmIsa::Portable : mode == 3 ? QGemmIsa::Avx512Vnni : QGemmIsa::Auto);
  state.SetLabel(qgemm_isa_name(qgemm_isa()));
  Conv2dParams p = params(s);
  p.channels_last = mode == 4;
  const PreparedQWeightPtr prepared =
      mode >= 2 ? prepare_qconv2d_weight(*w, q, p, DType::UInt8, DType::UInt8) : nullptr;
  for (auto _ : state) {
    qconv2d_out(*x, *w, q, p, *y, prepared.get());
    benchmark::ClobberMemory();
  }
  set_qgemm_isa(QGemmIsa::Auto);
  state.counters["GOP/s"] =
      benchmark::Counter(f.flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["fp32peak%"] =
      benchmark::Counter(f.flops * 100.0 / (measured_fma_peak_per_thread() * num_threads()),
                         benchmark::Counter::kIsIterationInvariantRate);
  // Against the int8 (AVX-512 VNNI) peak of the threads in use, where the CPU has one.
  if (const double vnni = kiln::bench::measured_vnni_peak_per_thread(); vnni > 0)
    state.counters["int8peak%"] = benchmark::Counter(
        f.flops * 100.0 / (vnni * num_threads()), benchmark::Counter::kIsIterationInvariantRate);
  // The activations' bytes in and out (the weights stay in cache): what bounds the thin layers.
  state.counters["GB/s"] = benchmark::Counter(double(x->numel() + y->numel()) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

// Wall clock by default; process CPU time with KILN_BENCH_CPU=1.
benchmark::internal::Benchmark* timing(benchmark::internal::Benchmark* b) {
  const char* e = std::getenv("KILN_BENCH_CPU");
  return (e && e[0] == '1') ? b->MeasureProcessCPUTime() : b->UseRealTime();
}

const int kRegistered = [] {
  timing(benchmark::RegisterBenchmark("Peak/fma_fp32_1thread", BM_FmaPeak))
      ->Unit(benchmark::kMicrosecond);
  for (const auto& s : kResNet18) {
    timing(benchmark::RegisterBenchmark((std::string("ResNet18/") + s.name).c_str(), BM_Conv, s,
                                        false, false))
        ->Unit(benchmark::kMicrosecond);
    timing(benchmark::RegisterBenchmark((std::string("ResNet18Prepared/") + s.name).c_str(),
                                        BM_Conv, s, false, true))
        ->Unit(benchmark::kMicrosecond);
  }
  for (const auto& s : kResNet18)
    timing(
        benchmark::RegisterBenchmark((std::string("ResNet18Int8/") + s.name).c_str(), BM_QConv, s))
        ->ArgName("mode")
        ->Arg(0)
        ->Arg(2)
        ->Arg(3)
        ->Arg(4)
        ->Unit(benchmark::kMicrosecond);
  // An int8 layer at batch 8 in one mode.
  auto int8_b8 = [](const std::string& family, Shape s, int64_t mode) {
    const std::string name = family + "/" + s.name + "_b8";
    s.N = 8;
    timing(benchmark::RegisterBenchmark(name.c_str(), BM_QConv, s))
        ->ArgName("mode")
        ->Arg(mode)
        ->Unit(benchmark::kMicrosecond);
  };
  // The weights shared by 8 images.
  for (const Shape& s : {kResNet18[1], kResNet18[9]}) int8_b8("ResNet18Int8", s, 2);
  // MobileNetV2's int8 layers as its channels-last int8 artifact runs them (mode 4): 1x1s with
  // few input channels and the depthwise convs, bound by the activations' bytes.
  for (const auto& s : {kMobileNetGemm[1], kMobileNetGemm[2], kMobileNetGemm[3], kMobileNetGemm[4],
                        kMobileNetDw[0], kMobileNetDw[1], kMobileNetDw[2]})
    int8_b8("MobileNetV2Int8", s, 4);
  timing(benchmark::RegisterBenchmark("ResNet18Int8/l1_3x3_64-64@56", BM_QConv, kResNet18[1]))
      ->ArgName("mode")
      ->Arg(1)
      ->Unit(benchmark::kMicrosecond);
  timing(benchmark::RegisterBenchmark("ResNet18/l1_3x3_64-64@56+bias+relu", BM_Conv, kResNet18[1],
                                      true, false))
      ->Unit(benchmark::kMicrosecond);
  timing(benchmark::RegisterBenchmark("ResNet18/all_20_convs", BM_ResNet18AllConvs))
      ->ArgName("prepared")
      ->Arg(0)
      ->Arg(1)
      ->Unit(benchmark::kMillisecond);
  for (const auto& s : kMobileNetGemm)
    timing(benchmark::RegisterBenchmark((std::string("MobileNetV2Prepared/") + s.name).c_str(),
                                        BM_Conv, s, false, true))
        ->Unit(benchmark::kMicrosecond);
  for (const auto& s : kMobileNetDw)
    timing(benchmark::RegisterBenchmark((std::string("MobileNetV2/") + s.name).c_str(), BM_Conv, s,
                                        false, false))
        ->Unit(benchmark::kMicrosecond);
  for (const auto* shapes : {&kMobileNetGemm, &kMobileNetDw})
    for (const auto& s : *shapes)
      timing(benchmark::RegisterBenchmark((std::string("MobileNetV2Int8/") + s.name).c_str(),
                                          BM_QConv, s))
          ->ArgName("mode")
          ->Arg(2)
          ->Arg(4)
          ->Unit(benchmark::kMicrosecond);
  for (const Block& b : kMobileNetBlocks) {
    auto* r = timing(benchmark::RegisterBenchmark((std::string("MBConv/") + b.name).c_str(),
                                                  BM_MBConv, b))
                  ->ArgNames({"batch", "fused"})
                  ->Args({1, 0})
                  ->Args({1, 1})
                  ->Args({1, 2})
                  ->Args({8, 0})
                  ->Args({8, 1})
                  ->Args({8, 2})
                  ->Unit(benchmark::kMicrosecond);
    // Channels-last operands only pass between blocks that run channels-last.
    const int64_t Ho = (b.H + 2 - 3) / b.stride + 1;
    if (target_strategy(b, Ho) == MBConvStrategy::ChannelsLast) r->Args({1, 3})->Args({8, 3});
  }
  timing(benchmark::RegisterBenchmark("DepthwiseNhwc", BM_DepthwiseNhwc))
      ->ArgNames({"C", "H", "stride"})
      ->Args({192, 28, 1})
      ->Args({192, 28, 2})
      ->Args({384, 14, 1})
      ->Args({576, 14, 1})
      ->Args({576, 14, 2})
      ->Args({960, 7, 1})
      ->Unit(benchmark::kMicrosecond);
  timing(benchmark::RegisterBenchmark("HeadAvgPool/pw_320-1280@7", BM_HeadAvgPool))
      ->ArgNames({"batch", "fused"})
      ->Args({1, 0})
      ->Args({1, 1})
      ->Args({8, 0})
      ->Args({8, 1})
      ->Unit(benchmark::kMicrosecond);
  for (int i : {1, 3, 6, 9})
    timing(benchmark::RegisterBenchmark((std::string("Backward/") + kResNet18[i].name).c_str(),
                                        BM_ConvBackward, kResNet18[i]))
        ->Unit(benchmark::kMicrosecond);
  // TrainB8/<layer>/part: ResNet-18's distinct layers at batch 8, part 0 forward, 1 grad_input
  // (not for the stem: its input needs none), 2 grad_weight.
  for (Shape s : kResNet18) {
    s.N = 8;
    auto* r = timing(benchmark::RegisterBenchmark((std::string("TrainB8/") + s.name).c_str(),
                                                  BM_ConvTrainPart, s))
                  ->ArgName("part")
                  ->Unit(benchmark::kMicrosecond);
    for (int part : {0, 1, 2})
      if (part != 1 || s.C != 3) r->Arg(part);
  }
  return 0;
}();

}  // namespace

BENCHMARK_MAIN();
