#pragma once
// What the artifact writer needs to know about values: runtime dtypes of MLIR element types,
// their sizes, and a constant's bytes (internal to codegen/src).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln_generated.h"
#include "mlir/IR/Operation.h"
#include "mlir/IR/Types.h"

namespace kiln::codegen::artifact_values {

// Throws std::runtime_error("kiln save: " + msg).
[[noreturn]] void fail(const std::string& msg);
std::string op_name(mlir::Operation* op);
fb::DType dtype_of(mlir::Type t, const std::string& where);
size_t dtype_bytes(fb::DType d);
inline uint64_t align64(uint64_t x) {
  return (x + 63) & ~uint64_t{63};
}
// Bytes of a kiln.constant: dense resource blobs (frozen weights) or dense literals.
std::vector<uint8_t> constant_bytes(mlir::Operation* op);
// One element's bytes when the kiln.constant is a splat of more than one element (stored as a
// splat weight), else nullopt.
std::optional<std::vector<uint8_t>> splat_element_bytes(mlir::Operation* op);

}  // namespace kiln::codegen::artifact_values
