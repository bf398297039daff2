// --kiln-fuse-block-prologues: an elementwise chain whose result is only the input of a linear
// layer (or of a matmul by a [K, N] matrix) runs as that product's prologue: the product computes
// its input one block of rows at a time, just before its GEMM reads those rows, so they are read
// from cache rather than written out whole and read back from memory (a mask or dropout before a
// projection, an activation after a residual add, a scale computed in a previous step).
//
//   x = kiln.fused (a, b, ...) { ... }  (or a single elementwise op, which becomes one)
//   y = kiln.linear / linear_fused (x, w, ...), or kiln.matmul (x, m) with m [K, N]
//
// where x is float32 and used by nothing else. x is marked kiln.block_prologue and moved down to
// just before the product, so that nothing runs between them. Code generation emits the chain as
// a function the runtime's product calls on each block of rows (codegen block_epilogue.cpp,
// kernels::linear_prologue_out / matmul_prologue_out); the training pipeline runs this pass (the
// inference pipeline's artifacts would run the chain as its own instruction anyway). A chain that
// is already another product's block epilogue stays one.

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Pass/Pass.h"

#include "FusedRegion.h"
#include "kiln/ir/KilnDialect.h"
#include "kiln/passes/Passes.h"

namespace kiln::passes {
namespace {

void fuse(mlir::Operation* product) {
  mlir::Value x = product->getOperand(0);
  mlir::Operation* producer = x.getDefiningOp();
  if (!producer || prologue_product(x) != product || producer->getBlock() != product->getBlock() ||
      producer->getNumResults() != 1 || !is_block_value(x.getType()) ||
      producer->hasAttr(ir::kBlockEpilogueAttr))
    return;
  producer = mark_block_chain(producer, ir::kBlockPrologueAttr);
  if (producer) producer->moveBefore(product);
}

struct FuseBlockProloguesPass
    : mlir::PassWrapper<FuseBlockProloguesPass, mlir::OperationPass<mlir::func::FuncOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(FuseBlockProloguesPass)
  llvm::StringRef getArgument() const override { return "kiln-fuse-block-prologues"; }
  llvm::StringRef getDescription() const override {
    return "Compute the elementwise chain that is a linear's or matmul's input as the product's "
           "block prologue";
  }
  void runOnOperation() override {
    llvm::SmallVector<mlir::Operation*> products;
    getOperation().walk([&](mlir::Operation* op) {
      if (mlir::isa<ir::LinearOp, ir::LinearFusedOp, ir::MatmulOp>(op)) products.push_back(op);
    });
    for (mlir::Operation* op : products) fuse(op);
  }
};

}  // namespace

std::unique_ptr<mlir::Pass> create_fuse_block_prologues_pass() {
  return std::make_unique<FuseBlockProloguesPass>();
}

}  // namespace kiln::passes
