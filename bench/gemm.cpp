// fp32 GEMM throughput (GFLOP/s = 2*M*N*K per call).
// Run: KILN_NUM_THREADS=1 build/bench/bench_gemm --benchmark_min_time=0.2
// (KILN_GEMM_ISA=avx512|avx2|scalar forces a microkernel family; KILN_CPU=SPEC a target
// description, e.g. KILN_CPU=host,l2=1M.) BM_OpenBlasSgemm runs OpenBLAS's cblas_sgemm beside it
// when libopenblas is installed (dlopen'ed: a peer, not a dependency; OPENBLAS_NUM_THREADS
// follows KILN_NUM_THREADS).
#include <benchmark/benchmark.h>

#include <dlfcn.h>

#include <random>
#include <vector>

#include "fma_peak.h"
#include "kiln/runtime/kernels/gemm.h"
#include "kiln/runtime/thread_pool.h"

using namespace kiln;

namespace {

std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

void set_flops(benchmark::State& state, int64_t M, int64_t N, int64_t K) {
  const double flops = 2.0 * M * N * K * state.iterations();
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsRate);
  // Against this machine's measured FMA peak for the threads the GEMM may use.
  state.counters["peak%"] =
      benchmark::Counter(flops * 100.0 / (bench::measured_fma_peak_per_thread() * num_threads()),
                         benchmark::Counter::kIsRate);
}

// Args: M, N, K, trans_b (1: B stored [N, K], as a linear layer's weight).
void BM_Sgemm(benchmark::State& state) {
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  const bool tb = state.range(3) != 0;
  auto A = random_vec(M * K, 1), B = random_vec(K * N, 2), C = random_vec(M * N, 3);
  for (auto _ : state) {
    kernels::sgemm(false, tb, M, N, K, 1.0f, A.data(), K, B.data(), tb ? K : N, 0.0f, C.data(), N);
    benchmark::DoNotOptimize(C.data());
  }
  set_flops(state, M, N, K);
  state.SetLabel(kernels::gemm_isa_name(kernels::sgemm_isa()));
}

// The naive triple loop (i, k, j order so it at least streams rows), for a ratio.
void BM_NaiveGemm(benchmark::State& state) {
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  auto A = random_vec(M * K, 1), B = random_vec(K * N, 2), C = random_vec(M * N, 3);
  for (auto _ : state) {
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < N; ++j) {
        float acc = 0.0f;
        for (int64_t k = 0; k < K; ++k) acc += A[i * K + k] * B[k * N + j];
        C[i * N + j] = acc;
      }
    }
    benchmark::DoNotOptimize(C.data());
  }
  set_flops(state, M, N, K);
}

// Bias + ReLU epilogue (a fused conv/linear layer).
void BM_SgemmBiasRelu(benchmark::State& state) {
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  auto A = random_vec(M * K, 1), B = random_vec(K * N, 2), C = random_vec(M * N, 3);
  auto bias = random_vec(M, 4);
  kernels::Epilogue e;
  e.bias_kind = kernels::Epilogue::Bias::PerRow;
  e.bias = bias.data();
  e.activation = kernels::Activation::Relu;
  for (auto _ : state) {
    kernels::sgemm(false, false, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, C.data(), N, e);
    benchmark::DoNotOptimize(C.data());
  }
  set_flops(state, M, N, K);
}

// A pre-packed right operand (sgemm_pack_b), as channels-last convs use their weights: M pixels of
// one image, N output channels, K input channels. All operands fit in L2: the rate of the
// microkernel and the packing of A on these shapes, without the model's cache traffic.
void BM_SgemmPackedB(benchmark::State& state) {
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  auto A = random_vec(M * K, 1), B = random_vec(K * N, 2), C = random_vec(M * N, 3);
  auto packed = kernels::sgemm_pack_b(false, K, N, B.data(), N);
  for (auto _ : state) {
    kernels::sgemm_packed_b(false, M, 1.0f, A.data(), K, *packed, 0.0f, C.data(), N);
    benchmark::DoNotOptimize(C.data());
  }
  set_flops(state, M, N, K);
}

// The same with an activation in the epilogue (a transformer's FFN up-projection and its GELU):
// the product against the activation pass over C's rows.
void BM_SgemmPackedBActivation(benchmark::State& state) {
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  auto A = random_vec(M * K, 1), B = random_vec(K * N, 2), C = random_vec(M * N, 3);
  auto packed = kernels::sgemm_pack_b(false, K, N, B.data(), N);
  kernels::Epilogue e;
  e.activation = static_cast<kernels::Activation>(state.range(3));
  for (auto _ : state) {
    kernels::sgemm_packed_b(false, M, 1.0f, A.data(), K, *packed, 0.0f, C.data(), N, e);
    benchmark::DoNotOptimize(C.data());
  }
  set_flops(state, M, N, K);
}

}  // namespace

// Activation 0: none, 4: GELU (erf), 6: SiLU (kernels::Activation).
BENCHMARK(BM_SgemmPackedBActivation)
    ->ArgNames({"M", "N", "K", "act"})
    ->Args({128, 1024, 256, 0})
    ->Args({128, 1024, 256, 4})
    ->Args({128, 1024, 256, 6})
    ->UseRealTime();

BENCHMARK(BM_SgemmPackedB)
    ->ArgNames({"M", "N", "K"})
    // MobileNetV2's channels-last blocks at batch 1 (expansion, projection): 14x14 and 7x7 maps,
    // and the 7x7 head
    ->Args({784, 192, 32})
    ->Args({784, 32, 192})
    ->Args({196, 384, 64})
    ->Args({196, 64, 384})
    ->Args({196, 576, 96})
    ->Args({196, 96, 576})
    ->Args({48, 960, 160})
    ->Args({49, 960, 160})
    ->Args({49, 160, 960})
    ->Args({49, 1280, 320})
    // ResNet-18's layer4 3x3 convs at batch 1 (gemm-ch: im2col rows against the packed weight);
    // B is 9 MB here, so it comes from L3, not L2
    ->Args({49, 512, 4608})
    // The transformer block of bench_codegen (d 256, FFN 1024, 128 tokens): QKV, FFN up / down
    ->Args({128, 768, 256})
    ->Args({128, 1024, 256})
    ->Args({128, 256, 1024})
    // bench_codegen's LSTM step at batch 1 and 8: h [B, 256] times the recurrent weight [1024, 256]
    ->Args({1, 1024, 256})
    ->Args({8, 1024, 256})
    ->Args({8, 512, 256})
    // ... and that product with a weight of 512 KB and 256 KB: its rate from L2
    ->Args({1, 512, 256})
    ->Args({1, 256, 256})
    // ... and its input projection over all 64 steps at once (x [64 B, 128] times [1024, 128])
    ->Args({64, 1024, 128})
    ->Args({512, 1024, 128})
    ->UseRealTime();

// OpenBLAS's cblas_sgemm on the same operands (row-major), for the same-run ratio. Skipped when
// libopenblas is not installed.
using CblasSgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*,
                            int, float, float*, int);
CblasSgemm openblas_sgemm() {
  static const CblasSgemm fn = []() -> CblasSgemm {
    for (const char* lib : {"libopenblas.so.0", "libopenblas.so"}) {
      if (void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL)) {
        using SetThreads = void (*)(int);
        if (auto set = reinterpret_cast<SetThreads>(dlsym(h, "openblas_set_num_threads")))
          set(num_threads());
        return reinterpret_cast<CblasSgemm>(dlsym(h, "cblas_sgemm"));
      }
    }
    return nullptr;
  }();
  return fn;
}

void BM_OpenBlasSgemm(benchmark::State& state) {
  const CblasSgemm gemm = openblas_sgemm();
  if (gemm == nullptr) {
    state.SkipWithError("libopenblas is not installed (apt install libopenblas0-pthread)");
    return;
  }
  const int M = static_cast<int>(state.range(0)), N = static_cast<int>(state.range(1)),
            K = static_cast<int>(state.range(2));
  const bool tb = state.range(3) != 0;
  auto A = random_vec(size_t(M) * K, 1), B = random_vec(size_t(K) * N, 2),
       C = random_vec(size_t(M) * N, 3);
  constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;
  for (auto _ : state) {
    gemm(kRowMajor, kNoTrans, tb ? kTrans : kNoTrans, M, N, K, 1.0f, A.data(), K, B.data(),
         tb ? K : N, 0.0f, C.data(), N);
    benchmark::DoNotOptimize(C.data());
  }
  set_flops(state, M, N, K);
}
BENCHMARK(BM_OpenBlasSgemm)
    ->ArgNames({"M", "N", "K", "tb"})
    ->Args({1024, 1024, 1024, 0})
    ->Args({2048, 2048, 2048, 0})
    ->Args({1024, 1024, 1024, 1})
    ->Args({64, 3136, 576, 0})
    ->Args({256, 196, 2304, 0})
    ->UseRealTime();

BENCHMARK(BM_Sgemm)
    ->ArgNames({"M", "N", "K", "tb"})
    // square
    ->Args({256, 256, 256, 0})
    ->Args({512, 512, 512, 0})
    ->Args({1024, 1024, 1024, 0})
    ->Args({2048, 2048, 2048, 0})
    ->Args({1024, 1024, 1024, 1})
    // linear layers y = x W^T, W [4096, 4096]: batch 1, 8, 64
    ->Args({1, 4096, 4096, 1})
    ->Args({8, 4096, 4096, 1})
    ->Args({64, 4096, 4096, 1})
    // VGG fc6 at batch 1 (K = 512*7*7) and a ResNet-18 fc at batch 64
    ->Args({1, 4096, 25088, 1})
    ->Args({64, 1000, 512, 1})
    // MobileNetV2's classifier, 1280 -> 1000, at batch 1 and 8
    ->Args({1, 1000, 1280, 1})
    ->Args({8, 1000, 1280, 1})
    // the LSTM step's recurrent product, batch 1 and 8 (BM_SgemmPackedB: the same, weight packed)
    ->Args({1, 1024, 256, 1})
    ->Args({8, 1024, 256, 1})
    // ResNet-18 convs as im2col GEMMs: C_out x (H*W) x (C_in*3*3)
    ->Args({64, 3136, 576, 0})
    ->Args({128, 784, 1152, 0})
    ->Args({256, 196, 2304, 0})
    ->Args({512, 49, 4608, 0})
    // Small K (MobileNetV2's expansions), output in L2 (1024 columns) vs streamed (12544).
    ->Args({96, 1024, 16, 0})
    ->Args({96, 12544, 16, 0})
    ->Args({144, 1024, 24, 0})
    ->UseRealTime();

BENCHMARK(BM_NaiveGemm)->ArgNames({"M", "N", "K"})->Args({256, 256, 256})->UseRealTime();
BENCHMARK(BM_SgemmBiasRelu)
    ->ArgNames({"M", "N", "K"})
    ->Args({64, 3136, 576})
    ->Args({1024, 1024, 1024})
    ->UseRealTime();

BENCHMARK_MAIN();
