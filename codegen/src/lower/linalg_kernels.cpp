// The first stage of the vector pipeline (DESIGN.md §5): an elementwise loop nest of
// kernel_emitter.h as one linalg.generic on tensors. The kernel function keeps its signature
// (void(void** ctx, i64 begin, i64 end), split over the thread pool along the outermost dim);
// inside it each buffer becomes a strided memref of the kernel's (coalesced) dims, restricted to
// [begin, end) of the outermost one, read as a tensor; the generic's body is the same per-element
// code the scalar loops compute (KernelEmitter::eval, the leaves being the body's arguments);
// each result is materialized in its destination. vectorize.cpp tiles, vectorizes and bufferizes
// the function.

#include "kernel_emitter.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/AffineMap.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "vectorize.h"

namespace kiln::codegen::detail {
namespace LLVM = mlir::LLVM;
namespace arith = mlir::arith;

bool KernelEmitter::vector_kernel() const {
  if (row_ != Row::None || low_.options().vector_bits <= 0) return false;
  // No element (a zero-size dim: nothing to tile) or a single one (the coalesced dims are one
  // dim of size 1 at stride 0): scalar code.
  if (numel(sizes_) == 0) return false;
  for (int64_t s : out_strides_)
    if (s == 0) return false;
  // Vectors run along the innermost dim: every operand must be contiguous (or broadcast) there,
  // or contiguous along another dim, read by transposed tiles (transposed_dim). Any other
  // strided operand would be read lane by lane into a register, several times the scalar loops'
  // time (bench/README.md, bench_codegen HeadCopies): scalar loops.
  if (out_strides_.back() != 1) return false;
  const int transposed = transposed_dim();
  for (const Leaf& leaf : leaves_)
    if (leaf.strides.back() != 0 && leaf.strides.back() != 1 && transposed < 0) return false;
  return true;
}

// A leaf read across the innermost dim (stride > 1 there) is contiguous along another dim t;
// tiles of t x innermost then read it row by row along t and transpose in registers. Taken when
// every such leaf has the same t and both dims span at least one register's lanes (the outermost
// dim, split over the threads, may be t: its shares' remainders are scalar loops).
int KernelEmitter::transposed_dim() const {
  const int64_t rank = static_cast<int64_t>(sizes_.size());
  int t = -1;
  for (const Leaf& leaf : leaves_) {
    const int64_t inner = leaf.strides.back();
    if (inner == 0 || inner == 1) continue;
    int found = -1;
    for (int64_t d = 0; d + 1 < rank; ++d)
      if (leaf.strides[d] == 1) found = static_cast<int>(d);
    if (found < 0 || (t >= 0 && found != t)) return -1;
    t = found;
  }
  if (t < 0) return -1;
  // Tiles of 32- and 64-bit elements only: a tile of bytes (64 x 64 on 512-bit vectors) is one
  // shuffle of thousands of lanes, which LLVM's instruction selection handles very slowly
  // (bench/README.md, Zen 4, the transposing kernels).
  if (element_bits() < 32) return -1;
  const int64_t lanes = transpose_tile();
  if ((t > 0 && sizes_[t] < lanes) || sizes_.back() < lanes) return -1;
  return t;
}

// A transposed tile's side: one register's lanes of the widest element the kernel touches.
int64_t KernelEmitter::transpose_tile() const {
  return std::max<int64_t>(1, low_.options().vector_bits / element_bits());
}

unsigned KernelEmitter::element_bits() const {
  unsigned bits = 8;
  auto consider = [&](Type t) { bits = std::max(bits, memory_type(t).getIntOrFloatBitWidth()); };
  consider(dest_.elem);
  for (const auto& [root, dest] : more_) consider(dest.elem);
  for (const Leaf& leaf : leaves_) consider(leaf.view.elem);
  return bits;
}

void KernelEmitter::build_vector_function() {
  mlir::Block* block = begin_function(/*vector=*/true);
  mlir::MLIRContext* ctx_mlir = low_.module().getContext();
  Type i64 = b_.getI64Type();
  Value ctx = block->getArgument(0), begin = block->getArgument(1), end = block->getArgument(2);
  auto load_ptr = [&](int64_t slot) { return context_pointer(ctx, slot); };
  auto i64_const = [&](int64_t v) -> Value {
    return b_.create<LLVM::ConstantOp>(loc_, i64, b_.getI64IntegerAttr(v));
  };
  const int64_t rank = static_cast<int64_t>(sizes_.size());
  Value count = b_.create<LLVM::SubOp>(loc_, end, begin);
  Value count_index = b_.create<arith::IndexCastOp>(loc_, b_.getIndexType(), count);

  // A buffer as a memref over the dims it steps through (a broadcast dim, stride 0, is projected
  // out of its indexing map), starting at `begin` of the outermost dim when it steps through it.
  // A leaf read across the innermost dim lists the dim it is contiguous along (transposed) last:
  // its indexing map permutes the two, so that the tile's reads are rows along that dim.
  const int transposed = transposed_dim();
  auto memref_of = [&](Value base, int64_t offset, llvm::ArrayRef<int64_t> strides, Type elem,
                       mlir::AffineMap* map) -> Value {
    llvm::SmallVector<int64_t> order;
    for (int64_t d = 0; d < rank; ++d) order.push_back(d);
    if (transposed >= 0 && strides.back() != 0 && strides.back() != 1) {
      order.erase(order.begin() + transposed);
      order.push_back(transposed);
    }
    llvm::SmallVector<int64_t> shape, kept_strides;
    llvm::SmallVector<mlir::AffineExpr> exprs;
    for (int64_t d : order) {
      if (strides[d] == 0) continue;
      shape.push_back(d == 0 ? mlir::ShapedType::kDynamic : sizes_[d]);
      kept_strides.push_back(strides[d]);
      exprs.push_back(b_.getAffineDimExpr(d));
    }
    *map = mlir::AffineMap::get(rank, 0, exprs, ctx_mlir);
    const bool spans_outer = strides[0] != 0;
    Value off = i64_const(offset);
    if (spans_outer) {
      off = b_.create<LLVM::AddOp>(loc_, off,
                                   b_.create<LLVM::MulOp>(loc_, begin, i64_const(strides[0])));
    }
    return strided_memref(base, off, spans_outer ? std::nullopt : std::optional<int64_t>(offset),
                          shape, kept_strides, count, elem);
  };

  // A result written over a leaf it reads (an in-place update: the same buffer and layout) takes
  // that leaf's tensor as its init, read through the generic's output argument, so that
  // bufferization updates the buffer in place instead of computing into a copy.
  const size_t num_dests = more_.size() + 1;
  auto dest_view = [&](size_t k) -> const View& { return k == 0 ? dest_ : more_[k - 1].second; };
  llvm::SmallVector<int> updated_leaf(num_dests, -1);
  llvm::SmallVector<bool> leaf_is_init(leaves_.size(), false);
  for (size_t d = 0; d < num_dests; ++d) {
    const View& dest = dest_view(d);
    for (size_t k = 0; k < leaves_.size(); ++k) {
      const Leaf& leaf = leaves_[k];
      if (!leaf_is_init[k] && leaf.view.base == dest.base && leaf.view.offset == dest.offset &&
          leaf.strides == out_strides_ && leaf.view.elem == dest.elem) {
        updated_leaf[d] = static_cast<int>(k);
        leaf_is_init[k] = true;
        break;
      }
    }
  }

  // Inputs: the other leaves, read-only tensors of their buffers.
  llvm::SmallVector<Value> ins;
  llvm::SmallVector<size_t> input_leaves;
  llvm::SmallVector<mlir::AffineMap> maps;
  const size_t first_leaf = num_dests;
  for (size_t k = 0; k < leaves_.size(); ++k) {
    if (leaf_is_init[k]) continue;
    Leaf& leaf = leaves_[k];
    mlir::AffineMap map;
    Value m = memref_of(load_ptr(static_cast<int64_t>(k + first_leaf)), leaf.view.offset,
                        leaf.strides, leaf.view.elem, &map);
    ins.push_back(b_.create<mlir::bufferization::ToTensorOp>(loc_, m, /*restrict=*/true,
                                                             /*writable=*/false));
    input_leaves.push_back(k);
    maps.push_back(map);
  }
  // Outputs: empty tensors (or the updated leaf's), materialized in the destinations
  // (bufferization writes the generic's results there directly once the empty tensors are
  // eliminated).
  llvm::SmallVector<Value> dest_memrefs, outs;
  llvm::SmallVector<Type> out_types;
  for (size_t d = 0; d < num_dests; ++d) {
    const View& dest = dest_view(d);
    mlir::AffineMap map;
    Value m =
        memref_of(load_ptr(static_cast<int64_t>(d)), dest.offset, out_strides_, dest.elem, &map);
    dest_memrefs.push_back(m);
    Value init;
    if (updated_leaf[d] >= 0) {
      init = b_.create<mlir::bufferization::ToTensorOp>(loc_, m, /*restrict=*/true,
                                                        /*writable=*/true);
    } else {
      auto shape = mlir::cast<mlir::MemRefType>(m.getType()).getShape();
      init = b_.create<mlir::tensor::EmptyOp>(loc_, shape, memory_type(dest.elem),
                                              mlir::ValueRange{count_index});
    }
    outs.push_back(init);
    out_types.push_back(init.getType());
    maps.push_back(map);
  }

  llvm::SmallVector<mlir::utils::IteratorType> iterators(rank, mlir::utils::IteratorType::parallel);
  auto generic = b_.create<mlir::linalg::GenericOp>(
      loc_, out_types, ins, outs, maps, iterators,
      [&](mlir::OpBuilder& nested, mlir::Location, mlir::ValueRange args) {
        mlir::OpBuilder::InsertionGuard guard(b_);
        b_.setInsertionPoint(nested.getInsertionBlock(), nested.getInsertionPoint());
        for (size_t i = 0; i < input_leaves.size(); ++i) bind_leaf(input_leaves[i], args[i]);
        for (size_t d = 0; d < num_dests; ++d)
          if (updated_leaf[d] >= 0) bind_leaf(updated_leaf[d], args[ins.size() + d]);
        llvm::SmallVector<Value> results;
        auto result = [&](Value root, Type elem) {
          Value v = convert(eval(root), elem);
          if (elem.isInteger(1)) v = b_.create<arith::ExtUIOp>(loc_, memory_type(elem), v);
          results.push_back(v);
        };
        result(root_, dest_.elem);
        for (const auto& [root, dest] : more_) result(root, dest.elem);
        b_.create<mlir::linalg::YieldOp>(loc_, results);
      });
  if (transposed >= 0) generic->setAttr(kTransposedDimAttr, b_.getI64IntegerAttr(transposed));
  // (An updated buffer is also its init's: not `restrict`, which promises one tensor per buffer.)
  for (size_t d = 0; d < num_dests; ++d) {
    b_.create<mlir::bufferization::MaterializeInDestinationOp>(
        loc_, mlir::Type(), generic.getResult(d), dest_memrefs[d],
        /*restrict=*/updated_leaf[d] < 0, /*writable=*/true);
  }
  b_.create<mlir::func::ReturnOp>(loc_);
}

void KernelEmitter::bind_leaf(size_t k, Value element) {
  if (leaves_[k].view.elem.isInteger(1))
    element = b_.create<arith::TruncIOp>(loc_, leaves_[k].view.elem, element);
  leaf_args_[leaves_[k].value] = element;
}

Value KernelEmitter::strided_memref(Value base, Value offset, std::optional<int64_t> static_offset,
                                    llvm::ArrayRef<int64_t> shape, llvm::ArrayRef<int64_t> strides,
                                    Value dynamic_size, Type elem) {
  mlir::MLIRContext* ctx = low_.module().getContext();
  Type ptr = low_.ptr_type(), i64 = b_.getI64Type();
  auto i64_const = [&](int64_t v) -> Value {
    return b_.create<LLVM::ConstantOp>(loc_, i64, b_.getI64IntegerAttr(v));
  };
  auto layout = mlir::StridedLayoutAttr::get(
      ctx, static_offset ? *static_offset : mlir::ShapedType::kDynamic, strides);
  auto type = mlir::MemRefType::get(shape, memory_type(elem), layout);
  const size_t rank = shape.size();
  llvm::SmallVector<Type> fields = {ptr, ptr, i64};
  if (rank > 0) {
    auto array = LLVM::LLVMArrayType::get(i64, rank);
    fields.push_back(array);
    fields.push_back(array);
  }
  Type desc_type = LLVM::LLVMStructType::getLiteral(ctx, fields);
  Value desc = b_.create<LLVM::UndefOp>(loc_, desc_type);
  desc = b_.create<LLVM::InsertValueOp>(loc_, desc, base, llvm::ArrayRef<int64_t>{0});
  desc = b_.create<LLVM::InsertValueOp>(loc_, desc, base, llvm::ArrayRef<int64_t>{1});
  desc = b_.create<LLVM::InsertValueOp>(loc_, desc, offset, llvm::ArrayRef<int64_t>{2});
  for (size_t k = 0; k < rank; ++k) {
    const int64_t pos = static_cast<int64_t>(k);
    Value size = shape[k] == mlir::ShapedType::kDynamic ? dynamic_size : i64_const(shape[k]);
    desc = b_.create<LLVM::InsertValueOp>(loc_, desc, size, llvm::ArrayRef<int64_t>{3, pos});
    desc = b_.create<LLVM::InsertValueOp>(loc_, desc, i64_const(strides[k]),
                                          llvm::ArrayRef<int64_t>{4, pos});
  }
  return b_.create<mlir::UnrealizedConversionCastOp>(loc_, type, desc).getResult(0);
}

}  // namespace kiln::codegen::detail
