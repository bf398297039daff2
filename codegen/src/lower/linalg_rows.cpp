// Row kernels (softmax, log-softmax, layer norm, and the reductions of a row to one value:
// logsumexp, sum, mean, amax, amin, var; all over the last dim; row_kernels.cpp has their scalar
// loops and formulas) in the vector pipeline (DESIGN.md §5). The kernel function keeps its
// signature and its scalar loops over the rows; inside them each pass over a row is one
// linalg.generic on tensors: a reduction into a rank-0 tensor (the maximum, a sum) or a parallel
// map into the row (the result, or softmax's exponentials). Every operand's row is a 1-D strided
// memref read as a tensor (rank 0 where the row broadcasts one value); the input's elementwise tree
// is evaluated in each pass that needs it (KernelEmitter::eval: recomputed, not stored, so the
// passes read only the inputs and the row being written). vectorize.cpp tiles each reduction into
// one tile of vector registers of partial results (scf::tileReductionUsingScf), merged after the
// row, and the maps as elementwise kernels; the formulas and their rounding are the scalar
// kernels'.

#include <algorithm>
#include <cmath>
#include <utility>

#include "kernel_emitter.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/AffineMap.h"

namespace kiln::codegen::detail {
namespace arith = mlir::arith;
namespace math = mlir::math;

bool KernelEmitter::vector_row_kernel() const {
  if (row_ == Row::None || low_.options().vector_bits <= 0) return false;
  if (sizes_.back() < 2) return false;  // one element per row: nothing to vectorize
  // The result is written along the row (logsumexp: one value per row, stride 0); every input
  // is read along it contiguously or broadcast (a strided row would be gathered lane by lane).
  if (out_strides_.back() != (reduces_row(row_) ? 0 : 1)) return false;
  for (const Leaf& leaf : leaves_)
    if (leaf.strides.back() != 0 && leaf.strides.back() != 1) return false;
  return true;
}

void KernelEmitter::build_vector_row_function() {
  mlir::Block* block = begin_function(/*vector=*/true);
  mlir::MLIRContext* ctx_mlir = low_.module().getContext();
  Value ctx = block->getArgument(0);
  out_ptr_ = context_pointer(ctx, 0);  // a row kernel has one result
  for (size_t k = 0; k < leaves_.size(); ++k)
    leaves_[k].ptr = context_pointer(ctx, static_cast<int64_t>(k) + 1);
  open_loops(block, sizes_.size() - 1);

  const int64_t n = sizes_.back();
  const Type t = dest_.elem;
  auto outer = [](llvm::ArrayRef<int64_t> strides) { return strides.drop_back(); };
  const auto along = mlir::AffineMap::getMultiDimIdentityMap(1, ctx_mlir);
  const auto broadcast = mlir::AffineMap::get(1, 0, {}, ctx_mlir);
  // A row of `elem` at `base` + `offset`: 1-D, or rank 0 when the row broadcasts one value.
  auto row_memref = [&](Value base, Value offset, bool along_row, Type elem) {
    llvm::SmallVector<int64_t> shape, strides;
    if (along_row) shape = {n}, strides = {1};
    return strided_memref(base, offset, std::nullopt, shape, strides, Value(), elem);
  };
  Value dest_row;
  if (!reduces_row(row_))
    dest_row = row_memref(out_ptr_, offset(dest_.offset, outer(out_strides_)), true, t);
  llvm::SmallVector<Value> leaf_rows;
  llvm::SmallVector<mlir::AffineMap> leaf_maps;
  for (Leaf& leaf : leaves_) {
    const bool along_row = leaf.strides.back() != 0;
    Value m = row_memref(leaf.ptr, offset(leaf.view.offset, outer(leaf.strides)), along_row,
                         leaf.view.elem);
    leaf_rows.push_back(b_.create<mlir::bufferization::ToTensorOp>(loc_, m, /*restrict=*/true,
                                                                   /*writable=*/false));
    leaf_maps.push_back(along_row ? along : broadcast);
  }

  // One pass over the row: a generic reading every leaf's row and `extra` (rows) into `init`
  // (a row: a map; rank 0: a reduction); body(extra's elements, init's element) with the leaves
  // bound returns the element to yield.
  using Body = llvm::function_ref<Value(mlir::ValueRange extra, Value init)>;
  auto pass = [&](Value init, llvm::ArrayRef<Value> extra, Body body) -> Value {
    llvm::SmallVector<Value> ins(leaf_rows.begin(), leaf_rows.end());
    ins.append(extra.begin(), extra.end());
    llvm::SmallVector<mlir::AffineMap> maps(leaf_maps.begin(), leaf_maps.end());
    maps.append(extra.size(), along);
    const bool reduction = mlir::cast<mlir::RankedTensorType>(init.getType()).getRank() == 0;
    maps.push_back(reduction ? broadcast : along);
    const auto iterator =
        reduction ? mlir::utils::IteratorType::reduction : mlir::utils::IteratorType::parallel;
    auto generic = b_.create<mlir::linalg::GenericOp>(
        loc_, mlir::TypeRange{init.getType()}, ins, mlir::ValueRange{init}, maps,
        llvm::ArrayRef<mlir::utils::IteratorType>{iterator},
        [&](mlir::OpBuilder& nested, mlir::Location, mlir::ValueRange args) {
          mlir::OpBuilder::InsertionGuard guard(b_);
          b_.setInsertionPoint(nested.getInsertionBlock(), nested.getInsertionPoint());
          memo_.clear();  // values of another pass's body are out of scope here
          for (size_t k = 0; k < leaves_.size(); ++k) bind_leaf(k, args[k]);
          Value y = body(args.slice(leaves_.size(), extra.size()), args.back());
          b_.create<mlir::linalg::YieldOp>(loc_, y);
        });
    return generic.getResult(0);
  };
  // A reduction over the row into a scalar of `type`, starting at `init`.
  auto reduce = [&](Type type, double init, llvm::ArrayRef<Value> extra, Body body) -> Value {
    Value empty = b_.create<mlir::tensor::EmptyOp>(loc_, llvm::ArrayRef<int64_t>{}, type);
    Value start = b_.create<mlir::linalg::FillOp>(loc_, constant(init, type), empty).getResult(0);
    Value r = pass(start, extra, body);
    return b_.create<mlir::tensor::ExtractOp>(loc_, r, mlir::ValueRange{});
  };
  auto empty_row = [&] {
    return b_.create<mlir::tensor::EmptyOp>(loc_, llvm::ArrayRef<int64_t>{n}, t).getResult();
  };
  auto x = [&] { return convert(eval(root_), t); };  // the row's element (in a body)
  auto sub = [&](Value a, Value c) { return b_.create<arith::SubFOp>(loc_, a, c).getResult(); };
  auto reassoc = arith::FastMathFlagsAttr::get(ctx_mlir, arith::FastMathFlags::reassoc);
  auto sum = [&](Value acc, Value v) {
    return b_.create<arith::AddFOp>(loc_, acc, v, reassoc).getResult();
  };
  auto maximum = [&](Value acc, Value v) {
    return b_.create<arith::MaximumFOp>(loc_, acc, v).getResult();  // NaN-propagating
  };
  // The row's mean and the sum of its squared deviations from it, in float64 (two passes): a
  // layer norm's and a variance's.
  auto moments = [&]() -> std::pair<Value, Value> {
    const Type f64 = b_.getF64Type();
    Value total = reduce(f64, 0, {},
                         [&](mlir::ValueRange, Value acc) { return sum(acc, convert(x(), f64)); });
    Value mean = b_.create<arith::DivFOp>(loc_, total, constant(static_cast<double>(n), f64));
    Value squares = reduce(f64, 0, {}, [&](mlir::ValueRange, Value acc) {
      Value d = sub(convert(x(), f64), mean);
      return sum(acc, b_.create<arith::MulFOp>(loc_, d, d));
    });
    return {mean, squares};
  };
  auto finish = [&](Value row) {
    b_.create<mlir::bufferization::MaterializeInDestinationOp>(
        loc_, mlir::Type(), row, dest_row, /*restrict=*/true, /*writable=*/true);
  };

  switch (row_) {
    case Row::Softmax:
    case Row::LogSoftmax: {
      Value m =
          reduce(t, -INFINITY, {}, [&](mlir::ValueRange, Value acc) { return maximum(acc, x()); });
      if (row_ == Row::LogSoftmax) {
        Value s = reduce(t, 0, {},
                         [&](mlir::ValueRange, Value acc) { return sum(acc, exp(sub(x(), m))); });
        Value shift = b_.create<arith::AddFOp>(loc_, m, b_.create<math::LogOp>(loc_, s));
        finish(pass(empty_row(), {}, [&](mlir::ValueRange, Value) { return sub(x(), shift); }));
        break;
      }
      Value e = pass(empty_row(), {}, [&](mlir::ValueRange, Value) { return exp(sub(x(), m)); });
      Value s = reduce(t, 0, {e}, [&](mlir::ValueRange ex, Value acc) { return sum(acc, ex[0]); });
      Value inv = b_.create<arith::DivFOp>(loc_, constant(1, t), s);
      finish(pass(e, {}, [&](mlir::ValueRange, Value y) {
        return b_.create<arith::MulFOp>(loc_, y, inv).getResult();
      }));
      break;
    }
    case Row::LayerNorm: {
      const Type f64 = b_.getF64Type();
      auto [mean, squares] = moments();
      Value var = b_.create<arith::DivFOp>(loc_, squares, constant(static_cast<double>(n), f64));
      Value rstd = b_.create<arith::DivFOp>(
          loc_, constant(1, f64),
          b_.create<math::SqrtOp>(loc_,
                                  b_.create<arith::AddFOp>(loc_, var, constant(param_, f64))));
      Value a = convert(rstd, t);
      Value c =
          convert(b_.create<arith::NegFOp>(loc_, b_.create<arith::MulFOp>(loc_, mean, rstd)), t);
      finish(pass(empty_row(), {}, [&](mlir::ValueRange, Value) {
        Value y = b_.create<arith::AddFOp>(loc_, b_.create<arith::MulFOp>(loc_, x(), a), c);
        if (row_weight_) y = b_.create<arith::MulFOp>(loc_, y, convert(eval(row_weight_), t));
        if (row_bias_) y = b_.create<arith::AddFOp>(loc_, y, convert(eval(row_bias_), t));
        return y;
      }));
      break;
    }
    case Row::LogSumExp: {
      Value m =
          reduce(t, -INFINITY, {}, [&](mlir::ValueRange, Value acc) { return maximum(acc, x()); });
      Value infinite = b_.create<arith::CmpFOp>(
          loc_, arith::CmpFPredicate::OEQ, b_.create<math::AbsFOp>(loc_, m), constant(INFINITY, t));
      Value shift = b_.create<arith::SelectOp>(loc_, infinite, constant(0, t), m);
      Value s = reduce(t, 0, {},
                       [&](mlir::ValueRange, Value acc) { return sum(acc, exp(sub(x(), shift))); });
      Value y = b_.create<arith::AddFOp>(loc_, shift, b_.create<math::LogOp>(loc_, s));
      store(out_ptr_, offset(dest_.offset, outer(out_strides_)), y, t);
      break;
    }
    case Row::Sum:
    case Row::Mean:
    case Row::Amax:
    case Row::Amin:
    case Row::Var: {
      // As reduce_row: sums in float64 (a variance's two passes: the mean, then the squared
      // deviations); amax / amin NaN-propagating.
      Value y;
      if (row_ == Row::Var) {
        const Type f64 = b_.getF64Type();
        Value squares = moments().second;
        const double divisor = std::max(0.0, static_cast<double>(n) - param_);
        y = convert(b_.create<arith::DivFOp>(loc_, squares, constant(divisor, f64)), t);
      } else if (row_ == Row::Sum || row_ == Row::Mean) {
        const Type f64 = b_.getF64Type();
        y = reduce(f64, 0, {},
                   [&](mlir::ValueRange, Value acc) { return sum(acc, convert(x(), f64)); });
        if (row_ == Row::Mean)
          y = b_.create<arith::DivFOp>(loc_, y, constant(static_cast<double>(n), f64));
        y = convert(y, t);
      } else if (row_ == Row::Amax) {
        y = reduce(t, -INFINITY, {},
                   [&](mlir::ValueRange, Value acc) { return maximum(acc, x()); });
      } else {
        y = reduce(t, INFINITY, {}, [&](mlir::ValueRange, Value acc) {
          return b_.create<arith::MinimumFOp>(loc_, acc, x()).getResult();
        });
      }
      store(out_ptr_, offset(dest_.offset, outer(out_strides_)), y, t);
      break;
    }
    case Row::None:
      break;
  }
  memo_.clear();
  leaf_args_.clear();
  b_.setInsertionPointToEnd(block);
  b_.create<mlir::func::ReturnOp>(loc_);
}

}  // namespace kiln::codegen::detail
