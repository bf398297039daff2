#pragma once
// Lowering of an optimized kiln module to the LLVM dialect and to LLVM IR (DESIGN.md §5).
//
// The input is a module whose `func.func @forward` works on statically shaped tensors (tracer
// output, or after kiln's passes). The lowering replaces it with one entry point
//
//     void kiln_entry(void** buffers);
//
// `buffers` holds the base pointers of @forward's arguments in order, then of its results: dense
// row-major buffers of the shapes and dtypes entry_signature() reports (the caller allocates the
// results). Heavy ops (GEMM, conv, pooling, norms, softmax, reductions, losses, indexing) become
// calls to the runtime's C ABI (kiln/runtime/abi.h, symbols kiln_abi_*); elementwise chains and
// kiln.fused regions become fused loop nests (linalg.generic tiled and vectorized for the target's
// vector width, or scalar loops LLVM vectorizes; split over the runtime's thread pool through
// kiln_abi_parallel_for when large). Intermediate buffers come from kiln_abi_alloc.
// Frozen constants become internal LLVM globals, so the code needs no weights at run time.
//
// This header names MLIR/LLVM types by forward declaration only.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace llvm {
class LLVMContext;
class Module;
class TargetMachine;
}  // namespace llvm
namespace mlir {
class ModuleOp;
class DialectRegistry;
}  // namespace mlir

namespace kiln::codegen {

struct LowerOptions {
  // Name of the generated entry point.
  std::string entry_name = "kiln_entry";
  // Split loop nests of at least this many elements over the thread pool (0 = never).
  int64_t parallel_min_elements = 1 << 16;
  // Fuse chains of single-use elementwise ops into one loop nest.
  bool fuse_elementwise = true;
  // Width of the target's vector registers in bits. When positive, elementwise loop nests go
  // through upstream MLIR: linalg.generic on tensors, tiled and vectorized to this width,
  // bufferized (codegen/src/lower/vectorize.cpp). 0: the code generators (compile_to_object,
  // lower_to_object, native code) take it from their target (vector_register_bits); negative:
  // scalar loops that LLVM's loop vectorizer widens (the path before the vector pipeline,
  // kept for comparison).
  int vector_bits = 0;
  // When >= 0: @forward is one elementwise chain (a kiln.fused) over its argument of this index,
  // a product's float32 output of the chain's type, and the entry point is the chain as that
  // product's block epilogue, mapping a block of the output in place:
  //     void entry(const void* ctx, float* c, int64_t offset, int64_t ldc, int64_t rows,
  //                int64_t cols)
  // c[r * ldc + j] is element offset + r * ldc + j (r < rows, j < cols); ctx holds the buffers of
  // @forward's arguments, then of its result, as `buffers` above (the runtime's
  // kernels::BlockEpilogue; an artifact's Instruction.block_epilogue).
  int block_epilogue_input = -1;
  // When true: @forward is one elementwise chain (a kiln.fused) returning a float32 value, and
  // the entry point (the signature above) is the chain as a linear's or matmul's block prologue:
  // it writes the value's elements offset + r * ldc + j into c[r * ldc + j] (the runtime's
  // kernels::linear_prologue_out; an artifact's Instruction.block_prologue).
  bool block_prologue = false;
};

// The vector width the lowering tiles for on a target machine (its CPU's features and the
// explicit ones): AVX-512 512 unless LLVM tunes the CPU for 256-bit vectors (prefer-256-bit:
// Intel's AVX-512 parts), AVX 256, SSE2 and NEON 128.
int vector_register_bits(const llvm::TargetMachine& tm);

// One buffer of the entry point: dtype is kiln::DType's value (the runtime's numbering, also used
// by the C ABI), sizes row-major.
struct BufferSpec {
  int dtype = 0;
  std::vector<int64_t> sizes;
  int64_t nbytes = 0;
};

struct EntrySignature {
  std::vector<BufferSpec> args;     // @forward's arguments
  std::vector<BufferSpec> results;  // @forward's results
};

// Thrown-free error reporting: on failure returns false and sets `error` to a message naming each
// op that could not be lowered, its position in @forward ("op #12") and its location.
// On success the module holds only LLVM dialect ops and `signature` (when given) is filled.
bool lower_to_llvm_dialect(mlir::ModuleOp module, const LowerOptions& options, std::string* error,
                           EntrySignature* signature = nullptr);

// Stops before the conversion to the LLVM dialect (loops, arith/math, calls): what the FileCheck
// tests read (kiln-opt --kiln-lower-to-loops).
bool lower_to_loops(mlir::ModuleOp module, const LowerOptions& options, std::string* error,
                    EntrySignature* signature = nullptr);

// Translates a module in the LLVM dialect to LLVM IR owned by `ctx`; null (and `error`) on failure.
std::unique_ptr<llvm::Module> translate_to_llvm_ir(mlir::ModuleOp module, llvm::LLVMContext& ctx,
                                                   std::string* error = nullptr);

// Runs LLVM's O-level pipeline (O3 by default) tuned for `tm` (its triple, CPU and features
// drive vectorization); sets the module's data layout and triple from tm.
void optimize_llvm_module(llvm::Module& module, llvm::TargetMachine& tm, int opt_level = 3);

// Dialects the lowering needs loaded in the module's context (call before lowering a module
// parsed elsewhere; lower_* also loads them).
void register_lowering_dialects(mlir::DialectRegistry& registry);

// Whether code generation lowers ops named `op_name` ("kiln.conv2d"): generated loops, views, or
// a call into a runtime kernel. Structural ops (kiln.none, kiln.constant, kiln.yield) count.
bool lowers_op(std::string_view op_name);
// Registers --kiln-lower-to-loops and --kiln-lower-to-llvm with MLIR's pass registry (kiln-opt).
void register_lowering_passes();

}  // namespace kiln::codegen
