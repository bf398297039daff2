// kiln-opt: parse, verify, transform and print kiln modules (mlir-opt with only kiln's dialects
// and passes registered, so it starts fast and links small).

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

#include "kiln/codegen/lower.h"
#include "kiln/ir/KilnDialect.h"
#include "kiln/passes/Passes.h"

int main(int argc, char** argv) {
  mlir::DialectRegistry registry;
  kiln::ir::register_dialects(registry);
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  kiln::passes::register_passes();
  kiln::codegen::register_lowering_dialects(registry);
  kiln::codegen::register_lowering_passes();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "kiln-opt: kiln's MLIR optimizer driver\n", registry));
}
