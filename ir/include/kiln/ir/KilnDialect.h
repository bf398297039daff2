#pragma once
// The kiln MLIR dialect. Include only from ir/, passes/, codegen/, frontend/trace and tools/.

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "kiln/ir/KilnDialect.h.inc"

namespace kiln::ir::traits {
// Kiln_ScalarLoop (KilnDialect.td): codegen has a scalar formula for the op and emits it as loops.
template <typename ConcreteType>
class ScalarLoop : public mlir::OpTrait::TraitBase<ConcreteType, ScalarLoop> {};
}  // namespace kiln::ir::traits

// The schema's enums (ir/ops.toml [enum.*]): kiln::ir::Reduction, Activation, InterpolateMode,
// PadMode, DType, with symbolize<Enum> / stringify<Enum>.
#include "kiln/ir/KilnEnums.h.inc"

#define GET_OP_CLASSES
#include "kiln/ir/KilnOps.h.inc"

namespace kiln::ir {
// Registers kiln plus the upstream dialects kiln modules use (func, arith, tensor, scf).
void register_dialects(mlir::DialectRegistry& registry);
}  // namespace kiln::ir
