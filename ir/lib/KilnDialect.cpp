#include "kiln/ir/KilnDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"

#include "kiln/ir/KilnDialect.cpp.inc"

namespace kiln::ir {

void KilnDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "kiln/ir/KilnOps.cpp.inc"
      >();
}

void register_dialects(mlir::DialectRegistry& registry) {
  registry.insert<KilnDialect, mlir::func::FuncDialect, mlir::arith::ArithDialect,
                  mlir::tensor::TensorDialect, mlir::scf::SCFDialect>();
}

}  // namespace kiln::ir
