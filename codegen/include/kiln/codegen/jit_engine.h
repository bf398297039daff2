#pragma once
// Machine code for a kiln module: compile it to an object file for a target (lowering + LLVM O3 +
// the target's code generator), and load objects into this process with ORC (LLJIT). Each loaded
// object gets its own symbol namespace, so any number of compiled functions coexist.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/codegen/lower.h"
#include "kiln/codegen/target.h"

namespace kiln::codegen {

// Lowers `module` (mutated: it ends in the LLVM dialect), optimizes and emits a relocatable
// object for `target` (empty fields = the host). Returns false with `error` on failure.
bool compile_to_object(mlir::ModuleOp module, const Target& target, const LowerOptions& options,
                       int opt_level, std::string* object, EntrySignature* signature,
                       std::string* error);

// The entry point's signature read from @forward's type alone (no lowering): what a cached object
// needs.
bool entry_signature(mlir::ModuleOp module, EntrySignature* signature, std::string* error);

// The version of the contract between generated code and the runtime's C ABI (descriptor layout,
// attribute orders, entry point convention; kiln/runtime/abi.h). Part of every cache key: bump it
// whenever that contract changes, so objects cached by an older build are never loaded.
//   3: kiln_abi_mbconv reads its strategy after channels_last_out.
inline constexpr int kAbiVersion = 3;
// The revision of the code generator's output for a given module (lowering, buffer placement,
// LLVM pipeline). Also in every cache key: bump it whenever generated code changes (a fix or an
// improvement), so a newer build never reuses an older build's objects.
//   2: intermediate buffers in one compile-time arena; kiln.mbconv; unused optional results.
//   3: <entry>_release() frees the prepared weights of *_prepared call sites.
//   4: kernel calls get the arena bytes no live buffer holds as scratch (kiln_abi_lease_begin).
//   5: loop-carried values updated in place; a kiln.fused's stored results in one loop nest.
//   6: softmax / log-softmax over the last dim as generated row kernels.
//   7: logsumexp as a row kernel; loop and branch bodies' buffers in compile-time arenas.
//   8: elementwise loop nests tiled and vectorized through linalg → vector (vector_bits).
//   9: row kernels' passes as linalg reductions and maps through the same pipeline;
//      operands read across the innermost dim in square tiles transposed in registers; sum,
//      mean, amax, amin, var over the last dim as row kernels.
inline constexpr int kCodegenRevision = 10;

// A stable key for compiled code: (module bytes, target triple, CPU, features, options, ABI,
// code generator revision).
std::string cache_key(const std::string& module_bytes, const Target& target,
                      const LowerOptions& options, int opt_level);

class JitEngine {
 public:
  // The process-wide engine. `symbols` (name → address) are defined in every loaded object's
  // namespace (the runtime's kiln_abi_* entry points); anything else resolves from the process.
  static JitEngine& instance();
  // Loaded code: its entry point, and what unload() needs.
  struct Loaded {
    void* entry = nullptr;
    void* release = nullptr;  // `<entry>_release` (frees prepared weights), if the object has one
    void* dylib = nullptr;    // the JITDylib (internal)
  };
  // Loads an object file and looks up `entry` (entry null and `error` on failure).
  Loaded load(const std::string& object, const std::string& entry,
              const std::vector<std::pair<std::string, void*>>& symbols, std::string* error);
  // Calls `release`, then removes the code from memory. No call into it may be running or follow.
  void unload(const Loaded& code);

 private:
  JitEngine();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::codegen
