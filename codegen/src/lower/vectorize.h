#pragma once
// Internal: the vector pipeline's middle stages (vectorize.cpp), between the kernel emitter's
// linalg.generic on tensors (linalg_kernels.cpp) and the conversion to the LLVM dialect
// (to_llvm.cpp).

#include <string>

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"

namespace kiln::codegen::detail {

// Marks a kernel function built as linalg on tensors; its value is the target's vector register
// width in bits.
inline constexpr const char* kVectorKernelAttr = "kiln.vector_bits";
// On a kernel's linalg.generic: the loop dim along which a leaf read across the innermost dim is
// contiguous; its tiles are square (a register's lanes along both) and transposed in registers.
inline constexpr const char* kTransposedDimAttr = "kiln.transposed_dim";

// Dialects and interface models the vector pipeline needs (linalg, tensor, bufferization, memref,
// vector, affine; tiling, bufferization, subset and value-bounds models).
void register_vector_dialects(mlir::DialectRegistry& registry);
// Loads them into ctx (the kernel emitter builds their ops; register them first).
void load_vector_dialects(mlir::MLIRContext* ctx);

// In every function marked kVectorKernelAttr: eliminates the empty output tensors (each result
// computed in its destination's tensor), expands f32 transcendental functions (f32_math.h), tiles
// each linalg.generic with scf.for to one tile of vector registers along its innermost dim (the
// outer dims one at a time), peels the remainder, vectorizes the tiles (a remainder of static
// size as a shorter vector, one known only at run time with masks), bufferizes the function with
// one-shot bufferization, so the vectors are read from and written to the kernel's buffers, and
// lowers what vectorization did not take to scalar loops. Returns false (with `error`) when a
// stage fails.
bool vectorize_kernels(mlir::ModuleOp module, std::string* error);

}  // namespace kiln::codegen::detail
