// --kiln-freeze and kiln::passes::freeze(): parameters and buffers become constants and eval-mode
// ops fold away.
//
// freeze() turns each @forward argument named (func attr `kiln.arg_names`) in the weight map into
// a kiln.constant whose value is a DenseResourceElementsAttr over an *unmanaged* blob: the
// constant points at the caller's bytes (no copy, no inline literal), so the caller keeps them
// alive and unchanged for the module's lifetime. The pass itself (usable from kiln-opt, where no
// weights exist) performs the eval-mode folds on a module that is already frozen or traced in
// eval mode:
//   * kiln.dropout(x, mask) -> x  (inference never drops; the mask was a training-time sample);
//   * kiln.batch_norm with training = false and running statistics stays a batch_norm, now over
//     constants, which --kiln-fold-batch-norm folds into the preceding conv/linear.

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "mlir/Pass/Pass.h"

#include "kiln/ir/KilnDialect.h"
#include "kiln/passes/Passes.h"

namespace kiln::passes {
namespace {

void fold_eval_mode(mlir::func::FuncOp fn) {
  fn.walk([](ir::DropoutOp op) {
    if (op.getInput().getType() != op.getType()) return;
    op.getResult().replaceAllUsesWith(op.getInput());
    op->erase();
  });
}

// Resource keys are printed bare in `dense_resource<...>`: keep them identifier-like.
std::string resource_key(llvm::StringRef name) {
  std::string key = "kiln_";
  for (char c : name) key += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return key;
}

size_t element_bytes(mlir::Type et) {
  return et.isInteger(1) ? 1 : (et.getIntOrFloatBitWidth() + 7) / 8;
}

struct FreezePass : mlir::PassWrapper<FreezePass, mlir::OperationPass<mlir::func::FuncOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(FreezePass)
  llvm::StringRef getArgument() const override { return "kiln-freeze"; }
  llvm::StringRef getDescription() const override {
    return "Fold eval-mode ops (dropout -> identity); weights are bound by kiln::passes::freeze()";
  }
  void runOnOperation() override { fold_eval_mode(getOperation()); }
};

}  // namespace

std::unique_ptr<mlir::Pass> create_freeze_pass() {
  return std::make_unique<FreezePass>();
}

bool freeze(mlir::ModuleOp module, const WeightMap& weights) {
  auto fn = module.lookupSymbol<mlir::func::FuncOp>("forward");
  if (!fn) {
    module.emitError("kiln freeze: the module has no func.func @forward");
    return false;
  }
  auto names = fn->getAttrOfType<mlir::ArrayAttr>("kiln.arg_names");
  if (!names || names.size() != fn.getNumArguments()) {
    fn.emitError("kiln freeze: @forward needs a kiln.arg_names attribute naming its ")
        << fn.getNumArguments() << " arguments";
    return false;
  }
  mlir::OpBuilder b(fn.getBody());
  b.setInsertionPointToStart(&fn.getBody().front());
  llvm::BitVector erased(fn.getNumArguments());
  llvm::SmallVector<mlir::Attribute> kept_names;
  size_t bound = 0;
  for (unsigned i = 0; i < fn.getNumArguments(); ++i) {
    auto name = mlir::cast<mlir::StringAttr>(names[i]).getValue();
    auto it = weights.find(name.str());
    if (it == weights.end()) {
      kept_names.push_back(names[i]);
      continue;
    }
    auto type = mlir::cast<mlir::RankedTensorType>(fn.getArgument(i).getType());
    const size_t want =
        static_cast<size_t>(type.getNumElements()) * element_bytes(type.getElementType());
    if (it->second.bytes != want) {
      fn.emitError("kiln freeze: weight '")
          << name << "' has " << it->second.bytes << " bytes, argument type " << type << " needs "
          << want;
      return false;
    }
    const size_t align = std::max<size_t>(1, element_bytes(type.getElementType()));
    if (reinterpret_cast<uintptr_t>(it->second.data) % align != 0) {
      fn.emitError("kiln freeze: weight '") << name << "' is not aligned to " << align << " bytes";
      return false;
    }
    auto blob = mlir::UnmanagedAsmResourceBlob::allocateWithAlign(
        llvm::ArrayRef<char>(static_cast<const char*>(it->second.data), want), align);
    auto attr = mlir::DenseResourceElementsAttr::get(type, resource_key(name), std::move(blob));
    auto constant = b.create<ir::ConstantOp>(fn.getLoc(), type, attr);
    fn.getArgument(i).replaceAllUsesWith(constant.getResult());
    erased.set(i);
    ++bound;
  }
  if (bound != weights.size()) {
    for (const auto& [name, ref] : weights) {
      if (!llvm::is_contained(names, mlir::StringAttr::get(module.getContext(), name))) {
        fn.emitError("kiln freeze: no @forward argument is named '") << name << "'";
        return false;
      }
    }
  }
  fn.eraseArguments(erased);
  fn->setAttr("kiln.arg_names", mlir::ArrayAttr::get(module.getContext(), kept_names));
  fold_eval_mode(fn);
  return true;
}

}  // namespace kiln::passes
