// --kiln-fuse-block-prologues: an elementwise chain whose result is only a linear layer's input
// runs as that product's prologue: the linear computes the input one block of rows at a time,
// just before its GEMM reads those rows, so they are read from cache rather than written out
// whole and read back from memory (a mask or dropout before a projection, an activation after a
// residual add, a scale computed in a previous step).
//
//   x = kiln.fused (a, b, ...) { ... }  (or a single elementwise op, which becomes one)
//   y = kiln.linear / linear_fused (x, w, ...)      x float32, used by nothing else
//
// x is marked kiln.block_prologue and moved down to just before the linear, so that nothing runs
// between them. Code generation emits the chain as a function the runtime's linear calls on
// each block of rows (codegen block_epilogue.cpp, kernels::linear_prologue_out); the artifact's
// portable plan runs the two ops one after the other. A chain that is already another product's
// block epilogue stays one.

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Pass/Pass.h"

#include "FusedRegion.h"
#include "kiln/ir/KilnDialect.h"
#include "kiln/passes/Passes.h"

namespace kiln::passes {
namespace {

void fuse(mlir::Operation* linear) {
  mlir::Value x = linear->getOperand(0);
  mlir::Operation* producer = x.getDefiningOp();
  if (!producer || producer->getBlock() != linear->getBlock() || !x.hasOneUse() ||
      producer->getNumResults() != 1 || !is_block_value(x.getType()) ||
      producer->hasAttr(ir::kBlockEpilogueAttr))
    return;
  producer = mark_block_chain(producer, ir::kBlockPrologueAttr);
  if (producer) producer->moveBefore(linear);
}

struct FuseBlockProloguesPass
    : mlir::PassWrapper<FuseBlockProloguesPass, mlir::OperationPass<mlir::func::FuncOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(FuseBlockProloguesPass)
  llvm::StringRef getArgument() const override { return "kiln-fuse-block-prologues"; }
  llvm::StringRef getDescription() const override {
    return "Compute the elementwise chain that is a linear's input as the linear's block "
           "prologue";
  }
  void runOnOperation() override {
    llvm::SmallVector<mlir::Operation*> linears;
    getOperation().walk([&](mlir::Operation* op) {
      if (mlir::isa<ir::LinearOp, ir::LinearFusedOp>(op)) linears.push_back(op);
    });
    for (mlir::Operation* op : linears) fuse(op);
  }
};

}  // namespace

std::unique_ptr<mlir::Pass> create_fuse_block_prologues_pass() {
  return std::make_unique<FuseBlockProloguesPass>();
}

}  // namespace kiln::passes
