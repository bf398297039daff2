#include "kiln/codegen/target.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/TargetSelect.h"
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

bool target_available(const std::string& triple, std::string* error) {
  init_targets();
  std::string err;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(triple, err);
  if (!target && error) *error = err;
  return target != nullptr;
}

}  // namespace kiln::codegen
