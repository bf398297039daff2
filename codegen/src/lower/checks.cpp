// The checks before any code is emitted: every op that cannot be compiled (no strategy takes it,
// a dynamic dimension, an element type code generation lacks, a size int64 cannot count) is named
// at once with its position and location, rather than the first one lowering would stop at.

#include "kiln/ir/KilnDialect.h"
#include "llvm/Support/CheckedArithmetic.h"
#include "lowering.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace kiln::codegen::detail {

bool Lowering::has_lowering(mlir::Operation* op) {
  llvm::StringRef name = op->getName().getStringRef();
  if (is_elementwise(op) || mlir::isa<ir::ConstantOp, ir::NoneOp>(op) || name == "kiln.yield" ||
      view_ops().contains(name))
    return true;
  if (name.consume_front("kiln.")) return has_abi_kernel(name);
  // The glue of kiln::cond / kiln::loop regions (control_flow.cpp) and the entry's return.
  return (op->getDialect() && op->getDialect()->getNamespace() == "arith") ||
         mlir::isa<mlir::scf::IfOp, mlir::scf::ForOp, mlir::scf::YieldOp, mlir::func::ReturnOp>(
             op) ||
         name == "tensor.extract" || name == "tensor.from_elements";
}

// The first element type of op's operands and results that code generation cannot handle, as
// text ("" when every one is fine). uint8 only moves through runtime calls (the int8 ops) and
// constants: the loops' arithmetic is signless.
std::string Lowering::unsupported_element_type(mlir::Operation* op) {
  const bool loops = is_elementwise(op) || mlir::isa_and_nonnull<ir::FusedOp>(op->getParentOp());
  llvm::SmallVector<mlir::Type> types(op->getOperandTypes());
  types.append(op->getResultTypes().begin(), op->getResultTypes().end());
  for (mlir::Type t : types) {
    auto tensor = mlir::dyn_cast<mlir::RankedTensorType>(t);
    if (!tensor) continue;
    mlir::Type e = tensor.getElementType();
    if (dtype_code(e) < 0 || e.isF16() || e.isBF16() || (e.isUnsignedInteger() && loops)) {
      std::string s;
      llvm::raw_string_ostream os(s);
      e.print(os);
      return s;
    }
  }
  return "";
}

void Lowering::check_module(mlir::Block& body) {
  // Tensor sizes come from the IR, which may be a user's file: bound every static shape's
  // outermost stride and byte count before the stride, element and byte arithmetic below.
  auto fits = [](mlir::Type t) {
    auto tensor = mlir::dyn_cast<mlir::RankedTensorType>(t);
    if (!tensor || !tensor.hasStaticShape()) return true;
    std::optional<int64_t> extent = std::max<int64_t>(element_bytes(tensor.getElementType()), 1);
    for (int64_t d : tensor.getShape())
      if (!(extent = llvm::checkedMul(*extent, std::max<int64_t>(d, 1)))) return false;
    return true;
  };
  for (size_t i = 0; i < body.getNumArguments(); ++i) {
    if (!fits(body.getArgument(i).getType()))
      errors_ += "cannot compile @forward: argument " + std::to_string(i) +
                 " has more bytes than int64 can count\n";
  }
  // Every op that cannot be compiled is named at once, with its location, before any code is
  // emitted (lowering stops at the first failure, so later ops would go unreported).
  forward_.walk([&](mlir::Operation* op) {
    if (op == forward_.getOperation()) return;
    for (mlir::Value r : op->getResults()) {
      if (!fits(r.getType())) error(op, "a result has more bytes than int64 can count");
      auto tensor = mlir::dyn_cast<mlir::RankedTensorType>(r.getType());
      if (!tensor) continue;
      for (int64_t d = 0; d < tensor.getRank(); ++d) {
        if (!tensor.isDynamicDim(d)) continue;
        error(op, "result " + std::to_string(mlir::cast<mlir::OpResult>(r).getResultNumber()) +
                      " has a dynamic dimension " + std::to_string(d) +
                      " (code generation needs static shapes)");
        break;
      }
    }
    if (!has_lowering(op)) {
      error(op, "no lowering for this op (neither generated loops nor a runtime kernel)");
    }
    // A kiln.fused's types are its body ops' (reported by name there); terminators pass on
    // values their producers report.
    if (!mlir::isa<ir::FusedOp>(op) && !op->hasTrait<mlir::OpTrait::IsTerminator>()) {
      const std::string type = unsupported_element_type(op);
      if (!type.empty()) error(op, "element type " + type + " is not supported by code generation");
    }
  });
}

}  // namespace kiln::codegen::detail
