#include "kiln/trace/module.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"

#include "kiln/ir/KilnDialect.h"

namespace kiln::jit {

std::unique_ptr<mlir::MLIRContext> make_context() {
  mlir::DialectRegistry registry;
  ir::register_dialects(registry);
  auto ctx = std::make_unique<mlir::MLIRContext>(registry);
  ctx->loadAllAvailableDialects();
  return ctx;
}

}  // namespace kiln::jit
