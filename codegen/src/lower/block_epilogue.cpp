// Block epilogues: the elementwise chain after a conv2d / linear / matmul (a kiln.fused the pass
// --kiln-fuse-block-epilogues marked) emitted as a function the runtime's kernel calls on each
// block of the output its GEMM finishes (kernels::BlockEpilogue), instead of a kernel of its own
// that reads the whole output back from memory.
//
// The function sees a block as rows of contiguous runs of the output's flat (row-major) indices;
// each run is the kernel's loop body over its innermost coalesced dim, with the outer indices
// recovered from the run's first element by division (once per run, and again where a run
// crosses into the next row of that dim). With a vector width each run is a 1-D linalg.generic
// that vectorize.cpp tiles and vectorizes like an elementwise kernel (operands read along the
// run or broadcast over it); else a scalar loop that LLVM's loop vectorizer widens.

#include "kernel_emitter.h"
#include "kiln/ir/KilnDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "vectorize.h"

namespace kiln::codegen::detail {
namespace LLVM = mlir::LLVM;
namespace arith = mlir::arith;

std::optional<KernelEmitter::BlockFunction> KernelEmitter::emit_block_epilogue(Value product,
                                                                               bool in_place) {
  collect(root_, /*is_root=*/true);
  for (const Leaf& leaf : leaves_)
    if (leaf.value != product && leaf.view.base == dest_.base) return std::nullopt;
  coalesce();

  name_ = (product ? "kiln_epilogue_" : "kiln_prologue_") + std::to_string(low_.next_kernel_id());
  Type ptr = low_.ptr_type(), i64 = b_.getI64Type();
  b_.setInsertionPointToEnd(low_.module().getBody());
  auto fn = b_.create<mlir::func::FuncOp>(loc_, name_,
                                          b_.getFunctionType({ptr, ptr, i64, i64, i64, i64}, {}));
  fn.setPrivate();
  if (vector_block_epilogue())
    fn->setAttr(kVectorKernelAttr, b_.getI64IntegerAttr(low_.options().vector_bits));
  mlir::Block* block = fn.addEntryBlock();
  b_.setInsertionPointToStart(block);
  Value ctx = block->getArgument(0), c = block->getArgument(1), offset = block->getArgument(2);
  Value ldc = block->getArgument(3), rows = block->getArgument(4), cols = block->getArgument(5);
  // The product's (virtual) base: c - offset elements, so that its element i is at [i] (c may be
  // the kernel's own scratch copy of the output, never dest's buffer itself). In place, dest's
  // elements are the same; else dest's base comes last in ctx.
  Type mem = memory_type(dest_.elem);
  Value neg = b_.create<arith::SubIOp>(loc_, b_.create<arith::ConstantIntOp>(loc_, 0, 64), offset);
  Value product_ptr = b_.create<LLVM::GEPOp>(loc_, ptr, mem, c, mlir::ValueRange{neg});
  const int64_t dest_slot = static_cast<int64_t>(leaves_.size());
  out_ptr_ = in_place ? product_ptr : context_pointer(ctx, dest_slot);
  for (size_t k = 0; k < leaves_.size(); ++k)
    leaves_[k].ptr = leaves_[k].value == product ? product_ptr : context_pointer(ctx, k);

  Value zero = b_.create<arith::ConstantIntOp>(loc_, 0, 64);
  Value one = b_.create<arith::ConstantIntOp>(loc_, 1, 64);
  auto loop = b_.create<mlir::scf::ForOp>(loc_, zero, rows, one);
  b_.setInsertionPointToStart(loop.getBody());
  Value start = b_.create<arith::AddIOp>(
      loc_, offset, b_.create<arith::MulIOp>(loc_, loop.getInductionVar(), ldc));
  block_run(start, cols);
  b_.setInsertionPointToEnd(block);
  b_.create<mlir::func::ReturnOp>(loc_);

  // The context, filled where the product is called.
  mlir::OpBuilder& b = low_.builder();
  BlockFunction out;
  out.name = name_;
  llvm::SmallVector<Value> bases;
  for (const Leaf& leaf : leaves_) bases.push_back(leaf.view.base);
  if (!in_place) bases.push_back(dest_.base);
  out.ctx = low_.stack_array(std::max<int64_t>(1, static_cast<int64_t>(bases.size())));
  for (size_t k = 0; k < bases.size(); ++k) {
    auto gep = b.create<LLVM::GEPOp>(loc_, ptr, ptr, out.ctx,
                                     llvm::ArrayRef<LLVM::GEPArg>{static_cast<int32_t>(k)});
    b.create<LLVM::StoreOp>(loc_, bases[k], gep);
    out.bases.push_back(bases[k]);
  }
  return out;
}

void KernelEmitter::block_run(Value start, Value count) {
  Type i64 = b_.getI64Type();
  auto cst = [&](int64_t v) { return b_.create<arith::ConstantIntOp>(loc_, v, 64).getResult(); };
  const int64_t inner = sizes_.back();
  Value zero = cst(0);
  auto run = b_.create<mlir::scf::WhileOp>(loc_, mlir::TypeRange{i64}, mlir::ValueRange{zero});
  mlir::Block* before = b_.createBlock(&run.getBefore(), {}, {i64}, {loc_});
  Value more =
      b_.create<arith::CmpIOp>(loc_, arith::CmpIPredicate::slt, before->getArgument(0), count);
  b_.create<mlir::scf::ConditionOp>(loc_, more, before->getArguments());
  mlir::Block* after = b_.createBlock(&run.getAfter(), {}, {i64}, {loc_});
  Value done = after->getArgument(0);
  // The segment's first element as indices over the coalesced dims (innermost: j0), and its
  // length: to the end of the run or of that innermost row, whichever comes first.
  Value at = b_.create<arith::AddIOp>(loc_, start, done);
  Value j0 = b_.create<arith::RemSIOp>(loc_, at, cst(inner));
  Value rest = b_.create<arith::DivSIOp>(loc_, at, cst(inner));
  llvm::SmallVector<Value> outer(sizes_.size() - 1);
  for (size_t d = outer.size(); d-- > 0;) {
    outer[d] = b_.create<arith::RemSIOp>(loc_, rest, cst(sizes_[d]));
    rest = b_.create<arith::DivSIOp>(loc_, rest, cst(sizes_[d]));
  }
  Value n = b_.create<arith::MinSIOp>(loc_, b_.create<arith::SubIOp>(loc_, count, done),
                                      b_.create<arith::SubIOp>(loc_, cst(inner), j0));
  ivs_.assign(outer.begin(), outer.end());
  if (vector_block_epilogue()) {
    ivs_.push_back(j0);
    vector_segment(n);
  } else {
    auto segment =
        b_.create<mlir::scf::ForOp>(loc_, j0, b_.create<arith::AddIOp>(loc_, j0, n), cst(1));
    b_.setInsertionPointToStart(segment.getBody());
    ivs_.push_back(segment.getInductionVar());
    memo_.clear();
    for (auto& leaf : leaves_) leaf.offset = offset(leaf.view.offset, leaf.strides);
    store(out_ptr_, offset(dest_.offset, out_strides_), convert(eval(root_), dest_.elem),
          dest_.elem);
    b_.setInsertionPointAfter(segment);
  }
  b_.create<mlir::scf::YieldOp>(loc_, mlir::ValueRange{b_.create<arith::AddIOp>(loc_, done, n)});
  b_.setInsertionPointAfter(run);
}

bool KernelEmitter::vector_block_epilogue() const {
  if (low_.options().vector_bits <= 0) return false;
  for (const Leaf& leaf : leaves_)
    if (leaf.strides.back() != 0 && leaf.strides.back() != 1) return false;
  return true;
}

void KernelEmitter::vector_segment(Value n) {
  mlir::MLIRContext* ctx = low_.module().getContext();
  const Type t = dest_.elem;
  const int64_t dynamic = mlir::ShapedType::kDynamic;
  const auto along = mlir::AffineMap::getMultiDimIdentityMap(1, ctx);
  const auto broadcast = mlir::AffineMap::get(1, 0, {}, ctx);
  llvm::SmallVector<Value> ins;
  llvm::SmallVector<mlir::AffineMap> maps;
  for (Leaf& leaf : leaves_) {
    const bool along_run = leaf.strides.back() != 0;
    llvm::SmallVector<int64_t> shape, strides;
    if (along_run) shape = {dynamic}, strides = {1};
    Value m = strided_memref(leaf.ptr, offset(leaf.view.offset, leaf.strides), std::nullopt, shape,
                             strides, n, leaf.view.elem);
    ins.push_back(b_.create<mlir::bufferization::ToTensorOp>(loc_, m, /*restrict=*/true,
                                                             /*writable=*/false));
    maps.push_back(along_run ? along : broadcast);
  }
  maps.push_back(along);
  Value dest_run = strided_memref(out_ptr_, offset(dest_.offset, out_strides_), std::nullopt,
                                  {dynamic}, {1}, n, t);
  Value init = b_.create<mlir::tensor::EmptyOp>(loc_, llvm::ArrayRef<int64_t>{dynamic}, t,
                                                mlir::ValueRange{n});
  auto generic = b_.create<mlir::linalg::GenericOp>(
      loc_, mlir::TypeRange{init.getType()}, ins, mlir::ValueRange{init}, maps,
      llvm::ArrayRef<mlir::utils::IteratorType>{mlir::utils::IteratorType::parallel},
      [&](mlir::OpBuilder& nested, mlir::Location, mlir::ValueRange args) {
        mlir::OpBuilder::InsertionGuard guard(b_);
        b_.setInsertionPoint(nested.getInsertionBlock(), nested.getInsertionPoint());
        memo_.clear();
        for (size_t k = 0; k < leaves_.size(); ++k) bind_leaf(k, args[k]);
        b_.create<mlir::linalg::YieldOp>(loc_, convert(eval(root_), t));
      });
  b_.create<mlir::bufferization::MaterializeInDestinationOp>(
      loc_, mlir::Type(), generic.getResult(0), dest_run, /*restrict=*/true, /*writable=*/true);
  memo_.clear();
  leaf_args_.clear();
}

// ---- Lowering ----

bool Lowering::emit_block_entry(mlir::Block& body, mlir::func::ReturnOp ret) {
  const int64_t index = options_.block_epilogue_input;  // -1: a prologue
  const std::string what = index >= 0 ? "block epilogue" : "block prologue";
  mlir::Operation* chain = ret.getNumOperands() == 1 ? ret.getOperand(0).getDefiningOp() : nullptr;
  bool is_chain =
      chain && mlir::isa<ir::FusedOp>(chain) && chain->getNumResults() == 1 &&
      mlir::cast<mlir::RankedTensorType>(chain->getResult(0).getType()).getElementType().isF32();
  if (index >= 0)
    is_chain = is_chain && index < static_cast<int64_t>(body.getNumArguments()) &&
               llvm::is_contained(chain->getOperands(), body.getArgument(index)) &&
               chain->getResult(0).getType() == body.getArgument(index).getType();
  if (!is_chain) {
    errors_ += "cannot compile a " + what +
               ": @forward is not one kiln.fused returning a float32 value" +
               (index >= 0 ? " of the type of its argument " + std::to_string(index) + ", over it"
                           : std::string()) +
               "\n";
    return false;
  }
  Type ptr = ptr_type(), i64 = builder_.getI64Type();
  builder_.setInsertionPointToEnd(module_.getBody());
  entry_ = builder_.create<mlir::func::FuncOp>(
      loc_, options_.entry_name, builder_.getFunctionType({ptr, ptr, i64, i64, i64, i64}, {}));
  mlir::Block* entry = entry_.addEntryBlock();
  builder_.setInsertionPointToStart(entry);
  auto buffer = [&](mlir::Value v, int64_t i) {
    auto gep = builder_.create<LLVM::GEPOp>(loc_, ptr, ptr, entry->getArgument(0),
                                            llvm::ArrayRef<LLVM::GEPArg>{static_cast<int32_t>(i)});
    View view = destination_shape(v);
    view.base = builder_.create<LLVM::LoadOp>(loc_, ptr, gep);
    return view;
  };
  for (unsigned i = 0; i < body.getNumArguments(); ++i)
    views_[body.getArgument(i)] = buffer(body.getArgument(i), i);
  // An epilogue maps the product's value y in place; a prologue writes z's elements into the
  // block (z described without a buffer).
  mlir::Value y = index >= 0 ? body.getArgument(index) : mlir::Value(), z = chain->getResult(0);
  View dest = destination_shape(z);
  dest.base = index >= 0 ? buffer(z, body.getNumArguments()).base
                         : builder_.create<LLVM::ZeroOp>(loc_, ptr).getResult();
  KernelEmitter emitter(*this, z, dest);
  std::optional<BlockEpilogueFn> fn = emitter.emit_block_epilogue(y, /*in_place=*/true);
  if (!fn) {
    errors_ += "cannot compile a " + what + ": another input shares the output's buffer\n";
    return false;
  }
  llvm::SmallVector<mlir::Value> args = {fn->ctx};
  for (unsigned i = 1; i < 6; ++i) args.push_back(entry->getArgument(i));
  builder_.create<mlir::func::CallOp>(loc_, fn->name, mlir::TypeRange{}, args);
  builder_.create<mlir::func::ReturnOp>(loc_);
  return true;
}

bool Lowering::is_block_prologue(mlir::Operation* op) const {
  if (!mlir::isa<ir::FusedOp>(op) || !op->hasAttr(ir::kBlockPrologueAttr) ||
      op->getNumResults() != 1 || !op->getResult(0).hasOneUse())
    return false;
  mlir::Value x = op->getResult(0);
  mlir::Operation* user = *x.getUsers().begin();
  bool product = mlir::isa<ir::LinearOp, ir::LinearFusedOp>(user);
  if (mlir::isa<ir::MatmulOp>(user)) {  // by a [K, N] matrix
    auto rhs = mlir::dyn_cast<mlir::RankedTensorType>(user->getOperand(1).getType());
    product = rhs && rhs.getRank() == 2;
  }
  return product && user->getOperand(0) == x && user == op->getNextNode() && !in_place_.count(x);
}

bool Lowering::emit_product_with_blocks(mlir::Operation* op) {
  if (!mlir::isa<ir::Conv2dOp, ir::Conv2dFusedOp, ir::LinearOp, ir::LinearFusedOp, ir::MatmulOp>(
          op))
    return false;
  // The input's prologue: its chain, deferred where it stood, computed by the call into the
  // runtime's blocks of rows. The input is described to the runtime without a buffer (null base).
  std::optional<BlockEpilogueFn> prologue;
  mlir::Operation* producer = op->getOperand(0).getDefiningOp();
  if (producer && is_block_prologue(producer)) {
    mlir::Value x = op->getOperand(0);
    View unstored = destination_shape(x);
    unstored.base = builder_.create<LLVM::ZeroOp>(loc_, ptr_type());
    KernelEmitter chain(*this, x, unstored);
    prologue = chain.emit_block_epilogue(mlir::Value());
    if (prologue) {
      views_[x] = unstored;
    } else {  // stored whole by a kernel of its own, then the plain call
      const View dx = destination(x);
      emit_kernel(x, dx);
      views_[x] = dx;
    }
  }
  // The result's epilogue: the op right after the product (the pass put the product there).
  mlir::Value y = op->getResult(0);
  mlir::Operation* user = op->getNextNode();
  const bool has_epilogue =
      user && mlir::isa<ir::FusedOp>(user) && user->hasAttr(ir::kBlockEpilogueAttr) &&
      user->getNumResults() == 1 && user->getResult(0).getType() == y.getType() &&
      llvm::is_contained(user->getOperands(), y) &&
      !in_place_.count(user->getResult(0));  // a loop's carried buffer: the chain may read it
  if (!has_epilogue) {
    if (!prologue) return false;
    emit_abi_call(op, nullptr, &*prologue);
    return true;
  }
  // In place in the chain's buffer, unless the product's value is needed too (its own buffer).
  const bool in_place = llvm::all_of(y.getUsers(), [&](mlir::Operation* u) { return u == user; });
  mlir::Value z = user->getResult(0);
  const View dest = destination(z);  // otherwise dense, at offset 0 (the function's base)
  views_[y] = in_place ? dest : destination(y);
  KernelEmitter chain(*this, z, dest);
  std::optional<BlockEpilogueFn> fn = chain.emit_block_epilogue(y, in_place);
  if (!fn) {
    // The product into a buffer of its own, then the chain as its own kernel.
    if (in_place) views_.erase(y);
    emit_abi_call(op, nullptr, prologue ? &*prologue : nullptr);
    emit_kernel(z, dest);
  } else {
    emit_abi_call(op, &*fn, prologue ? &*prologue : nullptr);
  }
  views_[z] = dest;
  return true;
}

}  // namespace kiln::codegen::detail
