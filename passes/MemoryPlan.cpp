// --kiln-plan-memory: assigns every tensor value of @forward that lives in the runtime's arena a
// byte offset, so a session allocates one arena once and reuses it for every run.
//
//  1. Buffers. Each op result and each input argument is a value; a view/reshape of an arena
//     value aliases it (artifact values are contiguous, so the reshape is free) and an
//     elementwise op whose operand buffer dies at that op writes its result in place. Aliased
//     values share one buffer.
//  2. Liveness. A buffer lives from the op that defines it (inputs: before the first op) to the
//     last op that reads any of its values; returned values live to the end.
//  3. Offsets, greedy by size: largest buffers first, each at the lowest 64-byte aligned offset
//     that overlaps no already placed buffer whose live range intersects its own.
//
// Results: op attribute `kiln.arena_offsets` (one offset per result, -1 when not in the arena),
// func attributes `kiln.arg_offsets` (per argument), `kiln.arena_bytes` and `kiln.naive_bytes`
// (the sum of all buffers: what a plan without reuse would need). Captured parameters (arguments
// after `kiln.num_inputs`, when present) and constants are weights, never in the arena.

#include <algorithm>
#include <functional>
#include <numeric>

#include "llvm/ADT/DenseMap.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Pass/Pass.h"

#include "kiln/ir/KilnDialect.h"
#include "kiln/ir/OpSchema.h"
#include "kiln/passes/Passes.h"

namespace kiln::passes {
namespace {

constexpr int64_t kAlign = 64;

int64_t bytes_of(mlir::Type type) {
  auto t = mlir::dyn_cast<mlir::RankedTensorType>(type);
  if (!t || !t.hasStaticShape()) return -1;
  const unsigned bits = t.getElementType().getIntOrFloatBitWidth();
  const int64_t elem = bits == 1 ? 1 : (bits + 7) / 8;
  return t.getNumElements() * elem;
}

// The schema's traits (ir/ops.toml): ops whose result may share the input's buffer, and ops whose
// kernels may write their output over a same-shaped input.
bool has_trait(llvm::StringRef name, uint32_t trait) {
  const kiln::ir::OpSchema* schema = kiln::ir::find_op_schema({name.data(), name.size()});
  return schema && (schema->traits & trait);
}
bool is_alias_op(llvm::StringRef name) {
  return has_trait(name, kiln::ir::kTraitAlias);
}
bool is_inplace_op(llvm::StringRef name) {
  return has_trait(name, kiln::ir::kTraitInplace);
}

struct Buffer {
  int64_t size = 0;
  int64_t begin = 0, end = 0;  // live range in op positions (inclusive)
  int64_t offset = -1;
};

struct PlanMemoryPass : mlir::PassWrapper<PlanMemoryPass, mlir::OperationPass<mlir::func::FuncOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(PlanMemoryPass)

  llvm::StringRef getArgument() const override { return "kiln-plan-memory"; }
  llvm::StringRef getDescription() const override {
    return "Assign arena offsets to @forward's values (liveness, greedy by size, in-place and "
           "view aliasing)";
  }

  void runOnOperation() override {
    mlir::func::FuncOp fn = getOperation();
    if (fn.getBody().empty()) return;
    mlir::Block& block = fn.getBody().front();
    int64_t num_inputs = block.getNumArguments();
    if (auto a = fn->getAttrOfType<mlir::IntegerAttr>("kiln.num_inputs")) {
      num_inputs = std::min<int64_t>(a.getInt(), num_inputs);
    }

    std::vector<Buffer> buffers;
    llvm::DenseMap<mlir::Value, int64_t> buffer_of;  // arena values only
    auto new_buffer = [&](mlir::Value v, int64_t pos) {
      const int64_t size = bytes_of(v.getType());
      if (size < 0) return;
      buffer_of[v] = static_cast<int64_t>(buffers.size());
      buffers.push_back({size, pos, pos, -1});
    };
    auto touch = [&](mlir::Value v, int64_t pos) {
      auto it = buffer_of.find(v);
      if (it != buffer_of.end()) buffers[it->second].end = std::max(buffers[it->second].end, pos);
    };

    // Last use of each value (position of the op), to decide in-place reuse.
    llvm::DenseMap<mlir::Operation*, int64_t> position;
    int64_t n = 0;
    for (mlir::Operation& op : block) position[&op] = n++;
    const int64_t end_pos = n;
    // The runtime reads a scalar extracted from a one-element tensor (a branch predicate) from
    // that tensor's buffer, so the scalar's uses keep the tensor alive too.
    std::function<int64_t(mlir::Value)> last_use = [&](mlir::Value v) {
      int64_t last = -1;
      for (mlir::OpOperand& use : v.getUses()) {
        if (mlir::isa<mlir::tensor::ExtractOp>(use.getOwner()))
          last = std::max(last, last_use(use.getOwner()->getResult(0)));
        mlir::Operation* user = block.findAncestorOpInBlock(*use.getOwner());
        if (!user) continue;
        last = std::max(last,
                        user->getName().getStringRef() == "func.return" ? end_pos : position[user]);
      }
      return last;
    };
    // A buffer's last use over all its values; computed lazily as values join.
    std::vector<int64_t> buffer_last;

    for (int64_t i = 0; i < num_inputs; ++i) {
      new_buffer(block.getArgument(i), -1);
      if (buffer_of.count(block.getArgument(i)))
        buffer_last.push_back(last_use(block.getArgument(i)));
    }
    // Ops marked for generated code (consecutive ops with one `kiln.symbol`, from codegen's
    // compile_native_code) run as one call: what the group reads stays live to its last op, and
    // no op of it writes over an operand (the generated loops vectorize only on distinct
    // buffers: LLVM's runtime alias check sends an exact alias down the scalar loop).
    // A group that is also the block prologue of the product after it (`kiln.prologue_symbol`)
    // runs inside that product, so what it reads stays live through the product too.
    auto group_end = [&](mlir::Operation& op) {
      const mlir::Attribute symbol = op.getAttr("kiln.symbol");
      mlir::Operation* last = &op;
      while (symbol && last->getNextNode() && last->getNextNode()->getAttr("kiln.symbol") == symbol)
        last = last->getNextNode();
      if (last->hasAttr("kiln.prologue_symbol") && last->getNextNode()) last = last->getNextNode();
      return position[last];
    };
    for (mlir::Operation& op : block) {
      const int64_t pos = position[&op];
      const llvm::StringRef name = op.getName().getStringRef();
      if (mlir::isa<ir::ConstantOp, ir::NoneOp, mlir::func::ReturnOp>(op)) continue;
      // Operands: extend their buffers' ranges (view aliasing below extends them further).
      for (mlir::Value v : op.getOperands()) touch(v, group_end(op));
      if (op.getNumResults() == 1 && op.getNumOperands() >= 1) {
        mlir::Value in = op.getOperand(0), res = op.getResult(0);
        auto it = buffer_of.find(in);
        const bool same_bytes = bytes_of(in.getType()) == bytes_of(res.getType());
        if (it != buffer_of.end() && is_alias_op(name) && same_bytes) {
          const int64_t buffer = it->second;  // copied: inserting res may rehash the map
          buffer_of[res] = buffer;
          buffer_last[buffer] = std::max(buffer_last[buffer], last_use(res));
          continue;
        }
        // A group with generated code that is also its product's block epilogue
        // (`kiln.block_symbol`: the product right before it maps each block of its output in
        // place) takes the product's buffer and no other.
        mlir::Operation* product = op.hasAttr("kiln.block_symbol") ? op.getPrevNode() : nullptr;
        if ((is_inplace_op(name) && !op.hasAttr("kiln.symbol")) || product) {
          bool reused = false;
          for (mlir::Value operand : op.getOperands()) {
            if (product && operand.getDefiningOp() != product) continue;
            auto ot = buffer_of.find(operand);
            if (ot == buffer_of.end() || operand.getType() != res.getType()) continue;
            const int64_t buffer = ot->second;         // copied: inserting res may rehash the map
            if (buffer_last[buffer] != pos) continue;  // still read later: not in place
            // Every operand reading this buffer is read by this op only at this position.
            buffer_of[res] = buffer;
            buffer_last[buffer] = std::max(pos, last_use(res));
            reused = true;
            break;
          }
          if (reused) continue;
        }
      }
      for (mlir::Value r : op.getResults()) {
        new_buffer(r, pos);
        if (buffer_of.count(r)) buffer_last.push_back(std::max(pos, last_use(r)));
      }
    }
    // Live ranges: from definition to the last use of any value sharing the buffer.
    for (size_t b = 0; b < buffers.size(); ++b) {
      buffers[b].end = std::max({buffers[b].end, buffer_last[b], buffers[b].begin});
    }

    // Greedy by size: largest first, lowest fitting offset among the placed, live-overlapping.
    std::vector<size_t> order(buffers.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return buffers[a].size > buffers[b].size; });
    std::vector<size_t> placed;
    int64_t arena = 0, naive = 0;
    for (const auto& [value, b] : buffer_of)
      naive += (buffers[b].size + kAlign - 1) / kAlign * kAlign;
    for (size_t b : order) {
      Buffer& buf = buffers[b];
      std::vector<std::pair<int64_t, int64_t>> busy;  // [offset, offset + size) of live neighbours
      for (size_t p : placed) {
        const Buffer& o = buffers[p];
        if (o.begin <= buf.end && buf.begin <= o.end) busy.push_back({o.offset, o.offset + o.size});
      }
      std::sort(busy.begin(), busy.end());
      int64_t offset = 0;
      for (const auto& [lo, hi] : busy) {
        if (offset + buf.size <= lo) break;
        offset = std::max(offset, (hi + kAlign - 1) / kAlign * kAlign);
      }
      buf.offset = offset;
      arena = std::max(arena, offset + buf.size);
      placed.push_back(b);
    }
    arena = (arena + kAlign - 1) / kAlign * kAlign;

    mlir::Builder builder(&getContext());
    auto offset_of = [&](mlir::Value v) -> int64_t {
      auto it = buffer_of.find(v);
      return it == buffer_of.end() ? -1 : buffers[it->second].offset;
    };
    llvm::SmallVector<int64_t> arg_offsets;
    for (mlir::BlockArgument a : block.getArguments()) arg_offsets.push_back(offset_of(a));
    for (mlir::Operation& op : block) {
      if (op.getNumResults() == 0) continue;
      llvm::SmallVector<int64_t> offsets;
      for (mlir::Value r : op.getResults()) offsets.push_back(offset_of(r));
      op.setAttr("kiln.arena_offsets", builder.getDenseI64ArrayAttr(offsets));
    }
    fn->setAttr("kiln.arg_offsets", builder.getDenseI64ArrayAttr(arg_offsets));
    fn->setAttr("kiln.arena_bytes", builder.getI64IntegerAttr(arena));
    fn->setAttr("kiln.naive_bytes", builder.getI64IntegerAttr(naive));
  }
};

}  // namespace

std::unique_ptr<mlir::Pass> create_plan_memory_pass() {
  return std::make_unique<PlanMemoryPass>();
}

}  // namespace kiln::passes
