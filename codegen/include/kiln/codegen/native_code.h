#pragma once
// Generated code embedded in artifacts (runtime/schema/kiln.fbs: Control::Generated, CodeObject).
//
// compile_native_code marks groups of @forward's ops that the lowering computes in generated
// loops — a kiln.fused region, an elementwise op, a row kernel (softmax, log-softmax, layer norm)
// together with the single-use elementwise producer right before it, whose values it then
// computes inside its rows — with a `kiln.symbol` attribute, and compiles each group, lowered on
// its own as a function `void SYMBOL(void* const* buffers)` (its inputs, then its outputs), for
// every target into one ELF shared object. The artifact writer then writes each group as a
// generated instruction followed by its portable form (the same ops as runtime kernels), so a
// runtime runs the code on a CPU it was built for and the kernels anywhere else. A group that is
// the block epilogue of the conv2d / linear / matmul right before it (a kiln.fused the pass
// --kiln-fuse-block-epilogues marked, the only reader of the product's value) is compiled a second
// time in that form, `SYMBOL_block` (kiln/codegen/lower.h: LowerOptions::block_epilogue_input),
// and marked `kiln.block_symbol`: the memory plan gives its value the product's buffer and the
// writer names the symbol in the instruction (kiln.fbs: Instruction.block_epilogue), which the
// product's kernel then runs on each block of its output. Likewise a group that is the block
// prologue of the linear / matmul right after it (a kiln.fused --kiln-fuse-block-prologues marked)
// becomes `SYMBOL_prologue` (LowerOptions::block_prologue), marked `kiln.prologue_symbol`: the plan
// keeps its inputs live through the product, which computes its input block by block with it
// (Instruction.block_prologue).
//
// A group whose code would call a runtime kernel is not marked (the runtime runs those kernels
// already); the code may call only the C ABI's core (kiln_abi_alloc, kiln_abi_free, the scratch
// lease, kiln_abi_parallel_for, kiln_abi_set_error), reached through pointers the runtime hands
// the object's `kiln_code_bind` at load (CodeBlob::imports), so the object needs no symbol of the
// program that loads it. Objects are linked with the system toolchain (as `kiln compile` links).
//
// MLIR and LLVM appear only as forward declarations here.

#include <string>
#include <vector>

#include "kiln/codegen/artifact.h"
#include "kiln/codegen/target.h"

namespace mlir {
class ModuleOp;
class Operation;
class Value;
}  // namespace mlir

namespace kiln::codegen {

// "host" (this machine's CPU and features), "x86-64-v2" / "x86-64-v3" / "x86-64-v4" (x86-64
// microarchitecture levels), "aarch64" (generic armv8-a), or a triple with an optional
// ":CPU" (x86_64-linux-gnu:znver4). Throws AotError for anything LLVM cannot target.
Target native_code_target(const std::string& spec);

// Marks @forward's groups (see above) and returns one code object per target, in the order
// given: list the most specialized first (a runtime loads the first one its CPU can run).
// Call it on the module about to be written (after the memory plan). Throws AotError when a
// target cannot be compiled for or linked.
std::vector<CodeBlob> compile_native_code(mlir::ModuleOp module,
                                          const std::vector<Target>& targets);

// A marked group: `first` (which carries kiln.symbol) and the ops right after it in its block
// with the same symbol. `inputs` are the values its ops read that are defined outside it (first
// use first), `outputs` the results used after it (op order): the code's buffers, in order.
struct GeneratedGroup {
  std::string symbol;
  std::vector<mlir::Operation*> ops;
  std::vector<mlir::Value> inputs, outputs;
};
GeneratedGroup generated_group(mlir::Operation* first);

}  // namespace kiln::codegen
