// Column kernels: sum, mean, amax and amin over a block of leading dims that keeps the last dim
// (a bias gradient's sum over the batch, a mean over the sequence of [B, T, D]), generated with
// the input's elementwise tree computed in the pass instead of stored and handed to the runtime's
// reduction. The input is viewed as [A, R, I] (kept dims before the block, the block, kept dims
// after it); each unit of work is one a and a chunk of up to kChunk columns of I, whose
// accumulators (float64 for sums, as the row kernels') stay in a stack array across the R rows:
// every row of the chunk is read contiguously, so LLVM's loop vectorizer widens the chunk loop.
// Units split over the thread pool; a reduced row never does, so the result does not depend on
// the thread count.

#include <cmath>

#include "kernel_emitter.h"
#include "kiln/ir/KilnDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace kiln::codegen::detail {
namespace LLVM = mlir::LLVM;
namespace arith = mlir::arith;

namespace {

// Columns per unit: the accumulators of one unit (2 KiB of float64) stay in L1.
constexpr int64_t kChunk = 256;

// The reductions a column kernel takes: sum, mean, amax, amin (not var or logsumexp).
KernelEmitter::Row column_reduction(mlir::Operation* op) {
  using Row = KernelEmitter::Row;
  const Row row = reduction_row(op);
  return row == Row::LogSumExp || row == Row::Var ? Row::None : row;
}

// The reduced block [first, last] of op's dims when they are consecutive and keep the last dim.
bool column_block(mlir::Operation* op, int64_t* first, int64_t* last) {
  auto in = mlir::dyn_cast<mlir::RankedTensorType>(op->getOperand(0).getType());
  auto dims = op->getAttrOfType<mlir::DenseI64ArrayAttr>("dims");
  if (!in || !dims || dims.empty()) return false;
  const int64_t rank = in.getRank();
  llvm::SmallVector<int64_t> d;
  for (int64_t v : dims.asArrayRef()) d.push_back(v < 0 ? v + rank : v);
  llvm::sort(d);
  for (size_t k = 1; k < d.size(); ++k)
    if (d[k] != d[k - 1] + 1) return false;
  if (d.front() < 0 || d.back() >= rank - 1) return false;
  *first = d.front(), *last = d.back();
  return true;
}

}  // namespace

bool Lowering::has_column_kernel(mlir::Operation* op) {
  if (column_reduction(op) == KernelEmitter::Row::None) return false;
  auto in = mlir::dyn_cast<mlir::RankedTensorType>(op->getOperand(0).getType());
  auto out = mlir::dyn_cast<mlir::RankedTensorType>(op->getResult(0).getType());
  if (!in || !out || !in.hasStaticShape() || !out.hasStaticShape() || in.getNumElements() == 0 ||
      in.getElementType() != out.getElementType())
    return false;
  if (!in.getElementType().isF32() && !in.getElementType().isF64()) return false;
  int64_t first = 0, last = 0;
  return column_block(op, &first, &last);
}

bool Lowering::emit_column_kernel(mlir::Operation* op) {
  if (!has_column_kernel(op)) return false;
  int64_t first = 0, last = 0;
  column_block(op, &first, &last);
  auto in = mlir::cast<mlir::RankedTensorType>(op->getOperand(0).getType());
  auto out = mlir::cast<mlir::RankedTensorType>(op->getResult(0).getType());
  const int64_t rank = in.getRank();
  // The loops run over the input's shape; the result's elements repeat along the reduced dims.
  const llvm::SmallVector<int64_t> out_strides = contiguous_strides(out.getShape());
  const bool keepdim = out.getRank() == rank;
  View cols;
  cols.sizes.assign(in.getShape().begin(), in.getShape().end());
  cols.elem = out.getElementType();
  for (int64_t d = 0; d < rank; ++d) {
    if (d >= first && d <= last)
      cols.strides.push_back(0);
    else
      cols.strides.push_back(out_strides[keepdim || d < first ? d : d - (last - first + 1)]);
  }
  mlir::Value result = op->getResult(0);
  KernelEmitter columns(*this, op->getOperand(0), cols, column_reduction(op));
  if (!columns.can_emit_columns(first, last)) return false;  // leaves it to the runtime's kernel
  View d = destination(result);
  cols.base = d.base;
  columns.emit_columns(cols);
  views_[result] = d;
  return true;
}

// Merges each of the groups [0, first), [first, last], (last, rank) of dest's dims into one dim
// (size-1 dims dropped; an empty group is one dim of size 1): false when some operand does not
// step over a group's dims as over one.
bool KernelEmitter::coalesce_columns(int64_t first, int64_t last) {
  const int64_t rank = static_cast<int64_t>(dest_.sizes.size());
  const size_t operands = leaves_.size() + 1;
  auto source = [&](size_t k) -> llvm::ArrayRef<int64_t> {
    return k == 0 ? llvm::ArrayRef<int64_t>(dest_.strides) : leaves_[k - 1].strides;
  };
  llvm::SmallVector<int64_t> sizes;
  llvm::SmallVector<llvm::SmallVector<int64_t>> strides(operands);
  for (auto [lo, hi] : {std::pair{int64_t(0), first}, {first, last + 1}, {last + 1, rank}}) {
    int64_t size = 1;
    llvm::SmallVector<int64_t> step(operands, 0);
    bool any = false;
    for (int64_t d = hi - 1; d >= lo; --d) {
      const int64_t n = dest_.sizes[d];
      if (n == 1) continue;
      for (size_t k = 0; k < operands; ++k) {
        if (!any) {
          step[k] = source(k)[d];
        } else if (source(k)[d] != step[k] * size) {
          return false;
        }
      }
      size *= n;
      any = true;
    }
    sizes.push_back(size);
    for (size_t k = 0; k < operands; ++k) strides[k].push_back(step[k]);
  }
  sizes_ = sizes;
  out_strides_ = strides[0];
  for (size_t k = 0; k < leaves_.size(); ++k) leaves_[k].strides = strides[k + 1];
  return true;
}

bool KernelEmitter::can_emit_columns(int64_t first, int64_t last) {
  collect(root_, /*is_root=*/true);
  return coalesce_columns(first, last);
}

void KernelEmitter::emit_columns(const View& dest) {
  dest_ = dest;
  const int64_t A = sizes_[0], R = sizes_[1], I = sizes_[2];
  const int64_t chunks = (I + kChunk - 1) / kChunk, chunk = std::min(I, kChunk);
  const Type t = dest_.elem;
  const bool sums = row_ == Row::Sum || row_ == Row::Mean;
  const Type acc_t = sums ? b_.getF64Type() : t;

  mlir::Block* block = begin_function();
  Value ctx = block->getArgument(0);
  out_ptr_ = context_pointer(ctx, 0);
  for (size_t k = 0; k < leaves_.size(); ++k)
    leaves_[k].ptr = context_pointer(ctx, static_cast<int64_t>(k) + 1);
  auto cst = [&](int64_t v) { return b_.create<arith::ConstantIntOp>(loc_, v, 64).getResult(); };
  Value acc = b_.create<LLVM::AllocaOp>(loc_, low_.ptr_type(), acc_t, cst(chunk), 64);
  Value one = cst(1), zero = cst(0);
  auto units = b_.create<mlir::scf::ForOp>(loc_, block->getArgument(1), block->getArgument(2), one);
  b_.setInsertionPointToStart(units.getBody());
  Value u = units.getInductionVar();
  Value a = b_.create<arith::DivSIOp>(loc_, u, cst(chunks));
  Value j0 =
      b_.create<arith::MulIOp>(loc_, b_.create<arith::RemSIOp>(loc_, u, cst(chunks)), cst(kChunk));
  Value n =
      b_.create<arith::MinSIOp>(loc_, cst(kChunk), b_.create<arith::SubIOp>(loc_, cst(I), j0));
  // A loop over the chunk's columns: body(j: the column in the chunk, the column in I).
  auto columns = [&](llvm::function_ref<void(Value, Value)> body) {
    auto loop = b_.create<mlir::scf::ForOp>(loc_, zero, n, one);
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(loop.getBody());
    body(loop.getInductionVar(), b_.create<arith::AddIOp>(loc_, j0, loop.getInductionVar()));
  };
  const double init = row_ == Row::Amax ? -INFINITY : row_ == Row::Amin ? INFINITY : 0.0;
  columns([&](Value j, Value) { store(acc, j, constant(init, acc_t), acc_t); });
  auto rows = b_.create<mlir::scf::ForOp>(loc_, zero, cst(R), one);
  {
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(rows.getBody());
    columns([&](Value j, Value col) {
      ivs_ = {a, rows.getInductionVar(), col};
      memo_.clear();
      for (auto& leaf : leaves_) leaf.offset = offset(leaf.view.offset, leaf.strides);
      Value x = convert(eval(root_), acc_t);
      Value prev = load(acc, j, acc_t);
      Value next = row_ == Row::Amax   ? b_.create<arith::MaximumFOp>(loc_, prev, x).getResult()
                   : row_ == Row::Amin ? b_.create<arith::MinimumFOp>(loc_, prev, x).getResult()
                                       : b_.create<arith::AddFOp>(loc_, prev, x).getResult();
      store(acc, j, next, acc_t);
    });
  }
  columns([&](Value j, Value col) {
    ivs_ = {a, zero, col};
    Value y = load(acc, j, acc_t);
    if (row_ == Row::Mean)
      y = b_.create<arith::DivFOp>(loc_, y, constant(static_cast<double>(R), acc_t));
    store(out_ptr_, offset(dest_.offset, out_strides_), convert(y, t), t);
  });
  b_.setInsertionPointToEnd(block);
  b_.create<mlir::func::ReturnOp>(loc_);
  // Called over the units, [begin, end) of A x chunks (call_function splits its first dim).
  sizes_ = {A * chunks, R * chunk};
  call_function();
}

}  // namespace kiln::codegen::detail
