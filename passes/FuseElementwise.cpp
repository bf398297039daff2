// --kiln-fuse-elementwise: groups chains of elementwise ops (unary, binary with implicit NumPy
// broadcasting, compare, where, clamp, casts) into kiln.fused regions that codegen lowers to one
// loop nest each. Greedy, in program order: an elementwise op joins the group of one of its
// producers when every use of that group's values outside the group comes at or after the op, so
// the region can be emitted where its last member was without any value being used before it is
// defined (and no two groups depend on each other both ways). Groups of one op stay as they are.
// Operands of the region are its external inputs (constants included), results the values that
// escape it. Conv/linear epilogues are fused earlier by --kiln-fuse-epilogues.

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Pass/Pass.h"

#include "kiln/ir/KilnDialect.h"
#include "kiln/passes/Passes.h"

namespace kiln::passes {
namespace {

bool is_elementwise(mlir::Operation* op) {
  return mlir::isa<ir::AddOp, ir::SubOp, ir::MulOp, ir::DivOp, ir::PowOp, ir::MaximumOp,
                   ir::MinimumOp, ir::EqOp, ir::NeOp, ir::LtOp, ir::LeOp, ir::GtOp, ir::GeOp,
                   ir::LogicalAndOp, ir::LogicalOrOp, ir::NegOp, ir::AbsOp, ir::ExpOp, ir::LogOp,
                   ir::Log1pOp, ir::SqrtOp, ir::RsqrtOp, ir::SinOp, ir::CosOp, ir::TanhOp,
                   ir::SigmoidOp, ir::ReluOp, ir::SiluOp, ir::ErfOp, ir::FloorOp, ir::CeilOp,
                   ir::RoundOp, ir::SignOp, ir::ReciprocalOp, ir::LogicalNotOp, ir::GeluOp,
                   ir::LeakyReluOp, ir::ClampOp, ir::ToOp, ir::WhereOp>(op);
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

void materialize(const Group& group) {
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
}

struct FuseElementwisePass
    : mlir::PassWrapper<FuseElementwisePass, mlir::OperationPass<mlir::func::FuncOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(FuseElementwisePass)
  llvm::StringRef getArgument() const override { return "kiln-fuse-elementwise"; }
  llvm::StringRef getDescription() const override {
    return "Group chains of elementwise ops into kiln.fused regions";
  }
  void runOnOperation() override {
    mlir::Block& block = getOperation().getBody().front();
    llvm::DenseMap<mlir::Operation*, int> group_of;
    std::vector<Group> groups;
    for (mlir::Operation& op : block) {
      if (!is_elementwise(&op)) continue;
      // Join every producer group that may end here; they merge into one region.
      llvm::SmallVector<int, 2> joinable;
      for (mlir::Value v : op.getOperands()) {
        auto it = group_of.find(v.getDefiningOp());
        if (it == group_of.end() || llvm::is_contained(joinable, it->second)) continue;
        if (can_join(groups[it->second], it->second, &op, group_of, block))
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
      if (g.size() >= 2) materialize(g);
    }
  }
};

}  // namespace

std::unique_ptr<mlir::Pass> create_fuse_elementwise_pass() {
  return std::make_unique<FuseElementwisePass>();
}

}  // namespace kiln::passes
