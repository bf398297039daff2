#pragma once
// Building blocks of the tracer: an MLIR context with kiln's dialects loaded and an empty
// `func.func @forward` to record into.

#include <memory>
#include <string>
#include <vector>

namespace mlir {
class MLIRContext;
class ModuleOp;
}  // namespace mlir

namespace kiln::jit {

// A context with kiln, func, arith, tensor and scf loaded.
std::unique_ptr<mlir::MLIRContext> make_context();

}  // namespace kiln::jit
