#pragma once
// kiln's MLIR passes. Each pass lives in its own file under passes/ and is registered here so
// kiln-opt can run it by name.

#include <memory>

namespace mlir {
class Pass;
}

namespace kiln::passes {

// --kiln-cleanup: the dialect's folders and canonicalization patterns, then dead-code removal.
std::unique_ptr<mlir::Pass> create_cleanup_pass();

// --kiln-plan-memory: liveness, in-place and view aliasing, greedy-by-size arena offsets
// (`kiln.arena_offsets` on ops; `kiln.arg_offsets`, `kiln.arena_bytes`, `kiln.naive_bytes` on the
// func). Arguments from `kiln.num_inputs` on (captured parameters) are weights, not arena values.
std::unique_ptr<mlir::Pass> create_plan_memory_pass();

// Registers every kiln pass with MLIR's global pass registry.
void register_passes();

}  // namespace kiln::passes
