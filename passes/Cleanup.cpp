// --kiln-cleanup: folds and canonicalizes kiln ops (relu(relu(x)) -> relu(x), ...) with the greedy
// rewrite driver, which also erases ops left without uses.

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include "kiln/ir/KilnDialect.h"
#include "kiln/passes/Passes.h"

namespace kiln::passes {
namespace {

struct CleanupPass : mlir::PassWrapper<CleanupPass, mlir::OperationPass<mlir::func::FuncOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(CleanupPass)

  llvm::StringRef getArgument() const override { return "kiln-cleanup"; }
  llvm::StringRef getDescription() const override {
    return "Fold and canonicalize kiln ops and remove dead ones";
  }

  void runOnOperation() override {
    mlir::RewritePatternSet patterns(&getContext());
    for (mlir::RegisteredOperationName op : getContext().getRegisteredOperations()) {
      if (op.getDialectNamespace() == "kiln") op.getCanonicalizationPatterns(patterns, &getContext());
    }
    if (mlir::failed(mlir::applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

}  // namespace

std::unique_ptr<mlir::Pass> create_cleanup_pass() { return std::make_unique<CleanupPass>(); }

}  // namespace kiln::passes
