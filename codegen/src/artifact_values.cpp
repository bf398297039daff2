// Values as the artifact stores them (see artifact_values.h).

#include "artifact_values.h"

#include <cstring>
#include <optional>
#include <stdexcept>

#include "llvm/Support/raw_ostream.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/DialectResourceBlobManager.h"

namespace kiln::codegen::artifact_values {

void fail(const std::string& msg) {
  throw std::runtime_error("kiln save: " + msg);
}

std::string op_name(mlir::Operation* op) {
  return op->getName().getStringRef().str();
}

fb::DType dtype_of(mlir::Type t, const std::string& where) {
  if (t.isF32()) return fb::DType::Float32;
  if (t.isF64()) return fb::DType::Float64;
  if (t.isF16()) return fb::DType::Float16;
  if (t.isBF16()) return fb::DType::BFloat16;
  if (t.isInteger(1)) return fb::DType::Bool;
  if (t.isUnsignedInteger(8)) return fb::DType::UInt8;
  if (t.isInteger(8)) return fb::DType::Int8;
  if (t.isInteger(32)) return fb::DType::Int32;
  if (t.isInteger(64)) return fb::DType::Int64;
  std::string s;
  llvm::raw_string_ostream os(s);
  os << t;
  fail(where + ": element type " + s + " has no runtime dtype");
}

size_t dtype_bytes(fb::DType d) {
  switch (d) {
    case fb::DType::Float64:
    case fb::DType::Int64:
      return 8;
    case fb::DType::Float32:
    case fb::DType::Int32:
      return 4;
    case fb::DType::Float16:
    case fb::DType::BFloat16:
      return 2;
    default:
      return 1;
  }
}

std::optional<std::vector<uint8_t>> splat_element_bytes(mlir::Operation* op) {
  auto dense = mlir::dyn_cast<mlir::DenseElementsAttr>(op->getAttr("value"));
  auto type = mlir::cast<mlir::RankedTensorType>(op->getResult(0).getType());
  if (!dense || !dense.isSplat() || type.getNumElements() <= 1) return std::nullopt;
  const fb::DType dt = dtype_of(type.getElementType(), op_name(op));
  if (dt == fb::DType::Bool)
    return std::vector<uint8_t>{dense.getSplatValue<bool>() ? uint8_t{1} : uint8_t{0}};
  llvm::ArrayRef<char> raw = dense.getRawData();
  const size_t eb = dtype_bytes(dt);
  if (raw.size() < eb) fail("kiln.constant: unexpected raw data size");
  return std::vector<uint8_t>(raw.begin(), raw.begin() + static_cast<std::ptrdiff_t>(eb));
}

std::vector<uint8_t> constant_bytes(mlir::Operation* op) {
  mlir::Attribute attr = op->getAttr("value");
  auto type = mlir::cast<mlir::RankedTensorType>(op->getResult(0).getType());
  const fb::DType dt = dtype_of(type.getElementType(), op_name(op));
  const size_t n = static_cast<size_t>(type.getNumElements()), eb = dtype_bytes(dt);
  std::vector<uint8_t> out(n * eb);
  if (auto res = mlir::dyn_cast<mlir::DenseResourceElementsAttr>(attr)) {
    mlir::AsmResourceBlob* blob = res.getRawHandle().getBlob();
    if (!blob)
      fail("kiln.constant: dense resource '" + res.getRawHandle().getKey().str() + "' has no data");
    llvm::ArrayRef<char> data = blob->getData();
    if (data.size() != out.size()) {
      fail("kiln.constant: resource of " + std::to_string(data.size()) + " bytes for a " +
           std::to_string(out.size()) + "-byte tensor");
    }
    std::memcpy(out.data(), data.data(), data.size());
    return out;
  }
  auto dense = mlir::dyn_cast<mlir::DenseElementsAttr>(attr);
  if (!dense) fail("kiln.constant: unsupported value attribute");
  if (dt == fb::DType::Bool) {  // i1 is bit-packed in the attribute's raw data
    size_t i = 0;
    for (bool b : dense.getValues<bool>()) out[i++] = b ? 1 : 0;
    if (dense.isSplat()) std::fill(out.begin(), out.end(), out.empty() ? 0 : out[0]);
    return out;
  }
  llvm::ArrayRef<char> raw = dense.getRawData();
  if (dense.isSplat()) {
    for (size_t i = 0; i < n; ++i) std::memcpy(out.data() + i * eb, raw.data(), eb);
  } else {
    if (raw.size() != out.size()) fail("kiln.constant: unexpected raw data size");
    std::memcpy(out.data(), raw.data(), raw.size());
  }
  return out;
}

}  // namespace kiln::codegen::artifact_values
