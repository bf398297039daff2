// Row kernels (kernel_emitter.h) as scalar loops: softmax, log-softmax, layer norm, logsumexp,
// sum, mean, amax, amin and var over the last dim, generated with their input's elementwise tree
// computed in the passes over each row. Each follows the runtime kernel's formula (logsumexp: its
// result; sums: in float64), so compiled and eager values agree to rounding.

#include <algorithm>
#include <cmath>

#include "kernel_emitter.h"
#include "kiln/ir/KilnDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace kiln::codegen::detail {
namespace arith = mlir::arith;
namespace math = mlir::math;

Value KernelEmitter::row_pass(Value init, llvm::function_ref<Value(Value, Value)> body) {
  Value zero = b_.create<arith::ConstantIntOp>(loc_, 0, 64);
  Value end = b_.create<arith::ConstantIntOp>(loc_, sizes_.back(), 64);
  Value step = b_.create<arith::ConstantIntOp>(loc_, 1, 64);
  llvm::SmallVector<Value> inits;
  if (init) inits.push_back(init);
  auto loop = b_.create<mlir::scf::ForOp>(loc_, zero, end, step, inits);
  mlir::OpBuilder::InsertionGuard guard(b_);
  b_.setInsertionPointToStart(loop.getBody());
  ivs_.push_back(loop.getInductionVar());
  Value next =
      body(offset(dest_.offset, out_strides_), init ? loop.getRegionIterArgs()[0] : Value());
  ivs_.pop_back();
  if (init) b_.create<mlir::scf::YieldOp>(loc_, next);
  return init ? loop.getResult(0) : Value();
}

void KernelEmitter::leaves_at_element() {
  memo_.clear();  // values computed in another loop are out of scope here
  for (auto& leaf : leaves_) leaf.offset = offset(leaf.view.offset, leaf.strides);
}

void KernelEmitter::emit_row() {
  if (row_ == Row::LayerNorm) return layer_norm_row();
  if (row_ == Row::LogSumExp) return logsumexp_row();
  if (reduces_row(row_)) return reduce_row();
  softmax_row(row_ == Row::LogSoftmax);
}

// One pass over the row, the tree evaluated, one value stored per row: a sum (or a mean) in
// float64, more accurate than the runtime's pairwise float32 sums; the maximum or minimum,
// NaN-propagating as PyTorch's amax / amin. A variance takes two: the mean, then the squared
// deviations from it, in float64, over max(0, n - correction) (the runtime's divisor).
void KernelEmitter::reduce_row() {
  const Type t = dest_.elem;
  Value y;
  if (row_ == Row::Var) {
    const Type f64 = b_.getF64Type();
    auto reassoc = arith::FastMathFlagsAttr::get(b_.getContext(), arith::FastMathFlags::reassoc);
    auto x64 = [&] {
      leaves_at_element();
      return convert(convert(eval(root_), t), f64);
    };
    Value sum = row_pass(constant(0, f64), [&](Value, Value acc) {
      return b_.create<arith::AddFOp>(loc_, acc, x64(), reassoc).getResult();
    });
    const double n = static_cast<double>(sizes_.back());
    Value mean = b_.create<arith::DivFOp>(loc_, sum, constant(n, f64));
    Value sq = row_pass(constant(0, f64), [&](Value, Value acc) {
      Value d = b_.create<arith::SubFOp>(loc_, x64(), mean);
      return b_.create<arith::AddFOp>(loc_, acc, b_.create<arith::MulFOp>(loc_, d, d), reassoc)
          .getResult();
    });
    y = convert(b_.create<arith::DivFOp>(loc_, sq, constant(std::max(0.0, n - param_), f64)), t);
  } else if (row_ == Row::Sum || row_ == Row::Mean) {
    const Type f64 = b_.getF64Type();
    auto reassoc = arith::FastMathFlagsAttr::get(b_.getContext(), arith::FastMathFlags::reassoc);
    Value sum = row_pass(constant(0, f64), [&](Value, Value acc) {
      leaves_at_element();
      Value x = convert(convert(eval(root_), t), f64);
      return b_.create<arith::AddFOp>(loc_, acc, x, reassoc).getResult();
    });
    if (row_ == Row::Mean)
      sum = b_.create<arith::DivFOp>(loc_, sum, constant(static_cast<double>(sizes_.back()), f64));
    y = convert(sum, t);
  } else {
    const bool max = row_ == Row::Amax;
    y = row_pass(constant(max ? -INFINITY : INFINITY, t), [&](Value, Value acc) {
      leaves_at_element();
      Value x = convert(eval(root_), t);
      if (max) return b_.create<arith::MaximumFOp>(loc_, acc, x).getResult();
      return b_.create<arith::MinimumFOp>(loc_, acc, x).getResult();
    });
  }
  store(out_ptr_, offset(dest_.offset, out_strides_), y, t);  // the row dim's stride is 0
}

// Two passes over the row, the tree evaluated in each (nothing stored: the result is one value):
// the maximum m (NaN-propagating), then the sum s of exp(x - shift) with shift = m, or 0 where m
// is infinite (PyTorch's rule: a row of -inf gives log(0) = -inf, one with +inf gives +inf, where
// x - m would be NaN); the result shift + log(s), stored once per row. The runtime's kernel
// computes the same value in one pass, rescaling its sum whenever the maximum grows.
void KernelEmitter::logsumexp_row() {
  const Type t = dest_.elem;
  auto reassoc = arith::FastMathFlagsAttr::get(b_.getContext(), arith::FastMathFlags::reassoc);
  Value m = row_pass(constant(-INFINITY, t), [&](Value, Value acc) {
    leaves_at_element();
    return b_.create<arith::MaximumFOp>(loc_, acc, convert(eval(root_), t)).getResult();
  });
  Value infinite = b_.create<arith::CmpFOp>(
      loc_, arith::CmpFPredicate::OEQ, b_.create<math::AbsFOp>(loc_, m), constant(INFINITY, t));
  Value shift = b_.create<arith::SelectOp>(loc_, infinite, constant(0, t), m);
  Value sum = row_pass(constant(0, t), [&](Value, Value acc) {
    leaves_at_element();
    Value e = exp(b_.create<arith::SubFOp>(loc_, convert(eval(root_), t), shift));
    return b_.create<arith::AddFOp>(loc_, acc, e, reassoc).getResult();
  });
  Value y = b_.create<arith::AddFOp>(loc_, shift, b_.create<math::LogOp>(loc_, sum));
  store(out_ptr_, offset(dest_.offset, out_strides_), y, t);  // the row dim's stride is 0
}

// Three passes, as the runtime's kernel: y = x (the tree evaluated, stored) and its maximum m
// (arith.maximumf: NaN-propagating as PyTorch's max, and vectorizable); y = exp(y - m) and their
// sum s; y *= 1/s. Log-softmax: the sum of exp(y - m), then y - m - log(s). The sums reassociate
// so LLVM vectorizes them (the runtime's kernel sums by lanes too).
void KernelEmitter::softmax_row(bool log) {
  const Type t = dest_.elem;
  auto reassoc = arith::FastMathFlagsAttr::get(b_.getContext(), arith::FastMathFlags::reassoc);
  Value m = row_pass(constant(-INFINITY, t), [&](Value at, Value acc) {
    leaves_at_element();
    Value x = convert(eval(root_), t);
    store(out_ptr_, at, x, t);
    return b_.create<arith::MaximumFOp>(loc_, acc, x).getResult();
  });
  Value sum = row_pass(constant(0, t), [&](Value at, Value acc) {
    Value e = exp(b_.create<arith::SubFOp>(loc_, load(out_ptr_, at, t), m));
    if (!log) store(out_ptr_, at, e, t);
    return b_.create<arith::AddFOp>(loc_, acc, e, reassoc).getResult();
  });
  if (log) {
    Value shift = b_.create<arith::AddFOp>(loc_, m, b_.create<math::LogOp>(loc_, sum));
    row_pass(Value(), [&](Value at, Value) {
      store(out_ptr_, at, b_.create<arith::SubFOp>(loc_, load(out_ptr_, at, t), shift), t);
      return Value();
    });
  } else {
    Value inv = b_.create<arith::DivFOp>(loc_, constant(1, t), sum);
    row_pass(Value(), [&](Value at, Value) {
      store(out_ptr_, at, b_.create<arith::MulFOp>(loc_, load(out_ptr_, at, t), inv), t);
      return Value();
    });
  }
}

// As the runtime's kernel: the mean and the variance of y = x (the tree evaluated, stored) summed
// in float64, rstd = 1/sqrt(var + eps), then y = (y * rstd - mean * rstd) * w + b.
void KernelEmitter::layer_norm_row() {
  const Type t = dest_.elem, f64 = b_.getF64Type();
  auto reassoc = arith::FastMathFlagsAttr::get(b_.getContext(), arith::FastMathFlags::reassoc);
  Value sum = row_pass(constant(0, f64), [&](Value at, Value acc) {
    leaves_at_element();
    Value x = convert(eval(root_), t);
    store(out_ptr_, at, x, t);
    return b_.create<arith::AddFOp>(loc_, acc, convert(x, f64), reassoc).getResult();
  });
  Value n = constant(static_cast<double>(sizes_.back()), f64);
  Value mean = b_.create<arith::DivFOp>(loc_, sum, n);
  Value sq = row_pass(constant(0, f64), [&](Value at, Value acc) {
    Value d = b_.create<arith::SubFOp>(loc_, convert(load(out_ptr_, at, t), f64), mean);
    return b_.create<arith::AddFOp>(loc_, acc, b_.create<arith::MulFOp>(loc_, d, d), reassoc)
        .getResult();
  });
  Value var = b_.create<arith::DivFOp>(loc_, sq, n);
  Value rstd = b_.create<arith::DivFOp>(
      loc_, constant(1, f64),
      b_.create<math::SqrtOp>(loc_, b_.create<arith::AddFOp>(loc_, var, constant(param_, f64))));
  Value a = convert(rstd, t);
  Value c = convert(b_.create<arith::NegFOp>(loc_, b_.create<arith::MulFOp>(loc_, mean, rstd)), t);
  row_pass(Value(), [&](Value at, Value) {
    leaves_at_element();
    Value y =
        b_.create<arith::AddFOp>(loc_, b_.create<arith::MulFOp>(loc_, load(out_ptr_, at, t), a), c);
    if (row_weight_) y = b_.create<arith::MulFOp>(loc_, y, convert(eval(row_weight_), t));
    if (row_bias_) y = b_.create<arith::AddFOp>(loc_, y, convert(eval(row_bias_), t));
    store(out_ptr_, at, y, t);
    return Value();
  });
}

KernelEmitter::Row reduction_row(mlir::Operation* op) {
  using Row = KernelEmitter::Row;
  if (mlir::isa<ir::LogsumexpOp>(op)) return Row::LogSumExp;
  if (mlir::isa<ir::SumOp>(op)) return Row::Sum;
  if (mlir::isa<ir::MeanOp>(op)) return Row::Mean;
  if (mlir::isa<ir::AmaxOp>(op)) return Row::Amax;
  if (mlir::isa<ir::AminOp>(op)) return Row::Amin;
  if (mlir::isa<ir::VarOp>(op)) return Row::Var;
  return Row::None;
}

bool Lowering::has_row_kernel(mlir::Operation* op) {
  if (reduction_row(op) != KernelEmitter::Row::None) {
    // Over the last dim only (a 1-D input: dims may be empty, all), of a float input with rows
    // (an empty row is the runtime's: -inf, 0, NaN or an error), the result of its dtype.
    auto in = mlir::dyn_cast<mlir::RankedTensorType>(op->getOperand(0).getType());
    auto out = mlir::dyn_cast<mlir::RankedTensorType>(op->getResult(0).getType());
    if (!in || !out || !in.hasStaticShape() || !out.hasStaticShape() || in.getRank() == 0 ||
        in.getNumElements() == 0 || in.getElementType() != out.getElementType())
      return false;
    if (!in.getElementType().isF32() && !in.getElementType().isF64()) return false;
    auto dims = op->getAttrOfType<mlir::DenseI64ArrayAttr>("dims");
    if (!dims) return false;
    if (dims.empty() ? in.getRank() != 1
                     : dims.size() != 1 || (dims[0] != -1 && dims[0] != in.getRank() - 1))
      return false;
    // A row kernel splits its rows over the threads, never a row. A few very long rows stay
    // the runtime's, which splits each into fixed chunks merged pairwise (runtime/src/kernels/
    // reduce.cpp: rows of 2 x 65536 elements or more when there are at most 16 of them).
    const int64_t row = in.getShape().back(), rows = in.getNumElements() / row;
    return row < 2 * 65536 || rows > 16;
  }
  if (!mlir::isa<ir::SoftmaxOp, ir::LogSoftmaxOp, ir::LayerNormOp>(op)) return false;
  auto type = mlir::dyn_cast<mlir::RankedTensorType>(op->getResult(0).getType());
  if (!type || !type.hasStaticShape() || type.getRank() == 0 || type.getNumElements() == 0)
    return false;
  const mlir::Type elem = type.getElementType();
  if (!elem.isF32() && !elem.isF64()) return false;
  if (mlir::isa<ir::LayerNormOp>(op)) {
    // Over the last dim only, with a weight and bias (if any) of the row's length and dtype.
    auto shape = op->getAttrOfType<mlir::DenseI64ArrayAttr>("normalized_shape");
    if (!shape || shape.size() != 1 || shape[0] != type.getShape().back()) return false;
    for (unsigned i = 1; i < op->getNumOperands(); ++i) {
      auto p = mlir::dyn_cast<mlir::RankedTensorType>(op->getOperand(i).getType());
      if (!p) continue;  // kiln.none
      if (p.getRank() != 1 || p.getShape()[0] != shape[0] || p.getElementType() != elem)
        return false;
    }
    return true;
  }
  auto dim = op->getAttrOfType<mlir::IntegerAttr>("dim");
  return dim && (dim.getInt() == -1 || dim.getInt() == type.getRank() - 1);
}

void Lowering::emit_row_kernel(mlir::Operation* op) {
  mlir::Value result = op->getResult(0);
  View d = destination(result);
  if (const auto row = reduction_row(op); row != KernelEmitter::Row::None) {
    // The loops run over the input's shape; every element of a row maps to the row's result.
    View rows = d;
    auto in = mlir::cast<mlir::RankedTensorType>(op->getOperand(0).getType());
    const size_t outer = static_cast<size_t>(in.getRank()) - 1;
    rows.sizes.assign(in.getShape().begin(), in.getShape().end());
    rows.strides.assign(d.strides.begin(), d.strides.begin() + outer);  // keepdim: drops the 1
    rows.strides.push_back(0);
    double correction = 0;  // a variance's divisor n - correction
    if (auto unbiased = op->getAttrOfType<mlir::BoolAttr>("unbiased"))
      correction = unbiased.getValue() ? 1 : 0;
    KernelEmitter(*this, op->getOperand(0), rows, row, {}, {}, correction).emit();
    views_[result] = d;
    return;
  }
  if (mlir::isa<ir::LayerNormOp>(op)) {
    auto param = [&](unsigned i) {
      mlir::Value v = op->getOperand(i);
      return mlir::isa<mlir::RankedTensorType>(v.getType()) ? v : mlir::Value();
    };
    const double eps = op->getAttrOfType<mlir::FloatAttr>("eps").getValueAsDouble();
    KernelEmitter(*this, op->getOperand(0), d, KernelEmitter::Row::LayerNorm, param(1), param(2),
                  eps)
        .emit();
  } else {
    const auto row =
        mlir::isa<ir::SoftmaxOp>(op) ? KernelEmitter::Row::Softmax : KernelEmitter::Row::LogSoftmax;
    KernelEmitter(*this, op->getOperand(0), d, row).emit();
  }
  views_[result] = d;
}

}  // namespace kiln::codegen::detail
