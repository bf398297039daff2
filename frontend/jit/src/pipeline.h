#pragma once
// Running a pass pipeline on a module with MLIR's diagnostics collected into the error message
// (internal to kiln_jit).

#include <string>

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

#include "kiln/passes/Passes.h"
#include "kiln/runtime/error.h"

namespace kiln::jit {

// Runs the passes `build` adds on `module`; returns the diagnostics on failure ("" on success).
template <typename Build>
std::string run_pipeline(mlir::MLIRContext& ctx, mlir::ModuleOp module, Build build) {
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(&ctx, [&](mlir::Diagnostic& d) {
    diagnostics += d.str() + "\n";
    return mlir::success();
  });
  mlir::PassManager pm(&ctx);
  build(pm);
  if (mlir::succeeded(pm.run(module))) return "";
  return diagnostics.empty() ? std::string("the pass pipeline failed") : diagnostics;
}

// The pipeline jit::compile and compile_aot run before lowering (CompileOptions::optimize): the
// training pipeline's passes, which hold for any trace, frozen or not, forward or training step;
// no memory plan (code generation lays out its own buffers).
inline void optimize_for_codegen(mlir::MLIRContext& ctx, mlir::ModuleOp module, const char* op,
                                 bool block_epilogues = true, bool block_prologues = true) {
  const std::string err = run_pipeline(ctx, module, [&](mlir::OpPassManager& pm) {
    passes::PipelineOptions po;
    po.plan_memory = false;
    po.block_epilogues = block_epilogues;
    po.block_prologues = block_prologues;
    passes::build_training_pipeline(pm, po);
  });
  KILN_CHECK(err.empty(), op, "pass pipeline: ", err);
}

}  // namespace kiln::jit
