// The lowering for AOT objects: lower.h's steps (kiln → LLVM dialect → LLVM IR → O3), with one
// difference from the JIT's compile_to_object: every definition except the entry point is made
// internal (after optimizing). An AOT object is linked with other code (the runtime, the
// embedding program, other models' objects), so its helper functions (kiln_kernel_N, ...) must
// not be global symbols that collide.

#include "kiln/codegen/aot.h"
#include "kiln/codegen/lower.h"
#include "llvm/IR/GlobalVariable.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Target/TargetMachine.h"
#include "mlir/IR/BuiltinOps.h"

namespace kiln::codegen {

std::string lower_to_object(mlir::ModuleOp module, const Target& target,
                            const LowerOptions& options, int opt_level, EntrySignature* signature) {
  std::string error;
  auto tm = create_target_machine(target, opt_level);
  LowerOptions lower = options;
  if (lower.vector_bits == 0) lower.vector_bits = vector_register_bits(*tm);
  if (!lower_to_llvm_dialect(module, lower, &error, signature)) throw AotError(error);
  llvm::LLVMContext ctx;
  std::unique_ptr<llvm::Module> ir = translate_to_llvm_ir(module, ctx, &error);
  if (!ir) throw AotError(error);
  optimize_llvm_module(*ir, *tm, opt_level);
  // After O3, so the optimized code is exactly the JIT's (internalizing first lets the inliner
  // fold every loop-nest function into the entry: 25x the optimization time on a transformer).
  for (llvm::Function& f : *ir)
    if (!f.isDeclaration() && f.getName() != options.entry_name)
      f.setLinkage(llvm::GlobalValue::InternalLinkage);
  for (llvm::GlobalVariable& g : ir->globals())
    if (!g.isDeclaration()) g.setLinkage(llvm::GlobalValue::InternalLinkage);
  return emit_object(*ir, *tm, /*opt_level=*/0);  // already optimized
}

}  // namespace kiln::codegen
