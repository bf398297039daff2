// The CUDA backend on a GPU (scripts/gpu_check.sh runs it; skips without a device): the
// bandwidth of a device-to-device copy beside the generated pointwise kernel relu(x*a+b)*c,
// fused and as four eager ops; cuBLASLt SGEMM 4096^3 in float32 and TF32; the eager launch
// overhead of a small add; an MLP and ResNet-18 (cuDNN convolutions) in eager training and
// inference. Device times come from CUDA events (manual time) unless said otherwise.

#include <benchmark/benchmark.h>

#include "kiln/kiln.h"
#include "kiln/models.h"
#include "kiln/nn.h"
#include "kiln/optim.h"
#include "kiln/runtime/cuda/cuda.h"
#include "kiln/runtime/cuda/matmul.h"
#include "kiln/runtime/cuda/pointwise.h"

namespace {

using namespace kiln;
using kernels::BinaryOp;
using kernels::UnaryOp;

bool skip_without_device(benchmark::State& state) {
  if (cuda::is_available()) return false;
  state.SkipWithError(cuda::unavailable_reason().c_str());
  return true;
}

Tensor device_tensor(int64_t n) {
  return (randn({n}) * 0.5).cuda();
}

// Times `run` with events around each iteration (one launch or a few per iteration).
template <typename F>
void time_device(benchmark::State& state, F run) {
  const cuda::StreamId s = cuda::current_stream();
  run();  // warm up: compiles and caches the kernel, picks the cuBLASLt algorithm
  cuda::synchronize(s);
  cuda::Event start, end;
  for (auto _ : state) {
    start.record(s);
    run();
    end.record(s);
    end.synchronize();
    state.SetIterationTime(start.elapsed_ms(end) / 1e3);
  }
}

constexpr int64_t k256MB = (256ll << 20) / 4;

void BM_CopyDeviceToDevice(benchmark::State& state) {
  if (skip_without_device(state)) return;
  Tensor x = device_tensor(k256MB);
  Tensor y(empty(Dims{k256MB}, DType::Float32, Device::CUDA));
  const cuda::DevicePtr dst = reinterpret_cast<uintptr_t>(y.impl()->raw_data());
  const cuda::DevicePtr src = reinterpret_cast<uintptr_t>(x.impl()->raw_data());
  time_device(state,
              [&] { cuda::copy_device_to_device(dst, src, k256MB * 4, cuda::current_stream()); });
  state.SetBytesProcessed(state.iterations() * k256MB * 8);  // read + write
}
BENCHMARK(BM_CopyDeviceToDevice)->UseManualTime()->Unit(benchmark::kMillisecond);

// relu(x * a + b) * c with scalars a, b, c: one generated kernel, one read and one write of x.
void BM_PointwiseChainFused(benchmark::State& state) {
  if (skip_without_device(state)) return;
  Tensor x = device_tensor(k256MB);
  Tensor y(empty(Dims{k256MB}, DType::Float32, Device::CUDA));
  cuda::PointwiseExpr e;
  auto t = e.binary(BinaryOp::Add, e.binary(BinaryOp::Mul, e.input(0), e.constant(1.5)),
                    e.constant(-0.25));
  e.binary(BinaryOp::Mul, e.unary(UnaryOp::Relu, t), e.constant(0.75));
  const TensorImpl* in[] = {x.impl()};
  time_device(state,
              [&] { cuda::pointwise_out("chain", e, in, *y.impl(), cuda::current_stream()); });
  state.SetBytesProcessed(state.iterations() * k256MB * 8);
}
BENCHMARK(BM_PointwiseChainFused)->UseManualTime()->Unit(benchmark::kMillisecond);

// The same chain as four eager ops (four kernels, intermediates allocated from the cache).
void BM_PointwiseChainEager(benchmark::State& state) {
  if (skip_without_device(state)) return;
  Tensor x = device_tensor(k256MB);
  time_device(state, [&] { benchmark::DoNotOptimize(relu(x * 1.5 + -0.25) * 0.75); });
  state.SetBytesProcessed(state.iterations() * k256MB * 8);  // the fused minimum
}
BENCHMARK(BM_PointwiseChainEager)->UseManualTime()->Unit(benchmark::kMillisecond);

void BM_Sgemm4096(benchmark::State& state) {
  if (skip_without_device(state)) return;
  const bool tf32 = state.range(0) != 0;
  const int64_t n = 4096;
  Tensor a = (randn({n, n})).cuda(), b = (randn({n, n})).cuda();
  Tensor c(empty(Dims{n, n}, DType::Float32, Device::CUDA));
  time_device(state, [&] {
    cuda::matmul_out(*a.impl(), *b.impl(), nullptr, false, *c.impl(), {.allow_tf32 = tf32},
                     cuda::current_stream());
  });
  state.counters["TFLOP/s"] =
      benchmark::Counter(2.0 * n * n * n * state.iterations() / 1e12, benchmark::Counter::kIsRate);
  state.SetLabel(tf32 ? "tf32" : "fp32");
}
BENCHMARK(BM_Sgemm4096)->Arg(0)->Arg(1)->UseManualTime()->Unit(benchmark::kMillisecond);

// Host time per eager op (allocation, kernel lookup, launch) on small tensors: ops are queued
// without waiting, so this is the launch overhead (the peer script times PyTorch's the same way).
void BM_EagerLaunchOverhead(benchmark::State& state) {
  if (skip_without_device(state)) return;
  Tensor a = device_tensor(1024), b = device_tensor(1024);
  for (int i = 0; i < 100; ++i) benchmark::DoNotOptimize(a + b);
  cuda::synchronize(cuda::current_stream());
  for (auto _ : state) benchmark::DoNotOptimize(a + b);
  cuda::synchronize(cuda::current_stream());
}
BENCHMARK(BM_EagerLaunchOverhead)->Unit(benchmark::kMicrosecond);

// One eager training step of an MLP (Linear 1024->4096, ReLU, Linear 4096->1024) at batch 256:
// forward, MSE loss, backward, SGD with momentum. Host wall time with the step synchronized.
void BM_MlpTrainStep(benchmark::State& state) {
  if (skip_without_device(state)) return;
  manual_seed(0);
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(1024, 4096), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(4096, 1024)});
  model->to(Device::CUDA);
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.01).momentum(0.9));
  Tensor x = randn({256, 1024}).cuda(), y = randn({256, 1024}).cuda();
  auto step = [&] {
    opt.zero_grad();
    Tensor loss = mse_loss(model->forward(x), y);
    loss.backward();
    opt.step();
  };
  for (int i = 0; i < 3; ++i) step();
  cuda::synchronize(cuda::current_stream());
  for (auto _ : state) {
    step();
    cuda::synchronize(cuda::current_stream());
  }
}
BENCHMARK(BM_MlpTrainStep)->Unit(benchmark::kMillisecond);

// ResNet-18 at batch 64 on 224x224 images, float32 with TF32 convolutions (the default, as
// PyTorch's): inference in eval mode (device time of one forward), and one eager training step
// (forward, cross-entropy against random classes, backward, SGD with momentum; host wall time,
// synchronized).
void BM_ResNet18Inference(benchmark::State& state) {
  if (skip_without_device(state)) return;
  manual_seed(0);
  auto model = models::resnet18();
  model->to(Device::CUDA);
  model->eval();
  Tensor x = randn({64, 3, 224, 224}).cuda();
  autograd::NoGradGuard no_grad;
  time_device(state, [&] { benchmark::DoNotOptimize(model->forward(x)); });
  state.counters["images/s"] =
      benchmark::Counter(64.0 * state.iterations(), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ResNet18Inference)->UseManualTime()->Unit(benchmark::kMillisecond);

void BM_ResNet18TrainStep(benchmark::State& state) {
  if (skip_without_device(state)) return;
  manual_seed(0);
  auto model = models::resnet18();
  model->to(Device::CUDA);
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.01).momentum(0.9));
  Tensor x = randn({64, 3, 224, 224}).cuda();
  Tensor y = randint(0, 1000, {64}).cuda();
  auto step = [&] {
    opt.zero_grad();
    Tensor loss = cross_entropy(model->forward(x), y);
    loss.backward();
    opt.step();
  };
  for (int i = 0; i < 3; ++i) step();  // chooses and times cuDNN's plans once per shape
  cuda::synchronize(cuda::current_stream());
  cuda::device_allocator().reset_peak();
  for (auto _ : state) {
    step();
    cuda::synchronize(cuda::current_stream());
  }
  const cuda::CachingAllocatorStats st = cuda::device_allocator().stats();
  state.counters["peak_MB"] = static_cast<double>(st.peak_allocated_bytes) / 1e6;
}
BENCHMARK(BM_ResNet18TrainStep)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
