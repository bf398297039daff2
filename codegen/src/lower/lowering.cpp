// The driver of the kiln → loops/ABI lowering: builds the entry point, walks @forward in order,
// keeps every value as a strided view of a buffer (views cost nothing: transpose, slice, expand,
// reshape of contiguous data only change strides), defers single-use elementwise values into
// their consumer's loop, and frees each intermediate buffer after its last use.

#include "lowering.h"
#include "vectorize.h"

#include "kiln/ir/KilnDialect.h"

#include "llvm/ADT/StringSet.h"
#include "llvm/Support/CheckedArithmetic.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectResourceBlobManager.h"

namespace kiln::codegen::detail {
namespace LLVM = mlir::LLVM;
using mlir::Value;

llvm::SmallVector<int64_t> contiguous_strides(llvm::ArrayRef<int64_t> sizes) {
  llvm::SmallVector<int64_t> s(sizes.size(), 1);
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 2; d >= 0; --d) {
    s[d] = s[d + 1] * std::max<int64_t>(sizes[d + 1], 1);
  }
  return s;
}

int64_t numel(llvm::ArrayRef<int64_t> sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

bool View::contiguous() const {
  auto want = contiguous_strides(sizes);
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] != 1 && strides[d] != want[d]) return false;
  }
  return true;
}

mlir::Type memory_type(mlir::Type elem) {
  if (elem.isInteger(1)) return mlir::IntegerType::get(elem.getContext(), 8);
  if (auto i = mlir::dyn_cast<mlir::IntegerType>(elem); i && !i.isSignless()) {
    return mlir::IntegerType::get(elem.getContext(), i.getWidth());
  }
  return elem;
}

int64_t element_bytes(mlir::Type elem) {
  return std::max<int64_t>(memory_type(elem).getIntOrFloatBitWidth() / 8, 1);
}

int dtype_code(mlir::Type t) {
  if (t.isF32()) return 0;
  if (t.isF64()) return 1;
  if (t.isF16()) return 2;
  if (t.isBF16()) return 3;
  if (t.isInteger(1)) return 8;
  if (t.isUnsignedInteger(8)) return 5;
  if (t.isInteger(8)) return 4;
  if (t.isInteger(32)) return 6;
  if (t.isInteger(64)) return 7;
  return -1;
}

Lowering::Lowering(mlir::ModuleOp module, const LowerOptions& options)
    : module_(module),
      options_(options),
      builder_(module.getContext()),
      loc_(builder_.getUnknownLoc()) {}

mlir::Type Lowering::ptr_type() const {
  return LLVM::LLVMPointerType::get(loc_->getContext());
}

void Lowering::error(mlir::Operation* op, const std::string& message) {
  std::string where;
  llvm::raw_string_ostream os(where);
  op->getLoc().print(os);
  auto it = op_index_.find(op);
  errors_ += "cannot compile '" + op->getName().getStringRef().str() + "' (op #" +
             (it == op_index_.end() ? std::string("?") : std::to_string(it->second)) +
             " of @forward, " + where + "): " + message + "\n";
}

void Lowering::declare(llvm::StringRef name, mlir::FunctionType type) {
  if (module_.lookupSymbol(name)) return;
  mlir::OpBuilder::InsertionGuard guard(builder_);
  builder_.setInsertionPointToStart(module_.getBody());
  auto fn = builder_.create<mlir::func::FuncOp>(loc_, name, type);
  fn.setPrivate();
}

mlir::Value Lowering::resolve(mlir::Value v) {
  while (auto arg = mlir::dyn_cast<mlir::BlockArgument>(v)) {
    mlir::Operation* parent = arg.getOwner()->getParentOp();
    if (!parent || !mlir::isa<ir::FusedOp>(parent)) break;
    v = parent->getOperand(arg.getArgNumber());
  }
  return v;
}

std::optional<mlir::TypedAttr> Lowering::splat_value(mlir::Value v) {
  mlir::Operation* def = v.getDefiningOp();
  if (!def || !mlir::isa<ir::ConstantOp>(def)) return std::nullopt;
  auto dense = mlir::dyn_cast<mlir::DenseElementsAttr>(def->getAttr("value"));
  if (!dense || !dense.isSplat()) return std::nullopt;
  return dense.getSplatValue<mlir::TypedAttr>();
}

// The op sets come from the op schema's traits (ir/ops.toml), generated at build time.
const llvm::StringSet<>& elementwise_ops() {
  static const llvm::StringSet<> names = {
#define KILN_ELEMENTWISE_OPS
#include "kiln/ir/KilnCodegenOps.inc"
  };
  return names;
}

bool Lowering::is_elementwise(mlir::Operation* op) {
  return op->hasTrait<ir::traits::ScalarLoop>() || mlir::isa<ir::FusedOp>(op);
}

bool Lowering::deferred(mlir::Value v) const {
  if (auto* def = v.getDefiningOp()) {
    mlir::Operation* parent = def->getParentOp();
    if (parent && mlir::isa<ir::FusedOp>(parent)) return true;
  }
  return deferred_.lookup(v);
}

mlir::Value Lowering::stack_array(int64_t n) {
  mlir::OpBuilder::InsertionGuard guard(builder_);
  builder_.setInsertionPointToStart(&entry_.getBody().front());
  mlir::Value count = builder_.create<mlir::arith::ConstantIntOp>(loc_, n, 64);
  return builder_.create<LLVM::AllocaOp>(loc_, ptr_type(), ptr_type(), count, 8);
}

mlir::Value Lowering::byte_offset(mlir::Value base, int64_t offset) {
  // A GEP's constant index is 32-bit: an arena past 2 GiB takes its offset as a value.
  if (offset <= INT32_MAX)
    return builder_.create<LLVM::GEPOp>(loc_, ptr_type(), builder_.getI8Type(), base,
                                        llvm::ArrayRef<LLVM::GEPArg>{static_cast<int32_t>(offset)});
  mlir::Value at = builder_.create<mlir::arith::ConstantIntOp>(loc_, offset, 64);
  return builder_.create<LLVM::GEPOp>(loc_, ptr_type(), builder_.getI8Type(), base,
                                      mlir::ValueRange{at});
}

void Lowering::note_use(mlir::Value base, mlir::Operation* user) {
  auto it = owned_.find(base);
  if (it == owned_.end()) return;
  // A use inside a loop or branch keeps the buffer alive until that region op is done.
  mlir::Block* block = it->second.alloc->getBlock();
  while (user && user->getBlock() != block) user = user->getParentOp();
  if (!user) return;
  mlir::Operation*& last = it->second.last_use;
  if (!last || last->isBeforeInBlock(user)) last = user;
}

View Lowering::destination_shape(mlir::Value v) {
  auto type = mlir::cast<mlir::RankedTensorType>(v.getType());
  View d;
  d.sizes.assign(type.getShape().begin(), type.getShape().end());
  d.strides = contiguous_strides(d.sizes);
  d.elem = type.getElementType();
  return d;
}

View Lowering::destination(mlir::Value v) {
  View d = destination_shape(v);
  if (auto in_place = in_place_.find(v); in_place != in_place_.end()) return in_place->second;
  auto it = result_buffers_.find(v);
  if (it != result_buffers_.end() && it->second) {
    d.base = it->second;
    it->second = nullptr;  // later ops producing the same value (none in SSA) never reuse it
    written_results_.insert(v);
    return d;
  }
  const int64_t nbytes = numel(d.sizes) * element_bytes(d.elem);
  declare("kiln_abi_alloc", builder_.getFunctionType({builder_.getI64Type()}, {ptr_type()}));
  auto size = builder_.create<mlir::arith::ConstantIntOp>(loc_, nbytes, 64);
  auto call = builder_.create<mlir::func::CallOp>(
      loc_, "kiln_abi_alloc", mlir::TypeRange{ptr_type()}, mlir::ValueRange{size});
  d.base = call.getResult(0);
  owned_[d.base] = Owned{nbytes, call, call};
  return d;
}

View& Lowering::view(mlir::Value v) {
  auto it = views_.find(v);
  if (it != views_.end()) return it->second;
  // A deferred value or a splat constant that a runtime call needs in memory.
  View d = destination(v);
  emit_kernel(v, d);
  return views_[v] = d;
}

View Lowering::constant_view(mlir::Operation* op) {
  auto type = mlir::cast<mlir::RankedTensorType>(op->getResult(0).getType());
  View v;
  v.sizes.assign(type.getShape().begin(), type.getShape().end());
  v.strides = contiguous_strides(v.sizes);
  v.elem = type.getElementType();
  const int64_t n = numel(v.sizes);
  const int64_t nbytes = n * element_bytes(v.elem);
  if (n == 0) {
    v.base = builder_.create<LLVM::ZeroOp>(loc_, ptr_type());
    return v;
  }
  // The global holds raw bytes (an i8 array): the code generator writes those in one piece,
  // where a float array of millions of elements is emitted element by element (~70 ns each).
  llvm::ArrayRef<char> raw;
  std::vector<char> bools;
  mlir::Attribute attr = op->getAttr("value");
  if (auto dense = mlir::dyn_cast<mlir::DenseElementsAttr>(attr)) {
    if (v.elem.isInteger(1)) {
      for (bool b : dense.getValues<bool>()) bools.push_back(b ? 1 : 0);
      raw = bools;
    } else {
      raw = dense.getRawData();
    }
  } else if (auto res = mlir::dyn_cast<mlir::DenseResourceElementsAttr>(attr)) {
    mlir::AsmResourceBlob* blob = res.getRawHandle().getBlob();
    if (!blob) {
      error(op, "the constant's resource blob is not loaded");
      return v;
    }
    raw = blob->getData();
  } else {
    error(op, "unsupported constant attribute");
    return v;
  }
  if (static_cast<int64_t>(raw.size()) != nbytes) {
    error(op, "the constant holds " + std::to_string(raw.size()) + " bytes, expected " +
                  std::to_string(nbytes));
    return v;
  }
  auto bytes_type = mlir::RankedTensorType::get({nbytes}, builder_.getI8Type());
  mlir::Attribute value = mlir::DenseElementsAttr::getFromRawBuffer(bytes_type, raw);
  const std::string name = "kiln_const_" + std::to_string(num_constants_++);
  {
    mlir::OpBuilder::InsertionGuard guard(builder_);
    builder_.setInsertionPointToStart(module_.getBody());
    builder_.create<LLVM::GlobalOp>(loc_, LLVM::LLVMArrayType::get(builder_.getI8Type(), nbytes),
                                    /*isConstant=*/true, LLVM::Linkage::Internal, name, value,
                                    /*alignment=*/64);
  }
  v.base = builder_.create<LLVM::AddressOfOp>(loc_, ptr_type(), name);
  return v;
}

const llvm::StringSet<>& view_ops() {
  static const llvm::StringSet<> views = {
#define KILN_VIEW_OPS
#include "kiln/ir/KilnCodegenOps.inc"
  };
  return views;
}

bool Lowering::lower_view_op(mlir::Operation* op) {
  const llvm::StringRef name = op->getName().getStringRef();
  if (!view_ops().contains(name)) return false;
  mlir::Value in = op->getOperand(0), out = op->getResult(0);
  auto out_type = mlir::cast<mlir::RankedTensorType>(out.getType());
  llvm::SmallVector<int64_t> out_sizes(out_type.getShape());
  View src = view(in);
  const int64_t rank = static_cast<int64_t>(src.sizes.size());
  auto i64 = [&](const char* attr) {
    return mlir::cast<mlir::IntegerAttr>(op->getAttr(attr)).getInt();
  };
  auto wrap = [&](int64_t d, int64_t r) { return d < 0 ? d + r : d; };
  View v = src;
  if (mlir::isa<ir::CloneOp>(op)) {
    // Values are immutable: a clone is the same buffer.
  } else if (mlir::isa<ir::ViewOp>(op) || mlir::isa<ir::ReshapeOp>(op) ||
             mlir::isa<ir::AsStridedOp>(op)) {
    if (!src.contiguous()) {
      // Reshaping strided data: copy it dense first.
      View dense = destination(in);
      emit_kernel(in, dense);
      src = dense;
    }
    v = src;
    v.sizes = out_sizes;
    if (mlir::isa<ir::AsStridedOp>(op)) {
      auto strides = mlir::cast<mlir::DenseI64ArrayAttr>(op->getAttr("strides")).asArrayRef();
      v.strides.assign(strides.begin(), strides.end());
      v.offset = src.offset + i64("offset");
    } else {
      v.strides = contiguous_strides(out_sizes);
    }
  } else if (mlir::isa<ir::TransposeOp>(op)) {
    const int64_t a = wrap(i64("dim0"), rank), b = wrap(i64("dim1"), rank);
    std::swap(v.sizes[a], v.sizes[b]);
    std::swap(v.strides[a], v.strides[b]);
  } else if (mlir::isa<ir::PermuteOp>(op)) {
    auto dims = mlir::cast<mlir::DenseI64ArrayAttr>(op->getAttr("dims")).asArrayRef();
    for (int64_t d = 0; d < rank; ++d) {
      const int64_t s = wrap(dims[d], rank);
      v.sizes[d] = src.sizes[s];
      v.strides[d] = src.strides[s];
    }
  } else if (mlir::isa<ir::SliceOp>(op)) {
    const int64_t d = wrap(i64("dim"), rank);
    int64_t start = i64("start");
    if (start < 0) start += src.sizes[d];
    start = std::clamp<int64_t>(start, 0, src.sizes[d]);
    v.offset += start * src.strides[d];
    v.strides[d] *= i64("step");
    v.sizes[d] = out_sizes[d];
  } else if (mlir::isa<ir::SelectOp>(op)) {
    const int64_t d = wrap(i64("dim"), rank);
    int64_t index = i64("index");
    if (index < 0) index += src.sizes[d];
    v.offset += index * src.strides[d];
    v.sizes.erase(v.sizes.begin() + d);
    v.strides.erase(v.strides.begin() + d);
  } else if (mlir::isa<ir::ExpandOp>(op)) {
    const int64_t out_rank = static_cast<int64_t>(out_sizes.size());
    v.sizes = out_sizes;
    v.strides.assign(out_rank, 0);
    for (int64_t d = 0; d < rank; ++d) {
      const int64_t o = d + out_rank - rank;
      v.strides[o] = src.sizes[d] == out_sizes[o] ? src.strides[d] : 0;
    }
  }
  if (llvm::ArrayRef<int64_t>(v.sizes) != llvm::ArrayRef<int64_t>(out_sizes)) {
    error(op, "view geometry disagrees with the result type");
    return true;
  }
  views_[out] = v;
  return true;
}

bool Lowering::lower_op(mlir::Operation* op) {
  if (mlir::isa<ir::NoneOp>(op)) return true;
  if (mlir::isa<ir::ConstantOp>(op)) {
    if (!splat_value(op->getResult(0))) views_[op->getResult(0)] = constant_view(op);
    return true;
  }
  if (is_elementwise(op)) {
    // A block epilogue's results, computed by its product's call.
    if (llvm::all_of(op->getResults(), [&](mlir::Value r) { return views_.count(r) != 0; }))
      return true;
    // A block prologue, computed by the linear's call after it (or, where that cannot be, by a
    // kernel when the call needs it).
    if (is_block_prologue(op)) {
      deferred_[op->getResult(0)] = true;
      return true;
    }
    llvm::SmallVector<mlir::Value> stored;
    for (mlir::Value r : op->getResults()) {
      const int64_t n = numel(mlir::cast<mlir::RankedTensorType>(r.getType()).getShape());
      if (options_.fuse_elementwise && r.hasOneUse()) {
        mlir::Operation* user = *r.getUsers().begin();
        // A row or column kernel's loops run over its input (a reduction's result is smaller).
        const bool row = has_row_kernel(user) || has_column_kernel(user);
        auto span = [&] { return row ? user->getOperand(0) : user->getResult(0); };
        if ((is_elementwise(user) || row) && user->getNumResults() > 0 &&
            user->getBlock() == op->getBlock() &&
            numel(mlir::cast<mlir::RankedTensorType>(span().getType()).getShape()) == n) {
          deferred_[r] = true;
          continue;
        }
      }
      stored.push_back(r);
    }
    llvm::SmallVector<View> dests;
    for (mlir::Value r : stored) dests.push_back(destination(r));
    if (!stored.empty()) emit_kernel(stored, dests);
    for (size_t k = 0; k < stored.size(); ++k) views_[stored[k]] = dests[k];
    return true;
  }
  if (has_row_kernel(op)) {
    emit_row_kernel(op);
    return true;
  }
  if (emit_column_kernel(op)) return true;
  if (lower_view_op(op)) return true;
  if (lower_control_flow(op)) return true;
  if (emit_product_with_blocks(op)) return true;
  if (emit_abi_call(op)) return true;
  error(op, "no lowering for this op (neither generated loops nor a runtime kernel)");
  return false;
}

namespace {
// A buffer to place in its block's arena: alive from op `start` to op `end` (positions in the
// block), `bytes` rounded to 64.
struct Placed {
  mlir::Value base;
  mlir::Operation* alloc;
  int64_t start, end, bytes, offset = 0;
};

// Greedy by size, first fit: each buffer at the lowest offset clear of every placed buffer alive
// at the same time. Returns the arena's size.
int64_t place(std::vector<Placed>& items) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return items[a].bytes > items[b].bytes; });
  int64_t total = 0;
  std::vector<size_t> placed;
  for (size_t i : order) {
    Placed& it = items[i];
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (size_t j : placed) {
      const Placed& o = items[j];
      if (o.start <= it.end && it.start <= o.end) busy.emplace_back(o.offset, o.offset + o.bytes);
    }
    std::sort(busy.begin(), busy.end());
    int64_t offset = 0;
    for (const auto& [lo, hi] : busy) {
      if (offset + it.bytes <= lo) break;
      offset = std::max(offset, hi);
    }
    it.offset = offset;
    total = std::max(total, offset + it.bytes);
    placed.push_back(i);
  }
  return total;
}

int nesting_depth(mlir::Block* block) {
  int depth = 0;
  for (mlir::Operation* op = block->getParentOp(); op; op = op->getBlock()->getParentOp()) {
    if (mlir::isa<mlir::func::FuncOp>(op)) break;
    ++depth;
  }
  return depth;
}
}  // namespace

// The buffers made in the entry block share one arena laid out now, at compile time, from their
// lifetimes in the lowered code (allocation to last use, in op order; greedy by size, first fit,
// 64-byte aligned): one kiln_abi_alloc per call, and memory that stays hot from op to op as in the
// artifact executor's planned arena. (The IR's memory plan does not fit here: codegen computes
// single-use elementwise values inside their consumers' loops, later than the plan assumes.)
// A loop's or branch's body is laid out the same way, innermost first: its arena is one more
// buffer of the enclosing block, alive across the region op, so a loop allocates nothing per
// iteration (every buffer made in a body dies in it: carried and yielded values are copied to
// buffers made before the region).
void Lowering::emit_frees() {
  declare("kiln_abi_free", builder_.getFunctionType({ptr_type(), builder_.getI64Type()}, {}));
  mlir::Block& block = entry_.getBody().front();
  llvm::MapVector<mlir::Block*, std::vector<mlir::Value>> by_block;
  for (auto& [base, owned] : owned_) by_block[owned.alloc->getBlock()].push_back(base);
  auto items_of = [&](mlir::Block* b) {
    llvm::DenseMap<mlir::Operation*, int64_t> pos;
    int64_t index = 0;
    for (mlir::Operation& op : *b) pos[&op] = index++;
    std::vector<Placed> items;
    for (mlir::Value base : by_block.lookup(b)) {
      const Owned& owned = owned_.find(base)->second;
      const int64_t start = pos.lookup(owned.alloc);
      const int64_t end = owned.last_use ? std::max(start, pos.lookup(owned.last_use)) : start;
      items.push_back({base, owned.alloc, start, end, (owned.nbytes + 63) / 64 * 64});
    }
    return std::make_pair(std::move(items), std::move(pos));
  };
  auto replace_with_arena = [&](std::vector<Placed>& items, mlir::Value arena, bool at_alloc) {
    for (Placed& it : items) {
      if (at_alloc) builder_.setInsertionPoint(it.alloc);
      mlir::Value at = byte_offset(arena, it.offset);
      it.base.replaceAllUsesWith(at);
      mlir::Operation* size = it.alloc->getOperand(0).getDefiningOp();
      it.alloc->erase();
      if (size && size->use_empty()) size->erase();
    }
  };

  // The deepest body not yet laid out, until only the entry block is left (a body's arena may be
  // the first buffer of the body around it).
  llvm::DenseSet<mlir::Block*> done;
  auto next_body = [&]() -> mlir::Block* {
    mlir::Block* deepest = nullptr;
    for (auto& [b, bases] : by_block)
      if (b != &block && !done.count(b) && (!deepest || nesting_depth(b) > nesting_depth(deepest)))
        deepest = b;
    return deepest;
  };
  while (mlir::Block* body = next_body()) {
    done.insert(body);
    std::vector<Placed> items = items_of(body).first;
    const int64_t total = place(items);
    mlir::Operation* region_op = body->getParentOp();
    builder_.setInsertionPoint(region_op);
    auto size = builder_.create<mlir::arith::ConstantIntOp>(loc_, total, 64);
    auto call = builder_.create<mlir::func::CallOp>(
        loc_, "kiln_abi_alloc", mlir::TypeRange{ptr_type()}, mlir::ValueRange{size});
    const mlir::Value arena = call.getResult(0);
    owned_[arena] = Owned{total, call, region_op};
    by_block[region_op->getBlock()].push_back(arena);
    replace_with_arena(items, arena, /*at_alloc=*/true);
  }

  auto [items, pos] = items_of(&block);
  if (items.empty()) return;
  const int64_t total = place(items);
  builder_.setInsertionPointToStart(&block);
  auto size = builder_.create<mlir::arith::ConstantIntOp>(loc_, total, 64);
  mlir::Value arena =
      builder_
          .create<mlir::func::CallOp>(loc_, "kiln_abi_alloc", mlir::TypeRange{ptr_type()},
                                      mlir::ValueRange{size})
          .getResult(0);
  replace_with_arena(items, arena, /*at_alloc=*/false);
  // Each kernel call in the entry block borrows the largest stretch of the arena that no buffer
  // alive across it holds, for its scratch: memory the previous ops just touched, where the
  // allocator's blocks would be cold (as the executor lends its planned arena's gaps).
  declare("kiln_abi_lease_begin",
          builder_.getFunctionType({ptr_type(), builder_.getI64Type()}, {}));
  declare("kiln_abi_lease_end", builder_.getFunctionType({}, {}));
  constexpr int64_t kMinLease = 4096;
  for (mlir::Operation* call : kernel_calls_) {
    if (call->getBlock() != &block) continue;
    const int64_t at = pos.lookup(call);
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (const Placed& it : items)
      if (it.start <= at && at <= it.end) busy.emplace_back(it.offset, it.offset + it.bytes);
    std::sort(busy.begin(), busy.end());
    int64_t free_from = 0, best_offset = 0, best_bytes = 0;
    auto consider = [&](int64_t end) {
      if (end - free_from > best_bytes) best_offset = free_from, best_bytes = end - free_from;
    };
    for (const auto& [lo, hi] : busy) {
      consider(lo);
      free_from = std::max(free_from, hi);
    }
    consider(total);
    if (best_bytes < kMinLease) continue;
    builder_.setInsertionPoint(call);
    mlir::Value base = byte_offset(arena, best_offset);
    mlir::Value bytes = builder_.create<mlir::arith::ConstantIntOp>(loc_, best_bytes, 64);
    builder_.create<mlir::func::CallOp>(loc_, "kiln_abi_lease_begin", mlir::TypeRange{},
                                        mlir::ValueRange{base, bytes});
    builder_.setInsertionPointAfter(call);
    builder_.create<mlir::func::CallOp>(loc_, "kiln_abi_lease_end", mlir::TypeRange{},
                                        mlir::ValueRange{});
  }
  builder_.setInsertionPoint(block.getTerminator());
  auto bytes = builder_.create<mlir::arith::ConstantIntOp>(loc_, total, 64);
  builder_.create<mlir::func::CallOp>(loc_, "kiln_abi_free", mlir::TypeRange{},
                                      mlir::ValueRange{arena, bytes});
}

// `<entry>_release()`: frees what the *_prepared call sites prepared into their slots (the JIT
// calls it before unloading the code; an AOT binary keeps its code for the process's life).
void Lowering::emit_release() {
  mlir::OpBuilder::InsertionGuard guard(builder_);
  builder_.setInsertionPointToEnd(module_.getBody());
  auto fn = builder_.create<mlir::func::FuncOp>(loc_, options_.entry_name + "_release",
                                                builder_.getFunctionType({}, {}));
  builder_.setInsertionPointToStart(fn.addEntryBlock());
  if (!prepared_slots_.empty())
    declare("kiln_abi_release_prepared", builder_.getFunctionType({ptr_type()}, {}));
  for (const std::string& slot : prepared_slots_) {
    mlir::Value at = builder_.create<LLVM::AddressOfOp>(loc_, ptr_type(), slot);
    builder_.create<mlir::func::CallOp>(loc_, "kiln_abi_release_prepared", mlir::TypeRange{},
                                        mlir::ValueRange{at});
  }
  builder_.create<mlir::func::ReturnOp>(loc_);
}

bool Lowering::run(std::string* error_out, EntrySignature* signature) {
  mlir::MLIRContext* ctx = module_.getContext();
  ctx->loadDialect<LLVM::LLVMDialect, mlir::scf::SCFDialect, mlir::arith::ArithDialect,
                   mlir::math::MathDialect, mlir::func::FuncDialect>();
  if (options_.vector_bits > 0) load_vector_dialects(ctx);
  forward_ = module_.lookupSymbol<mlir::func::FuncOp>("forward");
  if (!forward_ || forward_.getBody().empty()) {
    if (error_out) *error_out = "the module has no func.func @forward with a body";
    return false;
  }
  mlir::Block& body = forward_.getBody().front();
  auto ret = mlir::dyn_cast<mlir::func::ReturnOp>(body.getTerminator());
  if (!ret) {
    if (error_out) *error_out = "@forward does not end in func.return";
    return false;
  }
  int index = 0;
  forward_.walk<mlir::WalkOrder::PreOrder>([&](mlir::Operation* op) {
    if (op != forward_.getOperation()) op_index_[op] = index++;
  });
  check_module(body);
  if (!errors_.empty()) {
    if (error_out) *error_out = errors_;
    return false;
  }
  EntrySignature sig;
  auto spec = [&](mlir::Type t, const char* what, size_t i) -> std::optional<BufferSpec> {
    auto tensor = mlir::dyn_cast<mlir::RankedTensorType>(t);
    if (!tensor || !tensor.hasStaticShape() || dtype_code(tensor.getElementType()) < 0) {
      errors_ += std::string("cannot compile @forward: ") + what + " " + std::to_string(i) +
                 " is not a statically shaped tensor of a supported dtype\n";
      return std::nullopt;
    }
    BufferSpec s;
    s.dtype = dtype_code(tensor.getElementType());
    s.sizes.assign(tensor.getShape().begin(), tensor.getShape().end());
    s.nbytes = numel(s.sizes) * element_bytes(tensor.getElementType());
    return s;
  };
  for (size_t i = 0; i < body.getNumArguments(); ++i) {
    if (auto s = spec(body.getArgument(i).getType(), "argument", i)) sig.args.push_back(*s);
  }
  for (size_t i = 0; i < ret.getNumOperands(); ++i) {
    if (auto s = spec(ret.getOperand(i).getType(), "result", i)) sig.results.push_back(*s);
  }
  if (errors_.empty() && (options_.block_epilogue_input >= 0 || options_.block_prologue)) {
    emit_block_entry(body, ret);
  } else if (errors_.empty()) {
    builder_.setInsertionPointToEnd(module_.getBody());
    entry_ = builder_.create<mlir::func::FuncOp>(loc_, options_.entry_name,
                                                 builder_.getFunctionType({ptr_type()}, {}));
    mlir::Block* entry_block = entry_.addEntryBlock();
    builder_.setInsertionPointToStart(entry_block);
    mlir::Value buffers = entry_block->getArgument(0);
    auto load_ptr = [&](int64_t i) -> mlir::Value {
      auto gep = builder_.create<LLVM::GEPOp>(loc_, ptr_type(), ptr_type(), buffers,
                                              llvm::ArrayRef<LLVM::GEPArg>{i});
      return builder_.create<LLVM::LoadOp>(loc_, ptr_type(), gep);
    };
    for (size_t i = 0; i < body.getNumArguments(); ++i) {
      auto type = mlir::cast<mlir::RankedTensorType>(body.getArgument(i).getType());
      View v;
      v.base = load_ptr(static_cast<int64_t>(i));
      v.sizes.assign(type.getShape().begin(), type.getShape().end());
      v.strides = contiguous_strides(v.sizes);
      v.elem = type.getElementType();
      views_[body.getArgument(i)] = v;
    }
    llvm::SmallVector<mlir::Value> result_ptrs;
    for (size_t j = 0; j < ret.getNumOperands(); ++j) {
      result_ptrs.push_back(load_ptr(static_cast<int64_t>(body.getNumArguments() + j)));
      mlir::Value v = ret.getOperand(j);
      // The op computing a returned value writes straight into the caller's buffer (the first
      // result slot that returns it; arguments and views are copied below).
      if (!result_buffers_.count(v)) result_buffers_[v] = result_ptrs.back();
    }
    lower_block(body);
    if (errors_.empty()) {
      for (size_t j = 0; j < ret.getNumOperands(); ++j) {
        mlir::Value v = ret.getOperand(j);
        if (written_results_.count(v) && result_buffers_.lookup(v) == nullptr &&
            first_result_slot(ret, v) == j) {
          continue;
        }
        View d;
        d.base = result_ptrs[j];
        auto type = mlir::cast<mlir::RankedTensorType>(v.getType());
        d.sizes.assign(type.getShape().begin(), type.getShape().end());
        d.strides = contiguous_strides(d.sizes);
        d.elem = type.getElementType();
        emit_kernel(v, d);
      }
      builder_.create<mlir::func::ReturnOp>(loc_);
      emit_frees();
      emit_release();
    }
  }
  if (!errors_.empty()) {
    if (error_out) *error_out = errors_;
    if (entry_) entry_.erase();
    return false;
  }
  forward_.erase();
  if (signature) *signature = std::move(sig);
  return true;
}

size_t Lowering::first_result_slot(mlir::func::ReturnOp ret, mlir::Value v) {
  for (size_t j = 0; j < ret.getNumOperands(); ++j) {
    if (ret.getOperand(j) == v) return j;
  }
  return ret.getNumOperands();
}

}  // namespace kiln::codegen::detail
