// --kiln-fuse-elementwise: groups chains of elementwise ops (unary, binary with implicit NumPy
// broadcasting, compare, where, clamp, casts) into kiln.fused regions that codegen lowers to one
// loop nest each. Greedy, in program order: an elementwise op joins the group of one of its
// producers when every use of that group's values outside the group comes at or after the op, so
// the region can be emitted where its last member was without any value being used before it is
// defined (and no two groups depend on each other both ways). Groups of one op stay as they are.
// All ops of one region compute the same shape, so the region is one loop nest; operands (external
// inputs, constants included) may broadcast into it; results are the values that escape.
// Conv/linear epilogues are fused earlier by --kiln-fuse-epilogues.

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Pass/Pass.h"

#include "FusedRegion.h"
#include "kiln/ir/KilnDialect.h"
#include "kiln/passes/Passes.h"

namespace kiln::passes {
namespace {

// The ops code generation emits as loops (the schema's lowering = "loop").
bool is_elementwise(mlir::Operation* op) {
  return op->hasTrait<ir::traits::ScalarLoop>();
}

using Group = llvm::SmallVector<mlir::Operation*>;

bool can_join(const Group& group, int id, mlir::Operation* op,
              const llvm::DenseMap<mlir::Operation*, int>& group_of, mlir::Block& block) {
  for (mlir::Operation* member : group) {
    for (mlir::Operation* user : member->getUsers()) {
      mlir::Operation* at = block.findAncestorOpInBlock(*user);
      if (!at || at == op) continue;
      auto it = group_of.find(at);
      if (it != group_of.end() && it->second == id) continue;
      if (!op->isBeforeInBlock(at)) return false;
    }
  }
  return true;
}

// Every op of a region computes the same shape (the loop nest codegen emits); operands may be
// smaller and broadcast into it.
llvm::ArrayRef<int64_t> shape_of(mlir::Operation* op) {
  return mlir::cast<mlir::RankedTensorType>(op->getResult(0).getType()).getShape();
}

struct FuseElementwisePass
    : mlir::PassWrapper<FuseElementwisePass, mlir::OperationPass<mlir::func::FuncOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(FuseElementwisePass)
  llvm::StringRef getArgument() const override { return "kiln-fuse-elementwise"; }
  llvm::StringRef getDescription() const override {
    return "Group chains of elementwise ops into kiln.fused regions";
  }
  void runOnOperation() override {
    // Every block (the function's, and loop/branch bodies) is grouped on its own; the bodies of
    // existing kiln.fused regions are left alone.
    llvm::SmallVector<mlir::Block*> blocks;
    getOperation().walk([&](mlir::Block* block) {
      mlir::Operation* parent = block->getParentOp();
      if (!mlir::isa<ir::FusedOp>(parent)) blocks.push_back(block);
    });
    for (mlir::Block* block : blocks) fuse_block(*block);
  }

  static void fuse_block(mlir::Block& block) {
    llvm::DenseMap<mlir::Operation*, int> group_of;
    std::vector<Group> groups;
    for (mlir::Operation& op : block) {
      if (!is_elementwise(&op)) continue;
      // Join every producer group that may end here; they merge into one region.
      llvm::SmallVector<int, 2> joinable;
      for (mlir::Value v : op.getOperands()) {
        auto it = group_of.find(v.getDefiningOp());
        if (it == group_of.end() || llvm::is_contained(joinable, it->second)) continue;
        if (shape_of(groups[it->second].front()) == shape_of(&op) &&
            can_join(groups[it->second], it->second, &op, group_of, block))
          joinable.push_back(it->second);
      }
      int chosen = joinable.empty() ? static_cast<int>(groups.size()) : joinable.front();
      if (joinable.empty()) groups.emplace_back();
      if (joinable.size() > 1) {
        for (size_t k = 1; k < joinable.size(); ++k) {
          Group& other = groups[joinable[k]];
          for (mlir::Operation* member : other) group_of[member] = chosen;
          groups[chosen].append(other.begin(), other.end());
          other.clear();
        }
        llvm::sort(groups[chosen],
                   [](mlir::Operation* a, mlir::Operation* b) { return a->isBeforeInBlock(b); });
      }
      groups[chosen].push_back(&op);
      group_of[&op] = chosen;
    }
    for (const Group& g : groups) {
      if (g.size() >= 2) materialize_fused(g);
    }
  }
};

}  // namespace

std::unique_ptr<mlir::Pass> create_fuse_elementwise_pass() {
  return std::make_unique<FuseElementwisePass>();
}

}  // namespace kiln::passes
