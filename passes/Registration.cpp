#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassRegistry.h"

#include "kiln/passes/Passes.h"

namespace kiln::passes {

void register_passes() {
  mlir::registerPass([] { return create_cleanup_pass(); });
  mlir::registerPass([] { return create_plan_memory_pass(); });
}

}  // namespace kiln::passes
