#pragma once
// kiln::jit::compile_aot — a traced function compiled ahead of time (DESIGN.md §5, §7): a
// standalone executable (.npy in, .npy out; no LLVM or MLIR inside), a shared object + C header,
// or a relocatable object, for the host or aarch64-linux-gnu.
//
//   auto traced = kiln::jit::trace(model, {example});
//   kiln::jit::AotOptions o;
//   o.output = "resnet18";                 // o.emit = "so"; o.target = "aarch64-linux-gnu"; ...
//   kiln::jit::compile_aot(traced, o);     // ./resnet18 x.npy -o y.npy
//
// The trace's captured tensors (parameters, buffers) are frozen into the code as constant data;
// the model's inputs are the trace's inputs, then its host scalars (an optimizer's learning rate:
// SGD.group0.lr, ...). A training step (a function that writes captures in place) keeps what it
// writes as state in the code: every run updates it, `PREFIX_info()->state_data` reaches it, and
// the executable runs the on-device training loop (`./step --data x.npy --data y.npy --steps N
// --set SGD.group0.lr=0.01 --save w.safetensors`, as `kiln train`). The code calls the runtime's
// kernels through its C ABI and links a static kiln_runtime built for the target (see
// kiln/codegen/aot.h).

#include <string>
#include <vector>

#include "kiln/trace/trace.h"

namespace mlir {
class ModuleOp;
}

namespace kiln::jit {

struct AotOptions {
  std::string emit = "exe";  // exe | so | obj
  std::string output;
  std::string target = "host";  // host, or a triple: aarch64-linux-gnu, x86_64-linux-gnu
  std::string cpu;              // default: the host's CPU (host), generic (other triples)
  std::string features;
  std::string name = "model";  // symbol prefix for so/obj: NAME_run, NAME_info
  // Folder with libkiln_runtime.a and libkiln_aot_main.a for the target. Default: $KILN_RUNTIME_DIR
  // (host) / $KILN_AARCH64_RUNTIME_DIR (arm64), else this build's runtime while its tree exists,
  // then the installed library folder / build/aarch64-runtime. A relocated install passes its
  // CMake package's kiln_RUNTIME_DIR here.
  std::string runtime_dir;
  // More linker arguments. Default for the host: the flags this build links its own programs with
  // (CMAKE_EXE_LINKER_FLAGS, e.g. -fsanitize=... in the asan preset), which its runtime needs.
  std::vector<std::string> link_args;
  bool default_link_args = true;
  int opt_level = 3;
  bool fuse_elementwise = true;
  bool optimize = true;  // as CompileOptions::optimize: the pass pipeline for any trace first
};

struct AotResult {
  std::vector<std::string> files;  // the output (and the header for emit = "so")
  double lower_and_codegen_s = 0;  // kiln → LLVM IR → O3 → object
  double package_s = 0;            // interface object (embedding the weights)
  double link_s = 0;
  double total_s = 0;
};

AotResult compile_aot(const TracedFunction& traced, const AotOptions& options);

// A frozen argument of @forward: raw C-order bytes of its dtype and shape.
struct FrozenArg {
  std::string name;
  const void* data = nullptr;
  size_t nbytes = 0;
  // >= 0: a training step's state k (its new value is @forward's result after the outputs);
  // writable in the code (codegen::ConstantBuffer::state).
  int32_t state = -1;
};

// A .kiln artifact compiled from what it carries (its module, embedded by kiln export and
// jit::save, and its weights): `kiln compile M.kiln`. Refused, by name, for an artifact written
// without its module. total_s includes loading and parsing the artifact.
AotResult compile_artifact(const std::string& path, const AotOptions& options);

// `module`'s @forward arguments are its first `input_names.size()` model inputs, then `frozen`
// (in order). The module is lowered in place (it ends in the LLVM dialect).
AotResult compile_aot(mlir::ModuleOp module, const std::vector<std::string>& input_names,
                      const std::vector<FrozenArg>& frozen, const AotOptions& options);

}  // namespace kiln::jit
