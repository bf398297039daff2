// Target resolution, TargetMachine creation and object emission for AOT compiles. Only the X86
// and AArch64 back ends are initialized: the two targets kiln ships code for (Debian's libLLVM-19
// builds both), and initializing all of them costs start-up time for nothing.

#include <string>

#include "kiln/codegen/aot.h"
#include "kiln/codegen/lower.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/CodeGen.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Triple.h"

namespace kiln::codegen {
namespace {

void init_aot_targets() {
  static const bool done = [] {
    LLVMInitializeX86TargetInfo();
    LLVMInitializeX86Target();
    LLVMInitializeX86TargetMC();
    LLVMInitializeX86AsmPrinter();
    LLVMInitializeAArch64TargetInfo();
    LLVMInitializeAArch64Target();
    LLVMInitializeAArch64TargetMC();
    LLVMInitializeAArch64AsmPrinter();
    return true;
  }();
  (void)done;
}

llvm::CodeGenOptLevel codegen_level(int opt_level) {
  switch (opt_level) {
    case 0:
      return llvm::CodeGenOptLevel::None;
    case 1:
      return llvm::CodeGenOptLevel::Less;
    case 2:
      return llvm::CodeGenOptLevel::Default;
    default:
      return llvm::CodeGenOptLevel::Aggressive;
  }
}

}  // namespace

EmitKind parse_emit_kind(const std::string& text) {
  if (text == "obj") return EmitKind::Object;
  if (text == "so") return EmitKind::SharedLibrary;
  if (text == "exe") return EmitKind::Executable;
  throw AotError("--emit: expected obj, so or exe, got '" + text + "'");
}

bool is_aarch64(const Target& target) {
  return llvm::Triple(target.triple).isAArch64();
}

Target resolve_target(const std::string& spec, const std::string& cpu,
                      const std::string& features) {
  init_aot_targets();
  Target t;
  if (spec.empty() || spec == "host") {
    t = host_target();
  } else {
    t.triple = llvm::Triple::normalize(spec);
    t.cpu = "generic";
  }
  if (!cpu.empty()) t.cpu = cpu;
  if (!features.empty()) t.features = features;
  const llvm::Triple triple(t.triple);
  if (!triple.isX86() && !triple.isAArch64())
    throw AotError("--target: '" + spec + "' (" + t.triple +
                   ") is not supported; kiln generates code for x86_64 and aarch64 only");
  std::string err;
  if (!llvm::TargetRegistry::lookupTarget(t.triple, err))
    throw AotError("--target: LLVM cannot generate code for '" + t.triple + "': " + err);
  return t;
}

std::string checked_cpu_features(const llvm::TargetMachine& tm) {
  // The features kiln::rt::has_feature knows, as LLVM spells them.
  static const char* const kX86[] = {"sse4.2",     "avx",      "fma",      "f16c",     "avx2",
                                     "avx512f",    "avx512dq", "avx512bw", "avx512vl", "avx512vnni",
                                     "avx512bf16", "avxvnni",  "amx-tile", "amx-int8", "amx-bf16"};
  static const char* const kArm[] = {"neon", "dotprod", "i8mm"};
  const llvm::MCSubtargetInfo* sti = tm.getMCSubtargetInfo();
  const bool arm = tm.getTargetTriple().isAArch64();
  std::string out;
  for (const char* f : arm ? llvm::ArrayRef<const char*>(kArm) : llvm::ArrayRef<const char*>(kX86))
    if (sti->checkFeatures(std::string("+") + f)) out += (out.empty() ? "" : ",") + std::string(f);
  return out;
}

std::unique_ptr<llvm::TargetMachine> create_target_machine(const Target& target, int opt_level) {
  init_aot_targets();
  std::string err;
  const llvm::Target* t = llvm::TargetRegistry::lookupTarget(target.triple, err);
  if (!t) throw AotError("target '" + target.triple + "': " + err);
  llvm::TargetOptions options;
  std::unique_ptr<llvm::TargetMachine> tm(t->createTargetMachine(
      target.triple, target.cpu.empty() ? "generic" : target.cpu, target.features, options,
      llvm::Reloc::PIC_, std::nullopt, codegen_level(opt_level)));
  if (!tm)
    throw AotError("target '" + target.triple + "': cannot create a target machine for CPU '" +
                   target.cpu + "'");
  return tm;
}

std::string emit_object(llvm::Module& module, llvm::TargetMachine& tm, int opt_level) {
  module.setTargetTriple(tm.getTargetTriple().str());
  module.setDataLayout(tm.createDataLayout());
  if (opt_level > 0) optimize_llvm_module(module, tm, opt_level);  // the JIT's O-level pipeline
  llvm::SmallVector<char, 0> buffer;
  llvm::raw_svector_ostream os(buffer);
  llvm::legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::ObjectFile))
    throw AotError("target '" + tm.getTargetTriple().str() + "' cannot emit object files");
  pm.run(module);
  return std::string(buffer.data(), buffer.size());
}

}  // namespace kiln::codegen
