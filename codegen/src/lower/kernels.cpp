// The elementwise loop nests of kernel_emitter.h: the structure (leaves, coalesced dims), the
// kernel function and its call, and the scalar code of each elementwise op.

#include <cmath>

#include "f32_math.h"
#include "kernel_emitter.h"
#include "kiln/ir/KilnDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "vectorize.h"

namespace kiln::codegen::detail {
namespace LLVM = mlir::LLVM;
namespace arith = mlir::arith;
namespace math = mlir::math;

namespace {
bool is_float(Type t) {
  return mlir::isa<mlir::FloatType>(t);
}
int rank_of(Type t) {  // promotion order: bool < ints < floats
  if (t.isInteger(1)) return 0;
  if (auto i = mlir::dyn_cast<mlir::IntegerType>(t)) return i.getWidth();
  return 1000 + t.getIntOrFloatBitWidth();
}
}  // namespace

void KernelEmitter::collect(Value v, bool is_root) {
  v = node_of(v);
  if (leaf_index_.count(v) || visited_.count(v)) return;
  if (Lowering::splat_value(v)) return;
  mlir::Operation* def = v.getDefiningOp();
  // A kiln.fused result is computed from its body unless it is already in memory (a result
  // with several users is stored once; its readers load it instead of recomputing the body).
  if (def && mlir::isa<ir::FusedOp>(def) && !low_.has_view(v)) {
    visited_.insert(v);
    auto& body = def->getRegion(0).front();
    collect(body.getTerminator()->getOperand(mlir::cast<mlir::OpResult>(v).getResultNumber()),
            false);
    return;
  }
  const bool computed = is_root ? !low_.has_view(v) : low_.deferred(v);
  if (computed && def) {
    visited_.insert(v);
    for (Value operand : def->getOperands()) collect(operand, false);
    return;
  }
  Leaf leaf;
  leaf.value = v;
  leaf.view = low_.view(v);
  // Broadcast the leaf's view to the output's dims (right-aligned, size-1 dims step 0).
  const int64_t out_rank = static_cast<int64_t>(dest_.sizes.size());
  const int64_t rank = static_cast<int64_t>(leaf.view.sizes.size());
  leaf.strides.assign(out_rank, 0);
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t o = d + out_rank - rank;
    if (o < 0) continue;  // leading dims of size 1 (same numel)
    leaf.strides[o] = leaf.view.sizes[d] == 1 && dest_.sizes[o] != 1 ? 0 : leaf.view.strides[d];
  }
  leaf_index_[v] = leaves_.size();
  leaves_.push_back(std::move(leaf));
}

// Merges adjacent dims every operand steps over as one and drops size-1 dims.
void KernelEmitter::coalesce() {
  llvm::SmallVector<int64_t> sizes;
  llvm::SmallVector<llvm::SmallVector<int64_t>> strides(leaves_.size() + 1);
  auto source = [&](size_t k) -> llvm::ArrayRef<int64_t> {
    return k == 0 ? llvm::ArrayRef<int64_t>(dest_.strides) : leaves_[k - 1].strides;
  };
  // A row kernel walks its last dim itself: only the dims before it coalesce.
  const size_t outer_dims = dest_.sizes.size() - (row_ != Row::None ? 1 : 0);
  for (size_t d = 0; d < outer_dims; ++d) {
    const int64_t n = dest_.sizes[d];
    if (n == 1) continue;
    if (!sizes.empty() && merge_ok(d, strides)) {
      sizes.back() *= n;
      for (size_t k = 0; k < strides.size(); ++k) strides[k].back() = source(k)[d];
    } else {
      sizes.push_back(n);
      for (size_t k = 0; k < strides.size(); ++k) strides[k].push_back(source(k)[d]);
    }
  }
  if (sizes.empty()) {  // a single element (a row kernel: a single row)
    sizes.push_back(1);
    for (auto& s : strides) s.push_back(0);
  }
  if (row_ != Row::None) {
    const size_t last = dest_.sizes.size() - 1;
    sizes.push_back(dest_.sizes[last]);
    for (size_t k = 0; k < strides.size(); ++k) strides[k].push_back(source(k)[last]);
  }
  sizes_ = sizes;
  out_strides_ = strides[0];
  for (size_t k = 0; k < leaves_.size(); ++k) leaves_[k].strides = strides[k + 1];
}

bool KernelEmitter::merge_ok(size_t d,
                             const llvm::SmallVector<llvm::SmallVector<int64_t>>& kept) const {
  const int64_t n = dest_.sizes[d];
  if (kept[0].back() != dest_.strides[d] * n) return false;
  for (size_t k = 0; k < leaves_.size(); ++k) {
    if (kept[k + 1].back() != leaves_[k].strides[d] * n) return false;
  }
  return true;
}

// ---- the kernel function ----
void KernelEmitter::build_function() {
  if (vector_kernel()) {
    build_vector_function();
    return;
  }
  if (vector_row_kernel()) {
    build_vector_row_function();
    return;
  }
  mlir::Block* block = begin_function();
  Value ctx = block->getArgument(0);
  auto load_ptr = [&](int64_t slot) { return context_pointer(ctx, slot); };
  out_ptr_ = load_ptr(0);
  llvm::SmallVector<Value> more_ptrs;
  for (size_t k = 0; k < more_.size(); ++k) more_ptrs.push_back(load_ptr(k + 1));
  const size_t first_leaf = more_.size() + 1;
  for (size_t k = 0; k < leaves_.size(); ++k) leaves_[k].ptr = load_ptr(k + first_leaf);
  open_loops(block, sizes_.size() - (row_ != Row::None ? 1 : 0));
  if (row_ != Row::None) {
    emit_row();
    b_.setInsertionPointToEnd(block);
    b_.create<mlir::func::ReturnOp>(loc_);
    return;
  }
  for (auto& leaf : leaves_) leaf.offset = offset(leaf.view.offset, leaf.strides);
  Value at = offset(dest_.offset, out_strides_);
  store(out_ptr_, at, convert(eval(root_), dest_.elem), dest_.elem);
  for (size_t k = 0; k < more_.size(); ++k) {
    const auto& [root, dest] = more_[k];
    store(more_ptrs[k], at, convert(eval(root), dest.elem), dest.elem);
  }
  b_.setInsertionPointToEnd(block);
  b_.create<mlir::func::ReturnOp>(loc_);
}
void KernelEmitter::open_loops(mlir::Block* block, size_t dims) {
  ivs_.clear();
  Value one = b_.create<arith::ConstantIntOp>(loc_, 1, 64);
  for (size_t d = 0; d < dims; ++d) {
    Value lb = d == 0 ? Value(block->getArgument(1))
                      : b_.create<arith::ConstantIntOp>(loc_, 0, 64).getResult();
    Value ub = d == 0 ? Value(block->getArgument(2))
                      : b_.create<arith::ConstantIntOp>(loc_, sizes_[d], 64).getResult();
    auto loop = b_.create<mlir::scf::ForOp>(loc_, lb, ub, one);
    ivs_.push_back(loop.getInductionVar());
    b_.setInsertionPointToStart(loop.getBody());
  }
}

mlir::Block* KernelEmitter::begin_function(bool vector) {
  name_ = "kiln_kernel_" + std::to_string(low_.next_kernel_id());
  Type ptr = low_.ptr_type(), i64 = b_.getI64Type();
  b_.setInsertionPointToEnd(low_.module().getBody());
  auto fn = b_.create<mlir::func::FuncOp>(loc_, name_, b_.getFunctionType({ptr, i64, i64}, {}));
  fn.setPrivate();
  if (vector) fn->setAttr(kVectorKernelAttr, b_.getI64IntegerAttr(low_.options().vector_bits));
  mlir::Block* block = fn.addEntryBlock();
  b_.setInsertionPointToStart(block);
  return block;
}

Value KernelEmitter::context_pointer(Value ctx, int64_t slot) {
  Type ptr = low_.ptr_type();
  auto gep = b_.create<LLVM::GEPOp>(loc_, ptr, ptr, ctx, llvm::ArrayRef<LLVM::GEPArg>{slot});
  return b_.create<LLVM::LoadOp>(loc_, ptr, gep);
}

Value KernelEmitter::offset(int64_t base, llvm::ArrayRef<int64_t> strides) {
  Value off = b_.create<arith::ConstantIntOp>(loc_, base, 64);
  for (size_t d = 0; d < strides.size(); ++d) {
    if (strides[d] == 0) continue;
    Value term = ivs_[d];
    if (strides[d] != 1) {
      term = b_.create<arith::MulIOp>(loc_, term,
                                      b_.create<arith::ConstantIntOp>(loc_, strides[d], 64));
    }
    off = b_.create<arith::AddIOp>(loc_, off, term);
  }
  return off;
}

void KernelEmitter::call_function() {
  mlir::OpBuilder& b = low_.builder();
  Type ptr = low_.ptr_type();
  const int64_t first_leaf = static_cast<int64_t>(more_.size()) + 1;
  const int64_t slots = static_cast<int64_t>(leaves_.size()) + first_leaf;
  Value ctx = low_.stack_array(slots);
  llvm::SmallVector<mlir::Operation*> users;
  auto put = [&](int64_t i, Value p) {
    auto gep = b.create<LLVM::GEPOp>(loc_, ptr, ptr, ctx, llvm::ArrayRef<LLVM::GEPArg>{i});
    b.create<LLVM::StoreOp>(loc_, p, gep);
  };
  put(0, dest_.base);
  for (size_t k = 0; k < more_.size(); ++k) put(k + 1, more_[k].second.base);
  for (size_t k = 0; k < leaves_.size(); ++k) put(k + first_leaf, leaves_[k].view.base);
  const int64_t total = numel(sizes_);
  const int64_t outer = sizes_[0];
  const int64_t inner = std::max<int64_t>(total / std::max<int64_t>(outer, 1), 1);
  Value zero = b.create<arith::ConstantIntOp>(loc_, 0, 64);
  Value end = b.create<arith::ConstantIntOp>(loc_, outer, 64);
  mlir::Operation* call;
  const int64_t threshold = low_.options().parallel_min_elements;
  if (threshold > 0 && total >= threshold && outer > 1) {
    low_.declare("kiln_abi_parallel_for",
                 b.getFunctionType({b.getI64Type(), b.getI64Type(), b.getI64Type(), ptr, ptr}, {}));
    const int64_t grain = std::max<int64_t>(1, (threshold / 2 + inner - 1) / inner);
    Value g = b.create<arith::ConstantIntOp>(loc_, grain, 64);
    auto fn_type = b.getFunctionType({ptr, b.getI64Type(), b.getI64Type()}, {});
    Value fn = b.create<mlir::func::ConstantOp>(loc_, fn_type, name_);
    Value fn_ptr = b.create<mlir::UnrealizedConversionCastOp>(loc_, ptr, fn).getResult(0);
    call = b.create<mlir::func::CallOp>(loc_, "kiln_abi_parallel_for", mlir::TypeRange{},
                                        mlir::ValueRange{zero, end, g, fn_ptr, ctx});
  } else {
    call = b.create<mlir::func::CallOp>(loc_, name_, mlir::TypeRange{},
                                        mlir::ValueRange{ctx, zero, end});
  }
  low_.note_use(dest_.base, call);
  for (const auto& [root, dest] : more_) low_.note_use(dest.base, call);
  for (auto& leaf : leaves_) low_.note_use(leaf.view.base, call);
}

// ---- scalar code ----
Value KernelEmitter::load(Value base, Value off, Type elem) {
  Type mem = memory_type(elem);
  auto gep = b_.create<LLVM::GEPOp>(loc_, low_.ptr_type(), mem, base, mlir::ValueRange{off});
  Value v = b_.create<LLVM::LoadOp>(loc_, mem, gep);
  if (elem.isInteger(1)) v = b_.create<arith::TruncIOp>(loc_, elem, v);
  return v;
}

void KernelEmitter::store(Value base, Value off, Value v, Type elem) {
  Type mem = memory_type(elem);
  if (elem.isInteger(1)) v = b_.create<arith::ExtUIOp>(loc_, mem, v);
  auto gep = b_.create<LLVM::GEPOp>(loc_, low_.ptr_type(), mem, base, mlir::ValueRange{off});
  b_.create<LLVM::StoreOp>(loc_, v, gep);
}

Value KernelEmitter::constant(double value, Type t) {
  if (is_float(t)) return b_.create<arith::ConstantOp>(loc_, b_.getFloatAttr(t, value));
  if (t.isInteger(1)) return b_.create<arith::ConstantIntOp>(loc_, value != 0, 1);
  return b_.create<arith::ConstantOp>(loc_, b_.getIntegerAttr(t, static_cast<int64_t>(value)));
}

Value KernelEmitter::convert(Value x, Type to) {
  Type from = x.getType();
  if (from == to) return x;
  if (is_float(from) && is_float(to)) {
    if (from.getIntOrFloatBitWidth() < to.getIntOrFloatBitWidth()) {
      return b_.create<arith::ExtFOp>(loc_, to, x);
    }
    return b_.create<arith::TruncFOp>(loc_, to, x);
  }
  if (!is_float(from) && is_float(to)) {
    if (from.isInteger(1)) return b_.create<arith::UIToFPOp>(loc_, to, x);
    return b_.create<arith::SIToFPOp>(loc_, to, x);
  }
  if (is_float(from)) {
    if (to.isInteger(1)) {
      return b_.create<arith::CmpFOp>(loc_, arith::CmpFPredicate::UNE, x, constant(0, from));
    }
    return b_.create<arith::FPToSIOp>(loc_, to, x);
  }
  if (to.isInteger(1)) {
    return b_.create<arith::CmpIOp>(loc_, arith::CmpIPredicate::ne, x, constant(0, from));
  }
  if (from.isInteger(1)) return b_.create<arith::ExtUIOp>(loc_, to, x);
  if (from.getIntOrFloatBitWidth() < to.getIntOrFloatBitWidth()) {
    return b_.create<arith::ExtSIOp>(loc_, to, x);
  }
  return b_.create<arith::TruncIOp>(loc_, to, x);
}

double KernelEmitter::f64_attr(mlir::Operation* op, const char* name, double fallback) {
  if (auto a = op->getAttrOfType<mlir::FloatAttr>(name)) return a.getValueAsDouble();
  return fallback;
}

Value KernelEmitter::libm(const char* f64_name, Value x) {
  Type t = x.getType();
  low_.declare(f64_name, b_.getFunctionType({t}, {t}));
  return b_.create<mlir::func::CallOp>(loc_, f64_name, mlir::TypeRange{t}, mlir::ValueRange{x})
      .getResult(0);
}

Value KernelEmitter::sigmoid(Value x) {
  if (x.getType().isF32()) return F32Math(b_, loc_).sigmoid(x);
  Value one = constant(1, x.getType());
  Value e = exp(b_.create<arith::NegFOp>(loc_, x));
  return b_.create<arith::DivFOp>(loc_, one, b_.create<arith::AddFOp>(loc_, one, e));
}

Value KernelEmitter::tanh(Value x) {
  return x.getType().isF64() ? libm("tanh", x) : b_.create<math::TanhOp>(loc_, x).getResult();
}

Value KernelEmitter::erf(Value x) {
  return x.getType().isF64() ? libm("erf", x) : b_.create<math::ErfOp>(loc_, x).getResult();
}

Value KernelEmitter::eval(Value v) {
  v = node_of(v);
  if (auto it = memo_.find(v); it != memo_.end()) return it->second;
  Value r = compute(v);
  memo_[v] = r;
  return r;
}

Value KernelEmitter::compute(Value v) {
  if (auto splat = Lowering::splat_value(v)) {
    return b_.create<arith::ConstantOp>(loc_, *splat);
  }
  if (auto it = leaf_args_.find(v); it != leaf_args_.end()) return it->second;
  if (auto it = leaf_index_.find(v); it != leaf_index_.end()) {
    Leaf& leaf = leaves_[it->second];
    return load(leaf.ptr, leaf.offset, leaf.view.elem);
  }
  mlir::Operation* op = v.getDefiningOp();
  if (mlir::isa<ir::FusedOp>(op)) {
    auto& body = op->getRegion(0).front();
    return eval(body.getTerminator()->getOperand(mlir::cast<mlir::OpResult>(v).getResultNumber()));
  }
  Type rt = element(v);
  auto arg = [&](unsigned i) { return eval(op->getOperand(i)); };
  auto arg_as = [&](unsigned i, Type t) { return convert(arg(i), t); };
  const bool fp = is_float(rt);

  // Binary arithmetic in the result type.
  if (mlir::isa<ir::AddOp>(op) || mlir::isa<ir::SubOp>(op)) {
    Value a = arg_as(0, rt), b = arg_as(1, rt);
    const double alpha = f64_attr(op, "alpha", 1.0);
    if (alpha != 1.0) {
      b = fp ? b_.create<arith::MulFOp>(loc_, b, constant(alpha, rt)).getResult()
             : b_.create<arith::MulIOp>(loc_, b, constant(alpha, rt)).getResult();
    }
    if (mlir::isa<ir::AddOp>(op)) {
      return fp ? b_.create<arith::AddFOp>(loc_, a, b).getResult()
                : b_.create<arith::AddIOp>(loc_, a, b).getResult();
    }
    return fp ? b_.create<arith::SubFOp>(loc_, a, b).getResult()
              : b_.create<arith::SubIOp>(loc_, a, b).getResult();
  }
  if (mlir::isa<ir::MulOp>(op)) {
    Value a = arg_as(0, rt), b = arg_as(1, rt);
    if (rt.isInteger(1)) return b_.create<arith::AndIOp>(loc_, a, b);
    return fp ? b_.create<arith::MulFOp>(loc_, a, b).getResult()
              : b_.create<arith::MulIOp>(loc_, a, b).getResult();
  }
  if (mlir::isa<ir::DivOp>(op)) {
    Value a = arg_as(0, rt), b = arg_as(1, rt);
    return fp ? b_.create<arith::DivFOp>(loc_, a, b).getResult()
              : b_.create<arith::DivSIOp>(loc_, a, b).getResult();
  }
  if (mlir::isa<ir::PowOp>(op)) {
    if (!fp) return unsupported(op, "integer pow");
    Value a = arg_as(0, rt);
    if (auto e = Lowering::splat_value(op->getOperand(1))) {
      double p = 0;
      if (auto f = mlir::dyn_cast<mlir::FloatAttr>(*e)) p = f.getValueAsDouble();
      if (auto i = mlir::dyn_cast<mlir::IntegerAttr>(*e)) p = static_cast<double>(i.getInt());
      if (p == 1.0) return a;
      if (p == 2.0) return b_.create<arith::MulFOp>(loc_, a, a);
      if (p == 3.0) {
        return b_.create<arith::MulFOp>(loc_, a, b_.create<arith::MulFOp>(loc_, a, a));
      }
      if (p == 0.5) return b_.create<math::SqrtOp>(loc_, a);
      if (p == -1.0) return b_.create<arith::DivFOp>(loc_, constant(1, rt), a);
    }
    return b_.create<math::PowFOp>(loc_, a, arg_as(1, rt));
  }
  if (mlir::isa<ir::MaximumOp>(op) || mlir::isa<ir::MinimumOp>(op)) {
    Value a = arg_as(0, rt), b = arg_as(1, rt);
    const bool mx = mlir::isa<ir::MaximumOp>(op);
    if (fp) {
      return mx ? b_.create<arith::MaximumFOp>(loc_, a, b).getResult()
                : b_.create<arith::MinimumFOp>(loc_, a, b).getResult();
    }
    return mx ? b_.create<arith::MaxSIOp>(loc_, a, b).getResult()
              : b_.create<arith::MinSIOp>(loc_, a, b).getResult();
  }
  // Comparisons in the promoted operand type.
  static const llvm::DenseMap<mlir::TypeID, std::pair<arith::CmpFPredicate, arith::CmpIPredicate>>
      cmp = {
          {mlir::TypeID::get<ir::EqOp>(), {arith::CmpFPredicate::OEQ, arith::CmpIPredicate::eq}},
          {mlir::TypeID::get<ir::NeOp>(), {arith::CmpFPredicate::UNE, arith::CmpIPredicate::ne}},
          {mlir::TypeID::get<ir::LtOp>(), {arith::CmpFPredicate::OLT, arith::CmpIPredicate::slt}},
          {mlir::TypeID::get<ir::LeOp>(), {arith::CmpFPredicate::OLE, arith::CmpIPredicate::sle}},
          {mlir::TypeID::get<ir::GtOp>(), {arith::CmpFPredicate::OGT, arith::CmpIPredicate::sgt}},
          {mlir::TypeID::get<ir::GeOp>(), {arith::CmpFPredicate::OGE, arith::CmpIPredicate::sge}}};
  if (auto it = cmp.find(op->getName().getTypeID()); it != cmp.end()) {
    Value a = arg(0), b = arg(1);
    Type t = rank_of(a.getType()) >= rank_of(b.getType()) ? a.getType() : b.getType();
    if (t.isInteger(1)) t = b_.getI8Type();
    a = convert(a, t), b = convert(b, t);
    if (is_float(t)) return b_.create<arith::CmpFOp>(loc_, it->second.first, a, b);
    return b_.create<arith::CmpIOp>(loc_, it->second.second, a, b);
  }
  Type i1 = b_.getI1Type();
  if (mlir::isa<ir::LogicalAndOp>(op))
    return b_.create<arith::AndIOp>(loc_, arg_as(0, i1), arg_as(1, i1));
  if (mlir::isa<ir::LogicalOrOp>(op))
    return b_.create<arith::OrIOp>(loc_, arg_as(0, i1), arg_as(1, i1));
  if (mlir::isa<ir::LogicalNotOp>(op)) {
    return b_.create<arith::XOrIOp>(loc_, arg_as(0, i1), constant(1, i1));
  }
  if (mlir::isa<ir::WhereOp>(op)) {
    return b_.create<arith::SelectOp>(loc_, arg_as(0, i1), arg_as(1, rt), arg_as(2, rt));
  }
  if (mlir::isa<ir::MaskedFillOp>(op)) {
    return b_.create<arith::SelectOp>(loc_, arg_as(1, i1), constant(f64_attr(op, "value", 0), rt),
                                      arg_as(0, rt));
  }
  if (mlir::isa<ir::FillOp>(op)) return constant(f64_attr(op, "value", 0), rt);
  if (mlir::isa<ir::CopyOp>(op)) return arg_as(1, rt);
  if (mlir::isa<ir::ToOp>(op)) return arg_as(0, rt);
  if (mlir::isa<ir::DropoutOp>(op)) {
    const double p = f64_attr(op, "p", 0);
    Value x = arg_as(0, rt);
    Value keep = arg_as(1, i1);
    // x / (1 - p), as the eager op rounds it.
    Value scaled = p >= 1.0 ? constant(0, rt)
                            : b_.create<arith::DivFOp>(loc_, x, constant(1.0 - p, rt)).getResult();
    return b_.create<arith::SelectOp>(loc_, keep, scaled, constant(0, rt));
  }

  // Unary ops: computed in the result type.
  Value x = arg_as(0, rt);
  if (mlir::isa<ir::CloneOp>(op)) return x;
  if (mlir::isa<ir::NegOp>(op)) {
    return fp ? b_.create<arith::NegFOp>(loc_, x).getResult()
              : b_.create<arith::SubIOp>(loc_, constant(0, rt), x).getResult();
  }
  if (mlir::isa<ir::AbsOp>(op)) {
    return fp ? b_.create<math::AbsFOp>(loc_, x).getResult()
              : b_.create<math::AbsIOp>(loc_, x).getResult();
  }
  if (mlir::isa<ir::ReluOp>(op) || mlir::isa<ir::ClampOp>(op) || mlir::isa<ir::SignOp>(op)) {
    if (mlir::isa<ir::ReluOp>(op)) {
      Value zero = constant(0, rt);
      Value pos =
          fp ? b_.create<arith::CmpFOp>(loc_, arith::CmpFPredicate::UGT, x, zero).getResult()
             : b_.create<arith::CmpIOp>(loc_, arith::CmpIPredicate::sgt, x, zero).getResult();
      return b_.create<arith::SelectOp>(loc_, pos, x, zero);
    }
    if (mlir::isa<ir::ClampOp>(op)) {
      const double lo = f64_attr(op, "min", -INFINITY), hi = f64_attr(op, "max", INFINITY);
      Value r = x;
      if (!std::isinf(lo)) {
        r = fp ? b_.create<arith::MaximumFOp>(loc_, r, constant(lo, rt)).getResult()
               : b_.create<arith::MaxSIOp>(loc_, r, constant(lo, rt)).getResult();
      }
      if (!std::isinf(hi)) {
        r = fp ? b_.create<arith::MinimumFOp>(loc_, r, constant(hi, rt)).getResult()
               : b_.create<arith::MinSIOp>(loc_, r, constant(hi, rt)).getResult();
      }
      return r;
    }
    Value zero = constant(0, rt);
    Value gt, lt;
    if (fp) {
      gt = b_.create<arith::CmpFOp>(loc_, arith::CmpFPredicate::OGT, x, zero);
      lt = b_.create<arith::CmpFOp>(loc_, arith::CmpFPredicate::OLT, x, zero);
    } else {
      gt = b_.create<arith::CmpIOp>(loc_, arith::CmpIPredicate::sgt, x, zero);
      lt = b_.create<arith::CmpIOp>(loc_, arith::CmpIPredicate::slt, x, zero);
    }
    Value neg = b_.create<arith::SelectOp>(loc_, lt, constant(-1, rt), zero);
    return b_.create<arith::SelectOp>(loc_, gt, constant(1, rt), neg);
  }
  if (!fp) return unsupported(op, "this op on integers");
  if (mlir::isa<ir::ExpOp>(op)) return exp(x);
  if (mlir::isa<ir::LogOp>(op)) return b_.create<math::LogOp>(loc_, x);
  if (mlir::isa<ir::Log1pOp>(op)) {
    return rt.isF64() ? libm("log1p", x) : b_.create<math::Log1pOp>(loc_, x).getResult();
  }
  if (mlir::isa<ir::SqrtOp>(op)) return b_.create<math::SqrtOp>(loc_, x);
  if (mlir::isa<ir::RsqrtOp>(op)) {
    return b_.create<arith::DivFOp>(loc_, constant(1, rt), b_.create<math::SqrtOp>(loc_, x));
  }
  if (mlir::isa<ir::SinOp>(op)) return b_.create<math::SinOp>(loc_, x);
  if (mlir::isa<ir::CosOp>(op)) return b_.create<math::CosOp>(loc_, x);
  if (mlir::isa<ir::TanhOp>(op)) return tanh(x);
  if (mlir::isa<ir::ErfOp>(op)) return erf(x);
  if (mlir::isa<ir::SigmoidOp>(op)) return sigmoid(x);
  if (mlir::isa<ir::SiluOp>(op)) {
    if (rt.isF32()) return F32Math(b_, loc_).silu(x);
    return b_.create<arith::MulFOp>(loc_, x, sigmoid(x));
  }
  if (mlir::isa<ir::FloorOp>(op)) return b_.create<math::FloorOp>(loc_, x);
  if (mlir::isa<ir::CeilOp>(op)) return b_.create<math::CeilOp>(loc_, x);
  if (mlir::isa<ir::RoundOp>(op)) return b_.create<math::RoundEvenOp>(loc_, x);
  if (mlir::isa<ir::ReciprocalOp>(op)) return b_.create<arith::DivFOp>(loc_, constant(1, rt), x);
  if (mlir::isa<ir::LeakyReluOp>(op)) {
    Value pos = b_.create<arith::CmpFOp>(loc_, arith::CmpFPredicate::OGT, x, constant(0, rt));
    Value scaled =
        b_.create<arith::MulFOp>(loc_, x, constant(f64_attr(op, "negative_slope", 0.01), rt));
    return b_.create<arith::SelectOp>(loc_, pos, x, scaled);
  }
  if (mlir::isa<ir::GeluOp>(op)) {
    auto approx = op->getAttrOfType<mlir::BoolAttr>("approximate");
    if (rt.isF32()) {
      return approx && approx.getValue() ? F32Math(b_, loc_).gelu_tanh(x)
                                         : F32Math(b_, loc_).gelu(x);
    }
    Value half_x = b_.create<arith::MulFOp>(loc_, x, constant(0.5, rt));
    Value inner;
    if (approx && approx.getValue()) {
      // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
      Value x3 = b_.create<arith::MulFOp>(loc_, x, b_.create<arith::MulFOp>(loc_, x, x));
      Value t = b_.create<arith::AddFOp>(
          loc_, x, b_.create<arith::MulFOp>(loc_, x3, constant(0.044715, rt)));
      inner = tanh(b_.create<arith::MulFOp>(loc_, t, constant(std::sqrt(2.0 / M_PI), rt)));
    } else {
      inner = erf(b_.create<arith::MulFOp>(loc_, x, constant(M_SQRT1_2, rt)));
    }
    return b_.create<arith::MulFOp>(loc_, half_x,
                                    b_.create<arith::AddFOp>(loc_, constant(1, rt), inner));
  }
  return unsupported(op, "no scalar lowering");
}

Value KernelEmitter::unsupported(mlir::Operation* op, const std::string& what) {
  low_.error(op, what + " is not supported by code generation");
  return constant(0, element(op->getResult(0)));
}

void Lowering::emit_kernel(mlir::Value root, const View& dest) {
  KernelEmitter(*this, root, dest).emit();
}

void Lowering::emit_kernel(llvm::ArrayRef<mlir::Value> roots, llvm::ArrayRef<View> dests) {
  for (const View& d : dests) {
    if (d.sizes != dests[0].sizes || d.strides != dests[0].strides || d.offset != dests[0].offset) {
      for (size_t k = 0; k < roots.size(); ++k) emit_kernel(roots[k], dests[k]);
      return;
    }
  }
  KernelEmitter(*this, roots, dests).emit();
}

}  // namespace kiln::codegen::detail
