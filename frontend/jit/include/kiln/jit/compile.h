#pragma once
// kiln::jit::compile — a traced function as native code (LLVM, ORC JIT in this process).
//
//   auto traced = kiln::jit::trace(fn, {x});
//   auto compiled = kiln::jit::compile(traced);
//   TensorList y = compiled({x2});          // same shapes/dtypes as traced (guards checked)
//
// Compile once, run many; calls are thread-safe (each call has its own intermediate buffers).
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

#include <memory>
#include <string>

#include "kiln/tensor.h"
#include "kiln/trace/trace.h"

namespace kiln::jit {

struct CompileOptions {
  int opt_level = 3;
  bool fuse_elementwise = true;
  // Split elementwise loop nests of at least this many elements over the thread pool (0: never).
  int64_t parallel_min_elements = 1 << 16;
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

// Compiles a kiln module given as text or bytecode (e.g. kiln-opt's output after the pass
// pipelines): every argument of @forward is an input, in order.
CompiledFunction compile_module(const std::string& text_or_bytecode,
                                const CompileOptions& options = {});

// Empties the in-memory cache (the disk cache is left alone).
void clear_memory_cache();

}  // namespace kiln::jit
