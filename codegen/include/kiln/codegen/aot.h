#pragma once
// Ahead-of-time compilation (DESIGN.md §5, §7): LLVM IR → relocatable object for a target triple
// and CPU → shared object or native executable linked by the system toolchain against a static
// kiln_runtime built for that target.
//
// A compiled model's C interface (kiln/runtime/aot_model.h) is generated here as a small separate
// module: PREFIX_run(inputs, outputs) packs the pointers into the lowering's `void
// kiln_entry(void** buffers)` (kiln/codegen/lower.h), calls it and turns a recorded runtime error
// into a non-zero return; PREFIX_info() returns the signature. `--emit exe` adds the runtime's
// prebuilt main (kiln_aot_main: .npy in, .npy out); `--emit so` writes PREFIX.h next to the
// library.
//
// Errors (unknown target, missing toolchain or runtime library, a failed link with the linker's
// own message) are thrown as AotError. Only forward declarations of LLVM types here.

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kiln/codegen/lower.h"
#include "kiln/codegen/target.h"

namespace llvm {
class LLVMContext;
class Module;
class TargetMachine;
}  // namespace llvm

namespace kiln::codegen {

class AotError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One input or output of a compiled model. dtype is kiln::DType's value (= enum kiln_dtype).
struct TensorSpec {
  std::string name;
  int dtype = 0;
  std::vector<int64_t> shape;
};
struct ModelSignature {
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  // A training step's state (parameters, optimizer state): the entry point returns state k's new
  // value after the outputs; the interface keeps it (see ConstantBuffer::state).
  std::vector<TensorSpec> state;
};

// A buffer the entry point reads that is not a model input: a frozen weight. Its bytes are
// embedded in the interface object as 64-byte aligned read-only data and passed to the entry
// point after the inputs (buffers = inputs, constants, outputs). `data` must stay valid until
// the object is emitted.
struct ConstantBuffer {
  std::string name;
  const void* data = nullptr;
  size_t nbytes = 0;
  // >= 0: state k of the signature, not a constant: writable data initialized with `data`, which
  // each successful PREFIX_run replaces with the entry's result for it (a failed run leaves it).
  int32_t state = -1;
};

enum class EmitKind { Object, SharedLibrary, Executable };
// "obj" | "so" | "exe"; anything else throws.
EmitKind parse_emit_kind(const std::string& text);

// "" or "host" → this machine (its CPU and features); otherwise a triple such as
// aarch64-linux-gnu or x86_64-linux-gnu with a generic CPU unless `cpu` / `features` say otherwise.
// Throws when LLVM cannot generate code for it (only X86 and AArch64 are initialized).
Target resolve_target(const std::string& spec, const std::string& cpu = "",
                      const std::string& features = "");
bool is_aarch64(const Target& target);

// A TargetMachine for `target`: position-independent code (objects go into executables and shared
// objects alike), optimization level O0..O3.
std::unique_ptr<llvm::TargetMachine> create_target_machine(const Target& target, int opt_level);

// Runs LLVM's O-level pipeline for `tm` (when opt_level > 0) and emits an ELF relocatable object.
// Sets the module's triple and data layout from `tm`.
std::string emit_object(llvm::Module& module, llvm::TargetMachine& tm, int opt_level);

// Lowers a kiln module (mutated: it ends in the LLVM dialect) to an optimized object for
// `target` whose only global definition is options.entry_name (see aot_lower.cpp). Throws
// AotError with the lowering's diagnostics (each op that cannot be lowered, with its location).
std::string lower_to_object(mlir::ModuleOp module, const Target& target,
                            const LowerOptions& options, int opt_level, EntrySignature* signature);

// The interface module described above, in `ctx`, calling `entry` (the lowering's entry point;
// declared, defined by the model's object). `uses_runtime_errors` adds the kiln_abi_take_error
// check (models lowered by kiln call the runtime; hand-written IR may not).
std::unique_ptr<llvm::Module> build_interface_module(llvm::LLVMContext& ctx,
                                                     const ModelSignature& signature,
                                                     const std::vector<ConstantBuffer>& constants,
                                                     const std::string& prefix,
                                                     const std::string& entry, const Target& target,
                                                     const std::string& cpu_features,
                                                     bool uses_runtime_errors);

// The instruction-set extensions code from `tm` may execute that a runtime can check on the CPU
// it runs on (kiln::rt::has_feature's names), comma-separated.
std::string checked_cpu_features(const llvm::TargetMachine& tm);

// The C header for `--emit so`: declarations of PREFIX_run / PREFIX_info and the signature as
// constants (PREFIX_NUM_INPUTS, PREFIX_INPUT0_SHAPE, ...). Self-contained C.
std::string generate_c_header(const ModelSignature& signature, const std::string& prefix,
                              const Target& target);

// Links `object` into an ELF shared object for `target` exporting only `exports`, needing
// nothing but libc/libm (a code object an artifact embeds); returns its bytes.
std::string link_code_object(const std::string& object, const Target& target,
                             const std::vector<std::string>& exports);

struct LinkOptions {
  Target target;
  EmitKind kind = EmitKind::Executable;
  std::vector<std::string> objects;
  std::string output;
  // Folder holding libkiln_runtime.a and libkiln_aot_main.a built for `target`.
  std::string runtime_dir;
  // The compiler driver used to link; empty = c++ for the host, aarch64-linux-gnu-g++ for arm64.
  std::string driver;
  // A shared object exports PREFIX_run and PREFIX_info only, and with uses_runtime_errors
  // PREFIX_take_error / PREFIX_free_error (see build_interface_module).
  std::string prefix = "model";
  bool uses_runtime_errors = true;
  // More linker driver arguments, e.g. the -fsanitize flags the runtime library was built with.
  std::vector<std::string> extra_args;
};
// Links with the system toolchain; for EmitKind::Object, a relocatable link (`ld -r`) of the
// objects into one. Throws AotError with the command line and the linker's output on failure.
void link(const LinkOptions& options);

// The compiler driver that links for `target` (see LinkOptions::driver), or "" when absent.
std::string find_link_driver(const Target& target);

struct AotOptions {
  Target target;
  EmitKind kind = EmitKind::Executable;
  std::string output;
  std::string prefix = "model";  // symbol prefix: PREFIX_run, PREFIX_info (exe: always "model")
  std::string entry = "kiln_entry";
  std::string runtime_dir;
  int opt_level = 3;
  bool uses_runtime_errors = true;
  std::vector<ConstantBuffer> constants;  // frozen weights, after the inputs
  std::vector<std::string> link_args;     // see LinkOptions::extra_args
};

struct AotTimings {
  double optimize_and_emit_s = 0;
  double link_s = 0;
};

// From an object already holding `entry` (the lowering's output, or emit_object of an LLVM
// module): adds the interface object and links options.output (plus PREFIX.h for
// EmitKind::SharedLibrary, written next to it). Returns the files written.
std::vector<std::string> package_object(const std::string& model_object,
                                        const ModelSignature& signature, const AotOptions& options,
                                        AotTimings* timings = nullptr);

// The whole path for an LLVM module defining `entry`.
std::vector<std::string> compile_module(llvm::Module& module, const ModelSignature& signature,
                                        const AotOptions& options, AotTimings* timings = nullptr);

}  // namespace kiln::codegen
