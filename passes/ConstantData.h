#pragma once
// Reading and writing the data of kiln.constant ops, shared by the folding passes. Internal to
// passes/ (not installed): it names MLIR types.

#include <optional>
#include <vector>

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Value.h"

namespace kiln::passes {

// Constants with at most this many elements are written as inline literals; larger ones (folded
// weights) go to a dense resource blob so the printed module stays small.
inline constexpr int64_t kInlineConstantLimit = 64;

// The elements of `v` if it is the result of a kiln.constant (inline literal or dense resource
// blob) whose element type is f16/bf16/f32/f64 or an integer; nullopt otherwise.
std::optional<std::vector<double>> constant_values(mlir::Value v);

// True if `v` comes from a kiln.constant.
bool is_constant(mlir::Value v);

// A kiln.constant of `type` holding `values` (converted to the element type). Large data is
// copied into a new heap-owned resource blob named after `name_hint`.
mlir::Value make_constant(mlir::OpBuilder& b, mlir::Location loc, mlir::RankedTensorType type,
                          const std::vector<double>& values, llvm::StringRef name_hint);

// A kiln.none (absent optional operand).
mlir::Value make_none(mlir::OpBuilder& b, mlir::Location loc);

}  // namespace kiln::passes
