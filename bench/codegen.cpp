// Compiled code (kiln::jit::compile): fused elementwise bandwidth, ResNet-18 / MobileNetV2
// latency at batch 1 and 8 (224x224), and JIT compile time of ResNet-18. Eager runs of the same
// work are alongside for the ratio. Threads: KILN_NUM_THREADS.
//   KILN_NUM_THREADS=2 build/release/bench/bench_codegen
// Targets (issue #8, this machine, 2 threads): chain >= 33 GB/s (80% of STREAM); ONNX Runtime
// ResNet-18 17.3 ms (b8 144 ms), MobileNetV2 7.6 ms (b8 32 ms); ResNet-18 JIT compile <= 2 s.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <tuple>
#include <vector>

#include "kiln/jit/compile.h"
#include "kiln/jit/save.h"
#include "kiln/kiln.h"
#include "kiln/models.h"
#include "kiln/passes/Passes.h"
#include "kiln/runtime/model.h"
#include "kiln/runtime/thread_pool.h"
#include "kiln/trace/freeze.h"
#include "kiln/trace/trace.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"

using namespace kiln;

namespace {

jit::CompileOptions bench_options() {
  jit::CompileOptions o;
  o.disk_cache = false;  // measure the compiler, not a previous run's objects
  // KILN_BENCH_VECTOR_BITS=-1 measures the scalar loops LLVM vectorizes (CompileOptions).
  if (const char* bits = std::getenv("KILN_BENCH_VECTOR_BITS")) o.vector_bits = std::atoi(bits);
  return o;
}

Tensor chain(const Tensor& x) {
  return relu(x * 1.5 + 0.25) * 2.0;
}

// The recurrent model of #24's targets: one LSTM layer 128 -> 256 over 64 steps, sequence first.
std::shared_ptr<nn::Module> lstm_model() {
  return std::make_shared<nn::LSTM>(128, 256);
}

// #24's transformer block: one encoder layer, d_model 256, 4 heads, feed-forward 1024, GELU,
// post-norm, batch first, 128 tokens (bench/peers/seq_peers.py builds the same in PyTorch).
std::shared_ptr<nn::Module> transformer_model() {
  return std::make_shared<nn::TransformerEncoderLayer>(nn::TransformerEncoderLayerOptions(256, 4)
                                                           .dim_feedforward(1024)
                                                           .dropout(0.0)
                                                           .activation(nn::Activation::GELU)
                                                           .batch_first(true));
}

Tensor model_input(const std::string& name, int64_t batch) {
  if (name == "lstm") return randn({64, batch, 128});
  if (name == "transformer") return randn({batch, 128, 256});
  return randn({batch, 3, 224, 224});
}

std::shared_ptr<nn::Module> make_model(const std::string& name) {
  if (name == "resnet18") return models::resnet18();
  if (name == "lstm") return lstm_model();
  if (name == "transformer") return transformer_model();
  return models::mobilenet_v2();
}

// The model traced in eval mode without autograd (parameters and buffers named); optimized:
// freeze + kiln's inference pipeline (bn folded, epilogues fused) after tracing.
jit::TracedFunction trace_model(nn::Module& model, const Tensor& input, bool optimized) {
  model.eval();
  autograd::NoGradGuard no_grad;
  jit::TraceOptions options;
  options.warn_on_read_back = false;
  for (const auto& [n, p] : model.named_parameters()) options.named_captures.push_back({n, p});
  for (const auto& [n, b] : model.named_buffers()) options.named_captures.push_back({n, b});
  auto fn = [&model](const TensorList& t) { return TensorList{model.forward(t[0])}; };
  jit::TracedFunction traced = jit::trace(fn, {input}, options);
  if (optimized) {
    jit::freeze(traced);
    mlir::PassManager pm(&traced.context());
    passes::build_inference_pipeline(pm);
    if (mlir::failed(pm.run(traced.module()))) std::abort();
  }
  return traced;
}

// A model compiled once per shape.
struct CompiledModel {
  std::shared_ptr<nn::Module> model;
  jit::CompiledFunction fn;
};

CompiledModel& compiled_model(const std::string& name, int64_t batch, bool optimized = false) {
  static std::map<std::tuple<std::string, int64_t, bool>, CompiledModel> cache;
  auto key = std::make_tuple(name, batch, optimized);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  CompiledModel m;
  m.model = make_model(name);
  m.fn = jit::compile(trace_model(*m.model, model_input(name, batch), optimized), bench_options());
  return cache.emplace(key, std::move(m)).first->second;
}

// Trace → compiled code at batch 1, caches off: lowering, LLVM O3, object emission, ORC load.
void time_compile(benchmark::State& state, const std::string& name, bool optimized) {
  auto model = make_model(name);
  jit::TracedFunction traced = trace_model(*model, model_input(name, 1), optimized);
  jit::CompileOptions o = bench_options();
  o.memory_cache = false;
  for (auto _ : state) {
    jit::CompiledFunction f = jit::compile(traced, o);
    benchmark::DoNotOptimize(&f);
  }
}

}  // namespace

// A model benchmark at batch 1 and 8; a series runs its own timed loop (one benchmark iteration).
#define KILN_MODEL_BENCH(fn, model) \
  BENCHMARK_CAPTURE(fn, model, #model)->Arg(1)->Arg(8)->Unit(benchmark::kMillisecond)->UseRealTime()
#define KILN_MODEL_SERIES(fn, model) KILN_MODEL_BENCH(fn, model)->Iterations(1)

// relu(x*a+b)*c on 16M floats: one read and one write per element.
static void BM_CompiledChain16M(benchmark::State& state) {
  const int64_t n = int64_t(1) << 24;
  Tensor x = randn({n});
  auto fn = [](const TensorList& t) { return TensorList{chain(t[0])}; };
  jit::CompiledFunction f = jit::compile(jit::trace(fn, {x}), bench_options());
  for (auto _ : state) {
    Tensor y = f({x})[0];
    benchmark::DoNotOptimize(y.impl());
  }
  state.SetBytesProcessed(state.iterations() * n * 8);
}
BENCHMARK(BM_CompiledChain16M)->Unit(benchmark::kMillisecond)->UseRealTime();

// An LSTM cell's gate math on a [B, 4H] product (H = 256): four strided gate slices, sigmoid and
// tanh, the new cell and hidden state in one kernel; small enough that a kernel's fixed costs show.
static void BM_CompiledLstmCell(benchmark::State& state) {
  const int64_t batch = state.range(0), hidden = 256;
  Tensor gates = randn({batch, 4 * hidden});
  Tensor c = randn({batch, hidden});
  auto fn = [hidden](const TensorList& t) {
    const Tensor& g = t[0];
    Tensor i = sigmoid(g.slice(1, 0, hidden)), f = sigmoid(g.slice(1, hidden, 2 * hidden));
    Tensor cell = tanh(g.slice(1, 2 * hidden, 3 * hidden));
    Tensor o = sigmoid(g.slice(1, 3 * hidden, 4 * hidden));
    Tensor c_next = f * t[1] + i * cell;
    return TensorList{o * tanh(c_next), c_next};
  };
  jit::CompiledFunction f = jit::compile(jit::trace(fn, {gates, c}), bench_options());
  for (auto _ : state) {
    TensorList y = f({gates, c});
    benchmark::DoNotOptimize(y[0].impl());
  }
}
BENCHMARK(BM_CompiledLstmCell)->Arg(1)->Arg(8)->Unit(benchmark::kMicrosecond)->UseRealTime();

// Attention's layout copies, 128 tokens x 4 heads x 64: the heads split out (rows of 64 stay
// contiguous) and the keys transposed (the inner dim read at a stride of 256 floats), each plus 1
// so that the copy is a kernel, not a view.
static void BM_CompiledHeadCopies(benchmark::State& state) {
  Tensor x = randn({128, 4, 64});
  auto fn = [](const TensorList& t) {
    Tensor heads = t[0].permute({1, 0, 2}) + 1.0;
    Tensor keys_t = t[0].permute({1, 2, 0}) + 1.0;
    return TensorList{heads, keys_t};
  };
  jit::CompiledFunction f = jit::compile(jit::trace(fn, {x}), bench_options());
  for (auto _ : state) {
    TensorList y = f({x});
    benchmark::DoNotOptimize(y[0].impl());
  }
}
BENCHMARK(BM_CompiledHeadCopies)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The machine's memory bandwidth as STREAM measures it (McCalpin's triad a = b + s*c on arrays
// far larger than the caches, 24 bytes per element counted, the same threads as kiln): the
// reference #24 states the generated chain's bandwidth against (>= 85%).
static void BM_StreamTriad16M(benchmark::State& state) {
  const int64_t n = int64_t(1) << 24;
  std::vector<float> a(n, 0.0f), b(n, 1.0f), c(n, 2.0f);
  for (auto _ : state) {
    kiln::parallel_for(0, n, 1 << 16, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) a[i] = b[i] + 3.0f * c[i];
    });
    benchmark::DoNotOptimize(a.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * 12);
}
BENCHMARK(BM_StreamTriad16M)->Unit(benchmark::kMillisecond)->UseRealTime();

static void BM_EagerChain16M(benchmark::State& state) {
  const int64_t n = int64_t(1) << 24;
  Tensor x = randn({n});
  for (auto _ : state) {
    Tensor y = chain(x);
    benchmark::DoNotOptimize(y.impl());
  }
  state.SetBytesProcessed(state.iterations() * n * 8);
}
BENCHMARK(BM_EagerChain16M)->Unit(benchmark::kMillisecond)->UseRealTime();

// One value computed from `in` by `fn`, compiled (traced, jit::compile) or eager, per iteration.
void time_one(benchmark::State& state, Tensor (*fn)(const TensorList&), const TensorList& in,
              bool compiled) {
  jit::CompiledFunction f;
  if (compiled) {
    auto traced = [fn](const TensorList& t) { return TensorList{fn(t)}; };
    f = jit::compile(jit::trace(traced, in), bench_options());
  }
  for (auto _ : state) {
    Tensor y = compiled ? f(in)[0] : fn(in);
    benchmark::DoNotOptimize(y.impl());
  }
}

// Attention's scores: softmax(s * scale + mask) over the keys, batch 8, 4 heads, 128 x 128
// (#24: the scale and mask computed inside the softmax's kernel, one pass over memory less).
Tensor scaled_softmax(const TensorList& t) {
  return softmax(t[0] * 0.125 + t[1], -1);
}
TensorList scores_inputs() {
  return {randn({8, 4, 128, 128}), randn({1, 1, 128, 128})};
}

static void BM_CompiledScaledSoftmax(benchmark::State& state) {
  time_one(state, scaled_softmax, scores_inputs(), true);
}
BENCHMARK(BM_CompiledScaledSoftmax)->Unit(benchmark::kMicrosecond)->UseRealTime();

static void BM_EagerScaledSoftmax(benchmark::State& state) {
  time_one(state, scaled_softmax, scores_inputs(), false);
}
BENCHMARK(BM_EagerScaledSoftmax)->Unit(benchmark::kMicrosecond)->UseRealTime();

// logsumexp over the same scores (a log-partition, as in a CRF or a log-softmax loss): the
// generated row kernel (two passes, the tree recomputed) against eager's mul, add and the
// runtime's one-pass reduction.
Tensor scaled_logsumexp(const TensorList& t) {
  const int64_t last[] = {-1};
  return logsumexp(t[0] * 0.125 + t[1], last);
}
static void BM_CompiledScaledLogsumexp(benchmark::State& state) {
  time_one(state, scaled_logsumexp, scores_inputs(), true);
}
BENCHMARK(BM_CompiledScaledLogsumexp)->Unit(benchmark::kMicrosecond)->UseRealTime();

static void BM_EagerScaledLogsumexp(benchmark::State& state) {
  time_one(state, scaled_logsumexp, scores_inputs(), false);
}
BENCHMARK(BM_EagerScaledLogsumexp)->Unit(benchmark::kMicrosecond)->UseRealTime();

// RMSNorm's statistic mean(x * x) over d = 256, 8 x 128 tokens, one value per token: the
// generated row reduction (the square computed in the pass, summed in float64) against eager's
// mul and the runtime's reduction (a stored square, then pairwise float32 sums).
Tensor mean_of_squares(const TensorList& t) {
  const int64_t last[] = {-1};
  return mean(t[0] * t[0], last, /*keepdim=*/true);
}
static void BM_CompiledMeanOfSquares(benchmark::State& state) {
  time_one(state, mean_of_squares, {randn({8, 128, 256})}, true);
}
BENCHMARK(BM_CompiledMeanOfSquares)->Unit(benchmark::kMicrosecond)->UseRealTime();

static void BM_EagerMeanOfSquares(benchmark::State& state) {
  time_one(state, mean_of_squares, {randn({8, 128, 256})}, false);
}
BENCHMARK(BM_EagerMeanOfSquares)->Unit(benchmark::kMicrosecond)->UseRealTime();

// A transformer block's residual add and layer norm: layer_norm(x + r) over d = 256, 8 x 128
// tokens (#24: the add computed inside the norm's kernel).
Tensor residual_layer_norm(const TensorList& t) {
  return layer_norm(t[0] + t[1], std::vector<int64_t>{256}, t[2], t[3]);
}
static void BM_CompiledResidualLayerNorm(benchmark::State& state) {
  time_one(state, residual_layer_norm,
           {randn({8, 128, 256}), randn({8, 128, 256}), randn({256}), randn({256})}, true);
}
BENCHMARK(BM_CompiledResidualLayerNorm)->Unit(benchmark::kMicrosecond)->UseRealTime();

// #24's epilogues for any chain: a product followed by elementwise ops no fixed epilogue takes,
// compiled with the chain as the product's block epilogue (Arg 1: run on each block of the
// output the GEMM finishes, in cache) or as a kernel of its own (Arg 0: a second pass over the
// output from memory). Weights frozen (prepared for the GEMM), 2-D batch as the models have it.
void time_block_epilogue(benchmark::State& state,
                         const std::function<TensorList(const TensorList&)>& fn,
                         const TensorList& in, bool prologues = false) {
  jit::TracedFunction traced = jit::trace(fn, in);
  jit::freeze(traced);
  jit::CompileOptions o = bench_options();
  if (prologues)
    o.block_prologues = state.range(0) != 0;
  else
    o.block_epilogues = state.range(0) != 0;
  jit::CompiledFunction f = jit::compile(traced, o);
  for (auto _ : state) {
    Tensor y = f(in)[0];
    benchmark::DoNotOptimize(y.impl());
  }
}

// The same chains saved as an artifact with generated code for this CPU (SaveOptions::native_code)
// and run by kiln_runtime's Session: Arg 1, the chain as generated code the product's kernel runs
// on each block (Instruction.block_epilogue / block_prologue); Arg 0 (SaveOptions::block_epilogues
// and block_prologues off), its generated code as an instruction of its own.
struct ChainModel {
  std::function<TensorList(const TensorList&)> fn;
  TensorList inputs;
};
void time_artifact_block_epilogue(benchmark::State& state, const ChainModel& m) {
  autograd::NoGradGuard no_grad;
  jit::SaveOptions so;
  so.native_code = {"host"};
  so.block_epilogues = so.block_prologues = state.range(0) != 0;
  auto artifact = rt::Model::from_bytes(jit::save_to_bytes(jit::trace(m.fn, m.inputs), so));
  rt::Session session(artifact);
  std::vector<const TensorImpl*> in;
  for (const Tensor& t : m.inputs) in.push_back(t.impl());
  for (auto _ : state) {
    auto y = session.run(in);
    benchmark::DoNotOptimize(y[0].get());
  }
  state.counters["block_epilogues"] = static_cast<double>(artifact->stats().block_epilogues);
  state.counters["block_prologues"] = static_cast<double>(artifact->stats().block_prologues);
  state.counters["arena_MB"] = static_cast<double>(artifact->stats().arena_bytes) / 1e6;
}

// A 3x3 conv, 64 -> 64 channels at 56 x 56, batch 8 (ResNet-18's first stage), then hardswish
// written out and a per-channel scale: y * clamp(y + 3, 0, 6) / 6 * s.
ChainModel conv_chain() {
  Tensor w = randn({64, 64, 3, 3}) * 0.05, b = randn({64}), s = randn({64, 1, 1});
  auto fn = [=](const TensorList& t) {
    Tensor y = conv2d(t[0], w, b, 1, 1);
    return TensorList{y * clamp(y + 3.0, 0.0, 6.0) / 6.0 * s};
  };
  return {fn, {randn({8, 64, 56, 56})}};
}
static void BM_CompiledConvChain(benchmark::State& state) {
  const ChainModel m = conv_chain();
  time_block_epilogue(state, m.fn, m.inputs);
}
BENCHMARK(BM_CompiledConvChain)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
static void BM_ArtifactConvChain(benchmark::State& state) {
  time_artifact_block_epilogue(state, conv_chain());
}
BENCHMARK(BM_ArtifactConvChain)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

// A feed-forward layer's first product, 256 -> 1024 over 8 x 128 tokens (a 4 MB output), then
// QuickGELU (x * sigmoid(1.702 x), CLIP's activation: arithmetic enough to hide the second pass's
// memory traffic).
ChainModel linear_chain() {
  Tensor w = randn({1024, 256}) * 0.05, b = randn({1024});
  auto fn = [=](const TensorList& t) {
    Tensor y = linear(t[0], w, b);
    return TensorList{y * sigmoid(y * 1.702)};
  };
  return {fn, {randn({8, 128, 256})}};
}
static void BM_CompiledLinearChain(benchmark::State& state) {
  const ChainModel m = linear_chain();
  time_block_epilogue(state, m.fn, m.inputs);
}
BENCHMARK(BM_CompiledLinearChain)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
static void BM_ArtifactLinearChain(benchmark::State& state) {
  time_artifact_block_epilogue(state, linear_chain());
}
BENCHMARK(BM_ArtifactLinearChain)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

// 256 -> 4096 over 8 x 512 tokens (a 64 MB output: past the L3 of most CPUs), then a
// per-feature scale and shift with a floor, max(y * s + t, -1): two loads and a store per
// element in the second pass, little arithmetic.
ChainModel linear_chain_large() {
  Tensor w = randn({4096, 256}) * 0.05, s = randn({4096}), t = randn({4096});
  auto fn = [=](const TensorList& in) {
    return TensorList{clamp(linear(in[0], w) * s + t, -1.0, std::nullopt)};
  };
  return {fn, {randn({8, 512, 256})}};
}
static void BM_CompiledLinearChainLarge(benchmark::State& state) {
  const ChainModel m = linear_chain_large();
  time_block_epilogue(state, m.fn, m.inputs);
}
BENCHMARK(BM_CompiledLinearChainLarge)
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
static void BM_ArtifactLinearChainLarge(benchmark::State& state) {
  time_artifact_block_epilogue(state, linear_chain_large());
}
BENCHMARK(BM_ArtifactLinearChainLarge)
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The same product and chain with the product's value returned too (as a training step keeps
// it for its backward): the chain then writes its own buffer from each block, y stored as well.
static void BM_CompiledLinearChainShared(benchmark::State& state) {
  Tensor w = randn({4096, 256}) * 0.05, s = randn({4096}), t = randn({4096});
  auto fn = [&](const TensorList& in) {
    Tensor y = linear(in[0], w);
    return TensorList{clamp(y * s + t, -1.0, std::nullopt), y};
  };
  time_block_epilogue(state, fn, {randn({8, 512, 256})});
}
BENCHMARK(BM_CompiledLinearChainShared)
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Attention scores for 8 x 4 heads of 256 queries and keys, 64 wide (an 8 MB output), then a
// chain: /x/0 logit soft-capping (Gemma 2), 30 * tanh(s / 30); /x/1 a scale and a floor, max(s *
// 0.125, -4) (little arithmetic). A batched matmul's block epilogue (/1/) against the chain as its
// own kernel (/0/).
static void BM_CompiledMatmulChain(benchmark::State& state) {
  const bool capped = state.range(1) == 0;
  auto fn = [capped](const TensorList& in) {
    Tensor s = matmul(in[0], in[1]);
    return TensorList{capped ? tanh(s / 30.0) * 30.0 : clamp(s * 0.125, -4.0, std::nullopt)};
  };
  time_block_epilogue(state, fn, {randn({8, 4, 256, 64}), randn({8, 4, 64, 256})});
}
BENCHMARK(BM_CompiledMatmulChain)
    ->ArgsProduct({{0, 1}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// A projection 1024 -> 256 over 8 x 1024 tokens whose input is relu(x + r) * mask[token] (a 32
// MB input: past the L3 of most CPUs): the chain as the linear's block prologue (/1), each
// block of input rows computed just before the GEMM reads it, against the chain as its own kernel
// (/0).
ChainModel linear_prologue() {
  Tensor w = randn({256, 1024}) * 0.03;
  auto fn = [=](const TensorList& in) {
    return TensorList{linear(relu(in[0] + in[1]) * in[2], w)};
  };
  return {fn,
          {randn({8, 1024, 1024}), randn({8, 1024, 1024}),
           (randn({8, 1024, 1}) > 0.0).to(DType::Float32)}};
}
static void BM_CompiledLinearPrologue(benchmark::State& state) {
  const ChainModel m = linear_prologue();
  time_block_epilogue(state, m.fn, m.inputs, /*prologues=*/true);
}
BENCHMARK(BM_CompiledLinearPrologue)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
// The same saved with generated code (Instruction.block_prologue), /0 without.
static void BM_ArtifactLinearPrologue(benchmark::State& state) {
  time_artifact_block_epilogue(state, linear_prologue());
}
BENCHMARK(BM_ArtifactLinearPrologue)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

// Masked mean pooling over the sequence, mean(x * mask, 1) for [8, 128, 256] tokens and an [8,
// 128, 1] mask (a sentence embedding's head): a generated column kernel with the product in its
// pass, against eager's stored product and the runtime's reduction.
Tensor masked_mean(const TensorList& t) {
  const int64_t seq[] = {1};
  return mean(t[0] * t[1], seq);
}
TensorList masked_mean_inputs() {
  return {randn({8, 128, 256}), (randn({8, 128, 1}) > 0.0).to(DType::Float32)};
}
static void BM_CompiledMaskedMean(benchmark::State& state) {
  time_one(state, masked_mean, masked_mean_inputs(), true);
}
BENCHMARK(BM_CompiledMaskedMean)->Unit(benchmark::kMicrosecond)->UseRealTime();
static void BM_EagerMaskedMean(benchmark::State& state) {
  time_one(state, masked_mean, masked_mean_inputs(), false);
}
BENCHMARK(BM_EagerMaskedMean)->Unit(benchmark::kMicrosecond)->UseRealTime();

// One float32 transcendental over 1M floats (in cache on most CPUs: the math, not memory):
// the JIT's generated loop against eager's vector kernel.
Tensor unary(const std::string& op, const Tensor& x) {
  if (op == "exp") return exp(x);
  if (op == "log") return log(abs(x) + 1e-3);
  if (op == "tanh") return tanh(x);
  if (op == "sigmoid") return sigmoid(x);
  if (op == "erf") return erf(x);
  if (op == "gelu") return gelu(x);
  return sin(x);
}

static void BM_CompiledUnary1M(benchmark::State& state, const char* op) {
  Tensor x = randn({int64_t(1) << 20}) * 3.0;
  auto fn = [op](const TensorList& t) { return TensorList{unary(op, t[0])}; };
  jit::CompiledFunction f = jit::compile(jit::trace(fn, {x}), bench_options());
  for (auto _ : state) {
    Tensor y = f({x})[0];
    benchmark::DoNotOptimize(y.impl());
  }
  state.SetItemsProcessed(state.iterations() * x.numel());
}
static void BM_EagerUnary1M(benchmark::State& state, const char* op) {
  Tensor x = randn({int64_t(1) << 20}) * 3.0;
  for (auto _ : state) {
    Tensor y = unary(op, x);
    benchmark::DoNotOptimize(y.impl());
  }
  state.SetItemsProcessed(state.iterations() * x.numel());
}
#define KILN_UNARY_BENCH(op)                                                                    \
  BENCHMARK_CAPTURE(BM_CompiledUnary1M, op, #op)->Unit(benchmark::kMicrosecond)->UseRealTime(); \
  BENCHMARK_CAPTURE(BM_EagerUnary1M, op, #op)->Unit(benchmark::kMicrosecond)->UseRealTime()
KILN_UNARY_BENCH(exp);
KILN_UNARY_BENCH(log);
KILN_UNARY_BENCH(tanh);
KILN_UNARY_BENCH(sigmoid);
KILN_UNARY_BENCH(erf);
KILN_UNARY_BENCH(gelu);
KILN_UNARY_BENCH(sin);

static void BM_Compiled(benchmark::State& state, const char* name) {
  const int64_t batch = state.range(0);
  CompiledModel& m = compiled_model(name, batch);
  Tensor x = model_input(name, batch);
  for (auto _ : state) {
    Tensor y = m.fn({x})[0];
    benchmark::DoNotOptimize(y.impl());
  }
}
KILN_MODEL_BENCH(BM_Compiled, resnet18);
KILN_MODEL_BENCH(BM_Compiled, mobilenet_v2);

// After freeze + the inference pipeline: conv+bn+relu(+residual) in one runtime call each.
static void BM_CompiledOptimized(benchmark::State& state, const char* name) {
  const int64_t batch = state.range(0);
  CompiledModel& m = compiled_model(name, batch, true);
  Tensor x = model_input(name, batch);
  for (auto _ : state) {
    Tensor y = m.fn({x})[0];
    benchmark::DoNotOptimize(y.impl());
  }
}
KILN_MODEL_BENCH(BM_CompiledOptimized, resnet18);
KILN_MODEL_BENCH(BM_CompiledOptimized, mobilenet_v2);

// The peers' protocol (bench/peers/run.sh, as `kiln run --bench` and ort_bench.js time): in one
// process, KILN_BENCH_WARMUP untimed runs (default 3), then KILN_BENCH_ITERS timed ones (default
// 15) back to back; the counters give their median and min in ms. BM_CompiledOptimized's
// repetitions of one iteration each would instead make a new input and pass through the benchmark
// library between timed runs, which no other engine does.
namespace {

// $name as an integer of at least `min`, or `fallback` when unset or out of range.
int env_int(const char* name, int fallback, int min) {
  const char* v = std::getenv(name);
  return v && *v && std::atoi(v) >= min ? std::atoi(v) : fallback;
}

template <typename Run>
void run_series(benchmark::State& state, Run&& run) {
  const int warmup = env_int("KILN_BENCH_WARMUP", 3, 0);
  const int iters = env_int("KILN_BENCH_ITERS", 15, 1);
  std::vector<double> ms;
  for (auto _ : state) {
    for (int i = 0; i < warmup; ++i) run();
    ms.clear();
    for (int i = 0; i < iters; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      run();
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  std::sort(ms.begin(), ms.end());
  const size_t n = ms.size();
  state.counters["median_ms"] = n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2;
  state.counters["min_ms"] = ms.front();
  state.counters["runs"] = static_cast<double>(n);
}

}  // namespace

static void BM_CompiledOptimizedSeries(benchmark::State& state, const char* name) {
  const int64_t batch = state.range(0);
  CompiledModel& m = compiled_model(name, batch, true);
  Tensor x = model_input(name, batch);
  run_series(state, [&] {
    Tensor y = m.fn({x})[0];
    benchmark::DoNotOptimize(y.impl());
  });
}
KILN_MODEL_SERIES(BM_CompiledOptimizedSeries, resnet18);
KILN_MODEL_SERIES(BM_CompiledOptimizedSeries, mobilenet_v2);
KILN_MODEL_SERIES(BM_CompiledOptimizedSeries, lstm);
KILN_MODEL_SERIES(BM_CompiledOptimizedSeries, transformer);

// The same model saved as an artifact (jit::save's inference pipeline and memory plan) and run
// by kiln_runtime's Session: the portable plan (runtime kernels only), and with generated code
// for this CPU embedded (SaveOptions::native_code), which its generated instructions then run.
static void artifact_series(benchmark::State& state, const char* name, bool native) {
  const int64_t batch = state.range(0);
  auto model = make_model(name);
  const Tensor x = model_input(name, batch);
  jit::SaveOptions so;
  if (native) so.native_code = {"host"};
  const std::vector<uint8_t> bytes = jit::save_to_bytes(trace_model(*model, x, false), so);
  // KILN_BENCH_SAVE_DIR=D also writes the artifact there (for kiln bench --profile).
  if (const char* dir = std::getenv("KILN_BENCH_SAVE_DIR"); dir && *dir) {
    const std::string path = std::string(dir) + "/" + name + "_b" + std::to_string(batch) +
                             (native ? "_native" : "") + ".kiln";
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
  }
  auto artifact = rt::Model::from_bytes(bytes);
  rt::Session session(artifact);
  run_series(state, [&] {
    auto y = session.run({x.impl()});
    benchmark::DoNotOptimize(y[0].get());
  });
  state.counters["generated"] = static_cast<double>(artifact->stats().native_instructions);
}
static void BM_ArtifactSeries(benchmark::State& state, const char* name) {
  artifact_series(state, name, false);
}
static void BM_ArtifactNativeSeries(benchmark::State& state, const char* name) {
  artifact_series(state, name, true);
}
KILN_MODEL_SERIES(BM_ArtifactSeries, lstm);
KILN_MODEL_SERIES(BM_ArtifactSeries, transformer);
KILN_MODEL_SERIES(BM_ArtifactNativeSeries, lstm);
KILN_MODEL_SERIES(BM_ArtifactNativeSeries, transformer);

static void BM_EagerSeries(benchmark::State& state, const char* name) {
  const int64_t batch = state.range(0);
  CompiledModel& m = compiled_model(name, batch);
  Tensor x = model_input(name, batch);
  autograd::NoGradGuard no_grad;
  run_series(state, [&] {
    Tensor y = m.model->forward(x);
    benchmark::DoNotOptimize(y.impl());
  });
}
KILN_MODEL_SERIES(BM_EagerSeries, resnet18);
KILN_MODEL_SERIES(BM_EagerSeries, mobilenet_v2);
KILN_MODEL_SERIES(BM_EagerSeries, lstm);
KILN_MODEL_SERIES(BM_EagerSeries, transformer);

static void BM_Eager(benchmark::State& state, const char* name) {
  const int64_t batch = state.range(0);
  CompiledModel& m = compiled_model(name, batch);
  Tensor x = model_input(name, batch);
  autograd::NoGradGuard no_grad;
  for (auto _ : state) {
    Tensor y = m.model->forward(x);
    benchmark::DoNotOptimize(y.impl());
  }
}
KILN_MODEL_BENCH(BM_Eager, resnet18);
KILN_MODEL_BENCH(BM_Eager, mobilenet_v2);

static void BM_JitCompileResNet18(benchmark::State& state) {
  time_compile(state, "resnet18", false);
}
BENCHMARK(BM_JitCompileResNet18)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

// The same after freeze + the inference pipeline: 11.7M weights are now constants in the object.
static void BM_JitCompileResNet18Frozen(benchmark::State& state) {
  time_compile(state, "resnet18", true);
}
BENCHMARK(BM_JitCompileResNet18Frozen)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

// The LSTM frozen and optimized: #24's "loops stay loops" target (the cell compiled once, not
// once per step).
static void BM_JitCompileLSTM(benchmark::State& state) {
  time_compile(state, "lstm", true);
}
BENCHMARK(BM_JitCompileLSTM)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

// A compile-cache hit for the frozen ResNet-18 (memory cache): what a second jit::compile of the
// same trace costs — computing the key over the module is most of it (#24 bounds it).
static void BM_JitCacheHitResNet18Frozen(benchmark::State& state) {
  auto model = make_model("resnet18");
  jit::TracedFunction traced = trace_model(*model, model_input("resnet18", 1), true);
  jit::CompileOptions o = bench_options();
  jit::compile(traced, o);  // fills the memory cache
  for (auto _ : state) {
    jit::CompiledFunction f = jit::compile(traced, o);
    if (f.source() != jit::CompiledFunction::Source::MemoryCache) std::abort();
    benchmark::DoNotOptimize(&f);
  }
}
BENCHMARK(BM_JitCacheHitResNet18Frozen)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
