#include "kiln/codegen/target.h"

#include "kiln/codegen/lower.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Host.h"

namespace kiln::codegen {
namespace {
void init_targets() {
  static const bool done = [] {
    llvm::InitializeAllTargetInfos();
    llvm::InitializeAllTargets();
    llvm::InitializeAllTargetMCs();
    return true;
  }();
  (void)done;
}
}  // namespace

Target host_target() {
  Target t;
  t.triple = llvm::sys::getProcessTriple();
  t.cpu = llvm::sys::getHostCPUName().str();
  std::string features;
  for (const auto& f : llvm::sys::getHostCPUFeatures()) {
    if (!f.second) continue;
    if (!features.empty()) features += ',';
    features += '+';
    features += f.first().str();
  }
  t.features = std::move(features);
  return t;
}

int vector_register_bits(const llvm::TargetMachine& tm) {
  const llvm::MCSubtargetInfo* sti = tm.getMCSubtargetInfo();
  if (tm.getTargetTriple().isAArch64()) return 128;  // NEON
  // LLVM's own tuning for the CPU: AVX-512 parts it tunes for 256-bit vectors (Intel's, where
  // 512-bit code may lower the clock) get 256 here too, as its loop vectorizer would use.
  if (sti->checkFeatures("+avx512f") && !sti->checkFeatures("+prefer-256-bit")) return 512;
  if (sti->checkFeatures("+avx")) return 256;
  return 128;  // SSE2, the x86-64 baseline
}

bool target_available(const std::string& triple, std::string* error) {
  init_targets();
  std::string err;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(triple, err);
  if (!target && error) *error = err;
  return target != nullptr;
}

}  // namespace kiln::codegen
