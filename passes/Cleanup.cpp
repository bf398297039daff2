// --kiln-cleanup: the dialect's folders, kiln's canonicalization patterns (no-op removal, shape-op
// chains) and constant folding of small constant subgraphs, run to a fixed point with the greedy
// rewrite driver (which also erases ops left without uses: DCE), then upstream CSE, then the
// patterns once more for what CSE exposed.
//
// CSE and DCE are safe on every kiln op because the dialect is functional: each op in the ODS
// table is Pure (random numbers enter a trace as captured tensors, e.g. dropout's mask operand,
// never as an op), and kiln.fused is pure exactly when its body is (RecursiveMemoryEffects). The
// ops with the schema's `effect` trait (kiln.guard, a run-time check without results) are not
// Pure, and both passes keep them.

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Dominance.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Transforms/CSE.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include "PatternSets.h"
#include "kiln/ir/KilnDialect.h"
#include "kiln/passes/Passes.h"

namespace kiln::passes {
namespace {

struct CleanupPass : mlir::PassWrapper<CleanupPass, mlir::OperationPass<mlir::func::FuncOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(CleanupPass)

  llvm::StringRef getArgument() const override { return "kiln-cleanup"; }
  llvm::StringRef getDescription() const override {
    return "Canonicalize and constant-fold kiln ops, then CSE and remove dead ones";
  }

  mlir::LogicalResult initialize(mlir::MLIRContext* ctx) override {
    mlir::RewritePatternSet set(ctx);
    for (mlir::RegisteredOperationName op : ctx->getRegisteredOperations()) {
      if (op.getDialectNamespace() == "kiln") op.getCanonicalizationPatterns(set, ctx);
    }
    populate_cleanup_patterns(set);
    populate_constant_fold_patterns(set);
    patterns = mlir::FrozenRewritePatternSet(std::move(set));
    return mlir::success();
  }

  void runOnOperation() override {
    if (mlir::failed(mlir::applyPatternsAndFoldGreedily(getOperation(), patterns)))
      return signalPassFailure();
    mlir::IRRewriter rewriter(&getContext());
    mlir::DominanceInfo dominance(getOperation());
    bool changed = false;
    mlir::eliminateCommonSubExpressions(rewriter, dominance, getOperation(), &changed);
    if (changed && mlir::failed(mlir::applyPatternsAndFoldGreedily(getOperation(), patterns)))
      signalPassFailure();
  }

  mlir::FrozenRewritePatternSet patterns;
};

}  // namespace

std::unique_ptr<mlir::Pass> create_cleanup_pass() {
  return std::make_unique<CleanupPass>();
}

}  // namespace kiln::passes
