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

namespace kiln::ir {
// Whether inferred result types match declared ones: equal element types, equal shapes where a
// dynamic (?) dim on either side matches any size. The ops that infer their result types
// (InferTypeOpInterface) compare with it.
bool compatible_result_types(mlir::TypeRange inferred, mlir::TypeRange declared);
}  // namespace kiln::ir

#define GET_OP_CLASSES
#include "kiln/ir/KilnOps.h.inc"

namespace kiln::ir {
// A unit attribute on a kiln.fused: its chain runs as the epilogue of the conv2d / linear that
// computes its one float32 operand of the result's type, on each block of the output the GEMM
// finishes (passes/FuseBlockEpilogues.cpp decides; codegen emits it, the portable plan ignores it).
inline constexpr const char* kBlockEpilogueAttr = "kiln.block_epilogue";
// A unit attribute on a kiln.fused: its one float32 result is only the input of the linear (or
// matmul by a matrix) right after it, which computes it block by block just before reading each
// block of rows (passes/FuseBlockPrologues.cpp decides; codegen emits it; the training pipeline,
// which the JIT and AOT compilers run, marks it, the inference pipeline for artifacts does not).
inline constexpr const char* kBlockPrologueAttr = "kiln.block_prologue";

// Registers kiln plus the upstream dialects kiln modules use (func, arith, tensor, scf).
void register_dialects(mlir::DialectRegistry& registry);
}  // namespace kiln::ir
