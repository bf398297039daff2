#pragma once
// Rewrite-pattern sets shared by several passes (internal to passes/).

#include "mlir/IR/PatternMatch.h"

namespace kiln::passes {

// No-op removal and shape-op canonicalization: x*1, x+0, x-0, x/1, double transpose, permute of
// permute, reshape of reshape, reshape/expand/slice/to/clone that change nothing, dropout with
// p = 0.
void populate_cleanup_patterns(mlir::RewritePatternSet& patterns);

// Evaluates elementwise and reshape ops whose operands are all small constants (at most
// kFoldLimit elements each) into a new constant.
inline constexpr int64_t kFoldLimit = 4096;
void populate_constant_fold_patterns(mlir::RewritePatternSet& patterns);

}  // namespace kiln::passes
