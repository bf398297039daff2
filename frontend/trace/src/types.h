#pragma once
// Conversions between kiln dtypes/shapes and MLIR types (shared by the tracer and interpreter).

#include "mlir/IR/BuiltinTypes.h"

#include "kiln/runtime/dtype.h"
#include "kiln/runtime/error.h"
#include "kiln/runtime/small_vector.h"

namespace kiln::jit {

inline mlir::Type element_type(mlir::MLIRContext* ctx, DType t) {
  mlir::Builder b(ctx);
  switch (t) {
    case DType::Float32:
      return b.getF32Type();
    case DType::Float64:
      return b.getF64Type();
    case DType::Float16:
      return b.getF16Type();
    case DType::BFloat16:
      return b.getBF16Type();
    case DType::Int8:
      return b.getIntegerType(8);
    case DType::UInt8:
      return b.getIntegerType(8, /*isSigned=*/false);
    case DType::Int32:
      return b.getI32Type();
    case DType::Int64:
      return b.getI64Type();
    case DType::Bool:
      return b.getI1Type();
  }
  return b.getF32Type();
}

inline DType dtype_of_element(mlir::Type t) {
  if (t.isF32()) return DType::Float32;
  if (t.isF64()) return DType::Float64;
  if (t.isF16()) return DType::Float16;
  if (t.isBF16()) return DType::BFloat16;
  if (t.isInteger(1)) return DType::Bool;
  if (t.isUnsignedInteger(8)) return DType::UInt8;
  if (t.isInteger(8)) return DType::Int8;
  if (t.isInteger(32)) return DType::Int32;
  if (t.isInteger(64)) return DType::Int64;
  fail("kiln IR", "unsupported element type");
}

inline mlir::RankedTensorType tensor_type(mlir::MLIRContext* ctx, const Dims& sizes, DType t) {
  return mlir::RankedTensorType::get(llvm::ArrayRef<int64_t>(sizes.data(), sizes.size()),
                                     element_type(ctx, t));
}

}  // namespace kiln::jit
