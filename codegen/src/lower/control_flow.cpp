// kiln::cond / kiln::loop traces: scf.if and scf.for around kiln ops, with the scalar glue
// (arith on index/integers, tensor.extract of a 0-dim tensor, tensor.from_elements) they need.
// Region results live in buffers allocated before the region: each branch copies its yielded
// values there; a loop's carried values are buffers updated at the end of every iteration.

#include "kiln/ir/OpSchema.h"
#include "lowering.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"

namespace kiln::codegen::detail {
namespace LLVM = mlir::LLVM;

void Lowering::lower_block(mlir::Block& block) {
  // The first op that cannot be lowered ends the block: later ops would read values it never
  // produced. Its error names it.
  for (mlir::Operation& op : block.without_terminator())
    if (!errors_.empty() || !lower_op(&op)) return;
}

mlir::Value Lowering::load_scalar(const View& v) {
  mlir::Type mem = memory_type(v.elem);
  mlir::Value off = builder_.create<mlir::arith::ConstantIntOp>(loc_, v.offset, 64);
  auto gep = builder_.create<LLVM::GEPOp>(loc_, ptr_type(), mem, v.base, mlir::ValueRange{off});
  mlir::Value x = builder_.create<LLVM::LoadOp>(loc_, mem, gep);
  note_use(v.base, x.getDefiningOp());
  if (v.elem.isInteger(1)) x = builder_.create<mlir::arith::TruncIOp>(loc_, v.elem, x);
  return x;
}

namespace {
bool same_elements(const View& a, const View& b) {
  return a.base == b.base && a.offset == b.offset && a.sizes == b.sizes && a.strides == b.strides;
}
}  // namespace

// A carried value read only by an update op (the schema's `update` trait: index_add, scatter*,
// masked_fill) whose result the body yields back in its place: the op computes its result in the
// carried buffer, so neither the op's copy of its input nor the copy back at the end of the
// iteration happens (what one-shot bufferization does for tensor.insert_slice on an iter_arg). An
// LSTM's output sequence, written one step per iteration, is such a value.
void Lowering::plan_in_place_updates(mlir::Block& body, llvm::ArrayRef<View> carries) {
  mlir::Operation* yield = body.getTerminator();
  for (unsigned k = 0; k < carries.size(); ++k) {
    mlir::BlockArgument carried = body.getArgument(k + 1);
    if (!carried.hasOneUse()) continue;
    mlir::Operation* user = *carried.getUsers().begin();
    const ir::OpSchema* schema = ir::find_op_schema(user->getName().getStringRef().str());
    if (!schema || !(schema->traits & ir::kTraitUpdate) || user->getBlock() != &body ||
        user->getOperand(0) != carried || user->getNumResults() != 1 ||
        yield->getOperand(k) != user->getResult(0) ||
        user->getResult(0).getType() != carried.getType())
      continue;
    in_place_[user->getResult(0)] = carries[k];
  }
}

bool Lowering::lower_control_flow(mlir::Operation* op) {
  const llvm::StringRef name = op->getName().getStringRef();
  auto tensor_of = [](mlir::Value v) {
    return mlir::dyn_cast<mlir::RankedTensorType>(v.getType());
  };

  if (name == "tensor.extract") {
    if (op->getNumOperands() != 1) {
      error(op, "only 0-dim tensor.extract is supported");
      return true;
    }
    scalars_[op->getResult(0)] = load_scalar(view(op->getOperand(0)));
    return true;
  }
  if (name == "tensor.from_elements") {
    if (op->getNumOperands() != 1) {
      error(op, "only single-element tensor.from_elements is supported");
      return true;
    }
    View d = destination(op->getResult(0));
    mlir::Value x = scalars_.lookup(op->getOperand(0));
    mlir::Type mem = memory_type(d.elem);
    // Integer scalars only (index casts, loop counters); widen or narrow to the element type.
    if (mlir::isa<mlir::FloatType>(d.elem)) {
      x = builder_.create<mlir::arith::SIToFPOp>(loc_, d.elem, x);
    } else if (x.getType().getIntOrFloatBitWidth() > mem.getIntOrFloatBitWidth()) {
      x = builder_.create<mlir::arith::TruncIOp>(loc_, mem, x);
    } else if (x.getType().getIntOrFloatBitWidth() < mem.getIntOrFloatBitWidth()) {
      x = builder_.create<mlir::arith::ExtSIOp>(loc_, mem, x);
    }
    auto zero = builder_.create<mlir::arith::ConstantIntOp>(loc_, 0, 64);
    auto gep = builder_.create<LLVM::GEPOp>(loc_, ptr_type(), mem, d.base, mlir::ValueRange{zero});
    auto store = builder_.create<LLVM::StoreOp>(loc_, x, gep);
    note_use(d.base, store);
    views_[op->getResult(0)] = d;
    return true;
  }
  if (op->getDialect() && op->getDialect()->getNamespace() == "arith") {
    for (mlir::Value v : op->getOperands()) {
      if (tensor_of(v) || !scalars_.count(v)) {
        error(op, "arith on tensors is not supported");
        return true;
      }
    }
    mlir::IRMapping map;
    for (mlir::Value v : op->getOperands()) map.map(v, scalars_.lookup(v));
    mlir::Operation* clone = builder_.clone(*op, map);
    for (unsigned i = 0; i < op->getNumResults(); ++i)
      scalars_[op->getResult(i)] = clone->getResult(i);
    return true;
  }
  if (name == "scf.if") {
    auto src = mlir::cast<mlir::scf::IfOp>(op);
    mlir::Value cond = scalars_.lookup(src.getCondition());
    if (!cond) {
      error(op, "the condition is not a scalar the lowering knows");
      return true;
    }
    llvm::SmallVector<View> dests;
    for (mlir::Value r : op->getResults()) dests.push_back(destination(r));
    auto dst = builder_.create<mlir::scf::IfOp>(loc_, cond, /*withElseRegion=*/true);
    auto lower_branch = [&](mlir::Region& from, mlir::Block* to) {
      mlir::OpBuilder::InsertionGuard guard(builder_);
      builder_.setInsertionPoint(to->getTerminator());
      if (from.empty()) return;
      lower_block(from.front());
      mlir::Operation* yield = from.front().getTerminator();
      for (unsigned i = 0; i < yield->getNumOperands(); ++i)
        emit_kernel(yield->getOperand(i), dests[i]);
    };
    lower_branch(src.getThenRegion(), dst.thenBlock());
    lower_branch(src.getElseRegion(), dst.elseBlock());
    for (unsigned i = 0; i < op->getNumResults(); ++i) {
      views_[op->getResult(i)] = dests[i];
      note_use(dests[i].base, dst);
    }
    return true;
  }
  if (name == "scf.for") {
    auto src = mlir::cast<mlir::scf::ForOp>(op);
    mlir::Value lb = scalars_.lookup(src.getLowerBound()),
                ub = scalars_.lookup(src.getUpperBound()), step = scalars_.lookup(src.getStep());
    if (!lb || !ub || !step) {
      error(op, "loop bounds are not scalars the lowering knows");
      return true;
    }
    // Carried values: one buffer each, initialized with a copy of the initial value.
    llvm::SmallVector<View> carries;
    for (unsigned k = 0; k < op->getNumResults(); ++k) {
      carries.push_back(destination(op->getResult(k)));
      emit_kernel(src.getInitArgs()[k], carries.back());
    }
    auto dst = builder_.create<mlir::scf::ForOp>(loc_, lb, ub, step);
    {
      mlir::OpBuilder::InsertionGuard guard(builder_);
      builder_.setInsertionPoint(dst.getBody()->getTerminator());
      mlir::Block& body = src.getRegion().front();
      scalars_[body.getArgument(0)] = dst.getInductionVar();
      for (unsigned k = 0; k < carries.size(); ++k) views_[body.getArgument(k + 1)] = carries[k];
      mlir::Operation* yield = body.getTerminator();
      plan_in_place_updates(body, carries);
      lower_block(body);
      // New values first go to temporaries when they still read a carried buffer (a permuted
      // view of it, say), then to the carried buffers.
      llvm::SmallVector<std::pair<mlir::Value, View>> staged;
      for (unsigned k = 0; k < yield->getNumOperands(); ++k) {
        mlir::Value v = yield->getOperand(k);
        if (has_view(v) && same_elements(views_[v], carries[k])) continue;  // updated in place
        bool aliases = false;
        if (has_view(v)) {
          for (const View& c : carries) aliases |= views_[v].base == c.base;
        }
        if (aliases || deferred(v)) {
          View tmp = destination(v);
          emit_kernel(v, tmp);
          views_[v] = tmp;
        }
        staged.push_back({v, carries[k]});
      }
      for (auto& [v, carry] : staged) emit_kernel(v, carry);
    }
    for (unsigned k = 0; k < op->getNumResults(); ++k) {
      views_[op->getResult(k)] = carries[k];
      note_use(carries[k].base, dst);
    }
    return true;
  }
  return false;
}

}  // namespace kiln::codegen::detail
