// Ops that run as calls into the runtime's kernels through its C ABI (kiln/runtime/abi.h): the
// operands' base pointers go in a stack array, their geometry and the op's attributes in a
// constant descriptor (laid out exactly as abi.h documents).

#include <algorithm>
#include <bit>
#include <cstring>

#include "kiln/ir/KilnDialect.h"
#include "llvm/ADT/StringMap.h"
#include "lowering.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

namespace kiln::codegen::detail {
namespace LLVM = mlir::LLVM;

namespace {
// kiln op → its attributes in ABI order (the runtime symbol is kiln_abi_<op name>): the op
// schema's attribute order (ir/ops.toml, generated at build time). A name ending in '?'
// is an optional attribute the op may lack (passed as 0 then).
const llvm::StringMap<std::vector<const char*>>& abi_ops() {
  static const llvm::StringMap<std::vector<const char*>> table = {
#define KILN_ABI_OPS
#include "kiln/ir/KilnCodegenOps.inc"
  };
  return table;
}

// Results the ABI entry point accepts as null (not computed), bit i for result i: passed so when
// nothing uses them (the runtime's registry says the same of its kernels: optional_outputs).
unsigned optional_results(llvm::StringRef op) {
  return op == "max_pool2d" ? 0b10u : 0u;
}
}  // namespace

bool has_abi_kernel(llvm::StringRef op) {
  return abi_ops().count(op) != 0;
}

// Convolutions, linear layers and matmuls whose weights are frozen constants call the runtime's
// *_prepared entry points: the weight (operand 1: conv2d, conv2d_fused, conv2d_avgpool, linear,
// linear_fused; matmul's right operand), or mbconv's weights (operands 1 when present, 3 and 5).
bool Lowering::has_constant_weight(mlir::Operation* op, llvm::StringRef name) {
  auto constant = [&](unsigned i) {
    mlir::Operation* def = op->getOperand(i).getDefiningOp();
    return mlir::isa_and_nonnull<ir::ConstantOp>(def) && !splat_value(op->getOperand(i));
  };
  if (name == "conv2d" || name == "conv2d_fused" || name == "conv2d_avgpool" || name == "linear" ||
      name == "linear_fused" || name == "matmul")
    return constant(1);
  if (name == "mbconv")
    return constant(5) && constant(3) &&
           (mlir::isa<mlir::NoneType>(op->getOperand(1).getType()) || constant(1));
  return false;
}

bool Lowering::emit_abi_call(mlir::Operation* op, const BlockEpilogueFn* epilogue,
                             const BlockEpilogueFn* prologue) {
  llvm::StringRef name = op->getName().getStringRef();
  if (!name.consume_front("kiln.")) return false;
  auto it = abi_ops().find(name);
  if (it == abi_ops().end()) return false;

  // Attributes first: a missing one is a compile-time error, before any code is emitted.
  std::vector<int64_t> attrs;
  for (const char* spec : it->second) {
    llvm::StringRef a(spec);
    const bool optional = a.consume_back("?");
    mlir::Attribute attr = op->getAttr(a);
    if (!attr && optional) {
      attrs.push_back(0);
      continue;
    }
    if (auto b = mlir::dyn_cast_or_null<mlir::BoolAttr>(attr)) {
      attrs.push_back(b.getValue() ? 1 : 0);
    } else if (auto i = mlir::dyn_cast_or_null<mlir::IntegerAttr>(attr)) {
      attrs.push_back(i.getType().isInteger(1) ? (i.getValue().getBoolValue() ? 1 : 0)
                                               : i.getInt());
    } else if (auto f = mlir::dyn_cast_or_null<mlir::FloatAttr>(attr)) {
      attrs.push_back(std::bit_cast<int64_t>(f.getValueAsDouble()));
    } else if (auto arr = mlir::dyn_cast_or_null<mlir::DenseI64ArrayAttr>(attr)) {
      attrs.push_back(static_cast<int64_t>(arr.size()));
      for (int64_t v : arr.asArrayRef()) attrs.push_back(v);
    } else if (auto str = mlir::dyn_cast_or_null<mlir::StringAttr>(attr)) {
      // Its byte count, then the bytes packed 8 to a word (abi.h).
      const llvm::StringRef bytes = str.getValue();
      attrs.push_back(static_cast<int64_t>(bytes.size()));
      for (size_t k = 0; k < bytes.size(); k += 8) {
        int64_t word = 0;
        std::memcpy(&word, bytes.data() + k, std::min<size_t>(8, bytes.size() - k));
        attrs.push_back(word);
      }
    } else {
      error(op, "missing or unsupported attribute '" + a.str() + "'");
      return true;
    }
  }

  // Operands (absent = kiln.none), then results in fresh buffers.
  std::vector<View> tensors;
  std::vector<bool> present;
  for (mlir::Value v : op->getOperands()) {
    if (mlir::isa<mlir::NoneType>(v.getType())) {
      tensors.emplace_back();
      present.push_back(false);
    } else {
      tensors.push_back(view(v));
      present.push_back(true);
    }
  }
  const unsigned optional = optional_results(name);
  for (mlir::OpResult r : op->getResults()) {
    if (r.use_empty() && (optional >> r.getResultNumber()) & 1u) {
      tensors.emplace_back();
      present.push_back(false);
      continue;
    }
    // (A product with a block epilogue writes into its chain's destination, given beforehand.)
    auto given = views_.find(r);
    View d = given != views_.end() ? given->second : destination(r);
    views_[r] = d;
    tensors.push_back(d);
    present.push_back(true);
  }
  std::vector<int64_t> desc{static_cast<int64_t>(tensors.size())};
  for (size_t k = 0; k < tensors.size(); ++k) {
    const View& t = tensors[k];
    if (!present[k]) {
      desc.insert(desc.end(), {-1, 0, 0});
      continue;
    }
    desc.push_back(dtype_code(t.elem));
    desc.push_back(static_cast<int64_t>(t.sizes.size()));
    desc.insert(desc.end(), t.sizes.begin(), t.sizes.end());
    desc.insert(desc.end(), t.strides.begin(), t.strides.end());
    desc.push_back(t.offset);
  }
  desc.insert(desc.end(), attrs.begin(), attrs.end());

  const std::string desc_name = "kiln_desc_" + std::to_string(num_descs_++);
  {
    mlir::OpBuilder::InsertionGuard guard(builder_);
    builder_.setInsertionPointToStart(module_.getBody());
    auto type =
        mlir::RankedTensorType::get({static_cast<int64_t>(desc.size())}, builder_.getI64Type());
    builder_.create<LLVM::GlobalOp>(
        loc_, LLVM::LLVMArrayType::get(builder_.getI64Type(), desc.size()), /*isConstant=*/true,
        LLVM::Linkage::Internal, desc_name,
        mlir::DenseElementsAttr::get(type, llvm::ArrayRef<int64_t>(desc)), /*alignment=*/8);
  }
  mlir::Type ptr = ptr_type();
  mlir::Value data = stack_array(static_cast<int64_t>(tensors.size()));
  mlir::Value null = builder_.create<LLVM::ZeroOp>(loc_, ptr);
  for (size_t k = 0; k < tensors.size(); ++k) {
    auto gep = builder_.create<LLVM::GEPOp>(loc_, ptr, ptr, data,
                                            llvm::ArrayRef<LLVM::GEPArg>{static_cast<int32_t>(k)});
    builder_.create<LLVM::StoreOp>(loc_, present[k] ? tensors[k].base : null, gep);
  }
  mlir::Value desc_ptr = builder_.create<LLVM::AddressOfOp>(loc_, ptr, desc_name);
  // A constant weight: the runtime prepares it on the first call and keeps it in a slot of this
  // call site (null: no slot).
  mlir::Value slot = null;
  if (has_constant_weight(op, name)) {
    const std::string slot_name = "kiln_prepared_" + std::to_string(num_descs_ - 1);
    prepared_slots_.push_back(slot_name);
    {
      mlir::OpBuilder::InsertionGuard guard(builder_);
      builder_.setInsertionPointToStart(module_.getBody());
      builder_.create<LLVM::GlobalOp>(loc_, builder_.getI64Type(), /*isConstant=*/false,
                                      LLVM::Linkage::Internal, slot_name,
                                      builder_.getI64IntegerAttr(0), /*alignment=*/8);
    }
    slot = builder_.create<LLVM::AddressOfOp>(loc_, ptr, slot_name);
  }
  mlir::func::CallOp call;
  mlir::Type i64 = builder_.getI64Type();
  auto function_pointer = [&](const BlockEpilogueFn& f) {
    auto fn_type = builder_.getFunctionType({ptr, ptr, i64, i64, i64, i64}, {});
    mlir::Value fn = builder_.create<mlir::func::ConstantOp>(loc_, fn_type, f.name);
    return builder_.create<mlir::UnrealizedConversionCastOp>(loc_, ptr, fn).getResult(0);
  };
  if (prologue) {
    // kiln_abi_<op>_prologue(data, desc, slot or null, prologue fn, ctx, epilogue fn or null,
    // ctx or null).
    const std::string entry = ("kiln_abi_" + name + "_prologue").str();
    declare(entry, builder_.getFunctionType({ptr, ptr, ptr, ptr, ptr, ptr, ptr}, {}));
    call = builder_.create<mlir::func::CallOp>(
        loc_, entry, mlir::TypeRange{},
        mlir::ValueRange{data, desc_ptr, slot, function_pointer(*prologue), prologue->ctx,
                         epilogue ? function_pointer(*epilogue) : null,
                         epilogue ? epilogue->ctx : null});
    for (mlir::Value base : prologue->bases) note_use(base, call);
    if (epilogue)
      for (mlir::Value base : epilogue->bases) note_use(base, call);
  } else if (epilogue) {
    // kiln_abi_<op>_epilogue(data, desc, slot or null, fn, ctx).
    mlir::Value fn_ptr = function_pointer(*epilogue);
    const std::string entry = ("kiln_abi_" + name + "_epilogue").str();
    declare(entry, builder_.getFunctionType({ptr, ptr, ptr, ptr, ptr}, {}));
    call = builder_.create<mlir::func::CallOp>(
        loc_, entry, mlir::TypeRange{},
        mlir::ValueRange{data, desc_ptr, slot, fn_ptr, epilogue->ctx});
    for (mlir::Value base : epilogue->bases) note_use(base, call);
  } else if (slot != null) {
    const std::string fn = ("kiln_abi_" + name + "_prepared").str();
    declare(fn, builder_.getFunctionType({ptr, ptr, ptr}, {}));
    call = builder_.create<mlir::func::CallOp>(loc_, fn, mlir::TypeRange{},
                                               mlir::ValueRange{data, desc_ptr, slot});
  } else {
    const std::string fn = ("kiln_abi_" + name).str();
    declare(fn, builder_.getFunctionType({ptr, ptr}, {}));
    call = builder_.create<mlir::func::CallOp>(loc_, fn, mlir::TypeRange{},
                                               mlir::ValueRange{data, desc_ptr});
  }
  for (size_t k = 0; k < tensors.size(); ++k) {
    if (present[k]) note_use(tensors[k].base, call);
  }
  kernel_calls_.push_back(call);
  return true;
}

}  // namespace kiln::codegen::detail
