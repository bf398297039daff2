#pragma once
// Building kiln.fused regions, shared by the fusion passes. Internal to passes/ (not installed).

#include "llvm/ADT/ArrayRef.h"
#include "mlir/IR/Operation.h"

namespace kiln::passes {

// Replaces `group` (elementwise ops of one block, in block order, each computing the same shape)
// by one kiln.fused placed where its last member was: its operands are the values the members
// read from outside the group, its results the members' values used outside it. Returns the
// kiln.fused op.
mlir::Operation* materialize_fused(llvm::ArrayRef<mlir::Operation*> group);

}  // namespace kiln::passes
