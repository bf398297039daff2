// --kiln-fuse-block-epilogues: an elementwise chain after a convolution, linear layer or matmul
// runs as that product's epilogue, on each block of the output its GEMM finishes while the block is
// in cache, instead of as a second pass over the whole output from memory. --kiln-fuse-epilogues
// already takes a bias, a residual and one of eight activations; this takes any chain the
// elementwise fusion grouped after them (hardswish, x * sigmoid(1.702 x), a scale and shift, ...),
// with operands of any broadcast shape.
//
//   y = kiln.conv2d / conv2d_fused / linear / linear_fused / matmul (...)   (float32)
//   z = kiln.fused (y, a, b) { ... }  (or a single elementwise op, which becomes one)
//
// where z is y's first user. When y has no other user the chain maps each block in place (z
// takes y's buffer); when later ops read y too (a training step's backward, a second output) y
// is stored as before and the chain writes z's buffer from the block while it is in cache.
//
// z must have y's type (one result, element for element of y). z is marked
// kiln.block_epilogue and the product moves down to just before it, so every other input of the
// chain is computed when the GEMM runs. Code generation emits the chain as a function the
// runtime's kernel calls on each finished block (codegen kernels.cpp, kernels::BlockEpilogue);
// so does an artifact's generated code (codegen/native_code.h) where y has no other user, while
// its portable plan runs the two ops one after the other.

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Pass/Pass.h"

#include "FusedRegion.h"
#include "kiln/ir/KilnDialect.h"
#include "kiln/passes/Passes.h"

namespace kiln::passes {
namespace {

bool is_product(mlir::Operation* op) {
  return mlir::isa<ir::Conv2dOp, ir::Conv2dFusedOp, ir::LinearOp, ir::LinearFusedOp, ir::MatmulOp>(
      op);
}

void fuse(mlir::Operation* product) {
  mlir::Value y = product->getResult(0);
  if (y.use_empty() || !is_block_value(y.getType())) return;
  // The chain is y's first user in the block. Users after it (a training step's backward, a
  // second output) read y as stored: the chain then writes its own buffer. The product moves
  // down to the chain, so nothing may read y in between.
  mlir::Block* block = product->getBlock();
  mlir::Operation* user = nullptr;
  for (mlir::Operation* u : y.getUsers()) {
    mlir::Operation* at = block->findAncestorOpInBlock(*u);
    if (!at) return;
    if (!user || at->isBeforeInBlock(user)) user = at;
  }
  bool shared = false;
  for (mlir::Operation* u : y.getUsers()) {
    if (u == user) continue;
    if (!user->isBeforeInBlock(block->findAncestorOpInBlock(*u))) return;
    shared = true;
  }
  if (!llvm::is_contained(user->getOperands(), y) || user->getNumResults() != 1 ||
      user->getResult(0).getType() != y.getType())
    return;
  // With y stored anyway, a chain that only feeds the next linear or matmul saves more as that
  // product's prologue (--kiln-fuse-block-prologues: its value never stored) than as this one's
  // epilogue (y not read back).
  if (shared && prologue_product(user->getResult(0))) return;
  user = mark_block_chain(user, ir::kBlockEpilogueAttr);
  if (user) product->moveBefore(user);
}

struct FuseBlockEpiloguesPass
    : mlir::PassWrapper<FuseBlockEpiloguesPass, mlir::OperationPass<mlir::func::FuncOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(FuseBlockEpiloguesPass)
  llvm::StringRef getArgument() const override { return "kiln-fuse-block-epilogues"; }
  llvm::StringRef getDescription() const override {
    return "Run the elementwise chain after a conv2d / linear / matmul as its GEMM's block "
           "epilogue";
  }
  void runOnOperation() override {
    llvm::SmallVector<mlir::Operation*> products;
    getOperation().walk([&](mlir::Operation* op) {
      if (is_product(op)) products.push_back(op);
    });
    for (mlir::Operation* op : products) fuse(op);
  }
};

}  // namespace

std::unique_ptr<mlir::Pass> create_fuse_block_epilogues_pass() {
  return std::make_unique<FuseBlockEpiloguesPass>();
}

}  // namespace kiln::passes
