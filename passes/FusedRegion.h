#pragma once
// Building kiln.fused regions, shared by the fusion passes. Internal to passes/ (not installed).

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "mlir/IR/Operation.h"

namespace kiln::passes {

// Replaces `group` (elementwise ops of one block, in block order, each computing the same shape)
// by one kiln.fused placed where its last member was: its operands are the values the members
// read from outside the group, its results the members' values used outside it. Returns the
// kiln.fused op.
mlir::Operation* materialize_fused(llvm::ArrayRef<mlir::Operation*> group);

// For the block epilogue and prologue passes: `chain` marked `attr` (a unit attribute) as a
// kiln.fused, wrapping a single elementwise op with generated loops into one; null, nothing
// changed, when it is neither. And the values such a chain maps or writes block by block:
// float32 tensors of static shape and rank >= 1 (a rank-0 value has no blocks).
mlir::Operation* mark_block_chain(mlir::Operation* chain, llvm::StringRef attr);
bool is_block_value(mlir::Type t);
// The product that would take x as its block prologue: x's only user, a linear / linear_fused
// reading it as its input or a matmul by a [K, N] matrix reading it as its left operand; else
// null.
mlir::Operation* prologue_product(mlir::Value x);

}  // namespace kiln::passes
