#pragma once
// kiln::jit::compile — a traced function as native code (LLVM, ORC JIT in this process).
//
//   auto traced = kiln::jit::trace(fn, {x});
//   auto compiled = kiln::jit::compile(traced);
//   TensorList y = compiled({x2});          // same shapes/dtypes as traced (guards checked)
//
// Compile once, run many; calls are thread-safe (each call has its own intermediate buffers),
// except that calls of a function with in-out captures (a training step), host values (an
// optimizer's learning rate, refreshed before each call) or random ops share that state, as the
// eager code they replace would: do not overlap those.
// Captured tensors (parameters) are read at each call, and those the traced function wrote in
// place (a training step's parameters and optimizer state) are updated in place after each call,
// exactly like TracedFunction::operator(). Ops that cannot be compiled are reported by compile()
// (kiln::Error naming the op and its position in @forward), never at run time.
//
// Tolerances against eager (what the tests assert): heavy ops run the same runtime kernels, so
// they agree exactly; elementwise chains agree to ~1e-6 relative (f32 exp/log/tanh/erf/sin/cos
// are polynomial approximations within a few ulp, fused chains skip intermediate rounding);
// whole models (ResNet-18, MobileNetV2, transformer, LSTM) to <= 1e-4 max relative error.
//
// Compiled code is cached by (IR, target triple, CPU features, options): in memory for the
// process, and as object files under $XDG_CACHE_HOME/kiln (else ~/.cache/kiln).

#include <functional>
#include <memory>
#include <string>

#include "kiln/tensor.h"
#include "kiln/trace/trace.h"

namespace kiln::jit {

struct CompileOptions {
  // Run kiln's pass pipeline for any trace first, on the compiler's own copy: cleanup, conv and
  // linear epilogue fusion, elementwise fusion, layout (the passes that hold whether or not the
  // weights are frozen, for forward and training steps alike: passes::build_training_pipeline
  // without its memory plan, which code generation does itself). jit::save / kiln export also
  // freeze an inference trace and run the inference pipeline (bn folding, ...); a trace frozen
  // and optimized by hand (jit::freeze + passes::build_inference_pipeline) compiles as it is.
  bool optimize = true;
  int opt_level = 3;
  bool fuse_elementwise = true;
  // Split elementwise loop nests of at least this many elements over the thread pool (0: never).
  int64_t parallel_min_elements = 1 << 16;
  // Elementwise loop nests: 0 tiles and vectorizes them for the target's vector width through
  // upstream MLIR (linalg → vector); a positive width overrides it; negative leaves scalar loops
  // to LLVM's loop vectorizer (the earlier path, kept for comparison).
  int vector_bits = 0;
  // The elementwise chain after a conv, linear or matmul runs as its GEMM's epilogue on each
  // finished block of the output (passes::create_fuse_block_epilogues_pass); false: as its own
  // kernel.
  bool block_epilogues = true;
  // The elementwise chain that is only a linear's (or matmul's) input is computed block by block
  // as the product reads it (passes::create_fuse_block_prologues_pass); false: as its own kernel.
  bool block_prologues = true;
  bool memory_cache = true;
  bool disk_cache = true;
  std::string cache_dir;  // empty: $XDG_CACHE_HOME/kiln or ~/.cache/kiln
};

class CompiledFunction {
 public:
  CompiledFunction();
  ~CompiledFunction();
  CompiledFunction(const CompiledFunction&);
  CompiledFunction& operator=(const CompiledFunction&);

  TensorList operator()(const TensorList& inputs) const;

  // Where the code came from and how long compile() took (seconds).
  enum class Source { Compiled, MemoryCache, DiskCache };
  Source source() const;
  double compile_seconds() const;
  const std::string& cache_key() const;

 private:
  friend CompiledFunction compile(const TracedFunction&, const CompileOptions&);
  friend CompiledFunction compile_module(const std::string&, const CompileOptions&);
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

CompiledFunction compile(const TracedFunction& traced, const CompileOptions& options = {});

// A function compiled per specialization, as torch.compile does. The first call traces `fn` on
// its inputs and compiles the trace. A later call runs the first specialization whose input shapes
// and dtypes match and whose guards hold (each value the trace read back with item() is the same
// for this input); when none does, `fn` is traced again on this call's inputs and compiled, up to
// max_specializations, after which calls run `fn` eagerly (with one warning). A call that traces
// returns the results of that eager run: fn's side effects (a training step's update) happen
// exactly once per call either way. Calls must not overlap.
struct SpecializeOptions {
  TraceOptions trace = quiet_trace();
  CompileOptions compile;
  size_t max_specializations = 8;
  static TraceOptions quiet_trace() {
    TraceOptions o;
    o.warn_on_read_back = false;  // read-backs are guarded, and re-traced when they fail
    return o;
  }
};

class SpecializedFunction {
 public:
  TensorList operator()(const TensorList& inputs);
  size_t num_specializations() const { return specializations_.size(); }
  // Calls that ran fn eagerly because max_specializations was reached.
  size_t num_eager_calls() const { return eager_calls_; }

 private:
  friend SpecializedFunction compile(std::function<TensorList(const TensorList&)>,
                                     SpecializeOptions);
  struct Specialization {
    std::vector<Guard> inputs;
    CompiledFunction code;
  };
  std::function<TensorList(const TensorList&)> fn_;
  SpecializeOptions options_;
  std::vector<Specialization> specializations_;
  size_t eager_calls_ = 0;
};

SpecializedFunction compile(std::function<TensorList(const TensorList&)> fn,
                            SpecializeOptions options = {});

// Compiles a kiln module given as text or bytecode (e.g. kiln-opt's output after the pass
// pipelines): every argument of @forward is an input, in order.
CompiledFunction compile_module(const std::string& text_or_bytecode,
                                const CompileOptions& options = {});

// Empties the in-memory cache (the disk cache is left alone).
void clear_memory_cache();

}  // namespace kiln::jit
