// kiln.fused regions from groups of elementwise ops (FusedRegion.h).

#include "FusedRegion.h"

#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

#include "kiln/ir/KilnDialect.h"

namespace kiln::passes {

mlir::Operation* materialize_fused(llvm::ArrayRef<mlir::Operation*> group) {
  llvm::SmallPtrSet<mlir::Operation*, 8> members(group.begin(), group.end());
  llvm::SetVector<mlir::Value> inputs;
  llvm::SmallVector<mlir::Value> outputs;
  for (mlir::Operation* op : group) {
    for (mlir::Value v : op->getOperands()) {
      if (!members.contains(v.getDefiningOp())) inputs.insert(v);
    }
    for (mlir::Value r : op->getResults()) {
      if (llvm::any_of(r.getUsers(), [&](mlir::Operation* u) { return !members.contains(u); }))
        outputs.push_back(r);
    }
  }
  mlir::Operation* last = group.back();
  mlir::OpBuilder b(last);
  mlir::OperationState state(last->getLoc(), "kiln.fused");
  state.addOperands(inputs.getArrayRef());
  for (mlir::Value v : outputs) state.addTypes(v.getType());
  mlir::Region* region = state.addRegion();
  mlir::Block* body = new mlir::Block();
  region->push_back(body);
  mlir::IRMapping map;
  for (mlir::Value v : inputs) map.map(v, body->addArgument(v.getType(), v.getLoc()));
  mlir::OpBuilder inner(last->getContext());  // the region has no parent op yet
  inner.setInsertionPointToEnd(body);
  for (mlir::Operation* op : group) inner.clone(*op, map);
  llvm::SmallVector<mlir::Value> yielded;
  for (mlir::Value v : outputs) yielded.push_back(map.lookup(v));
  inner.create<ir::YieldOp>(last->getLoc(), yielded);
  mlir::Operation* fused = b.create(state);
  for (size_t i = 0; i < outputs.size(); ++i) {
    outputs[i].replaceUsesWithIf(fused->getResult(i), [&](mlir::OpOperand& use) {
      return !members.contains(use.getOwner());
    });
  }
  for (auto it = group.rbegin(); it != group.rend(); ++it) (*it)->erase();
  return fused;
}

mlir::Operation* mark_block_chain(mlir::Operation* chain, llvm::StringRef attr) {
  if (!mlir::isa<ir::FusedOp>(chain)) {
    if (!chain->hasTrait<ir::traits::ScalarLoop>()) return nullptr;
    chain = materialize_fused({chain});
  }
  chain->setAttr(attr, mlir::UnitAttr::get(chain->getContext()));
  return chain;
}

mlir::Operation* prologue_product(mlir::Value x) {
  if (!x.hasOneUse()) return nullptr;
  mlir::OpOperand& use = *x.getUses().begin();
  mlir::Operation* user = use.getOwner();
  if (use.getOperandNumber() != 0) return nullptr;
  if (mlir::isa<ir::LinearOp, ir::LinearFusedOp>(user)) return user;
  if (!mlir::isa<ir::MatmulOp>(user)) return nullptr;
  auto rhs = mlir::dyn_cast<mlir::RankedTensorType>(user->getOperand(1).getType());
  return rhs && rhs.getRank() == 2 ? user : nullptr;
}

bool is_block_value(mlir::Type t) {
  auto r = mlir::dyn_cast<mlir::RankedTensorType>(t);
  return r && r.getElementType().isF32() && r.hasStaticShape() && r.getRank() >= 1;
}

}  // namespace kiln::passes
