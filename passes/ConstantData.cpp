// Constant data access for the folding passes: literals (DenseElementsAttr) and dense resource
// blobs (weights frozen by reference, or folded weights owned by the module) read alike.

#include "ConstantData.h"

#include <cstring>

#include "mlir/IR/AsmState.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectResourceBlobManager.h"

#include "kiln/ir/KilnDialect.h"

namespace kiln::passes {
namespace {

template <typename T>
void append_raw(llvm::ArrayRef<char> raw, int64_t n, std::vector<double>& out) {
  out.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    T x;
    std::memcpy(&x, raw.data() + i * sizeof(T), sizeof(T));
    out[i] = static_cast<double>(x);
  }
}

std::optional<std::vector<double>> from_blob(mlir::DenseResourceElementsAttr attr) {
  mlir::AsmResourceBlob* blob = attr.getRawHandle().getBlob();
  if (!blob) return std::nullopt;
  llvm::ArrayRef<char> raw = blob->getData();
  auto type = attr.getType();
  const int64_t n = type.getNumElements();
  mlir::Type et = type.getElementType();
  std::vector<double> out;
  const int64_t bytes = et.isInteger(1) ? 1 : (et.getIntOrFloatBitWidth() + 7) / 8;
  if (static_cast<int64_t>(raw.size()) < n * bytes) return std::nullopt;
  if (et.isF32()) {
    append_raw<float>(raw, n, out);
  } else if (et.isF64()) {
    append_raw<double>(raw, n, out);
  } else if (et.isInteger(64)) {
    append_raw<int64_t>(raw, n, out);
  } else if (et.isInteger(32)) {
    append_raw<int32_t>(raw, n, out);
  } else if (et.isUnsignedInteger(8) || et.isInteger(1)) {
    append_raw<uint8_t>(raw, n, out);
  } else if (et.isInteger(8)) {
    append_raw<int8_t>(raw, n, out);
  } else {
    return std::nullopt;
  }
  return out;
}

std::optional<std::vector<double>> from_literal(mlir::DenseElementsAttr attr) {
  const int64_t n = attr.getNumElements();
  std::vector<double> out;
  out.reserve(n);
  mlir::Type et = attr.getElementType();
  if (mlir::isa<mlir::FloatType>(et)) {
    for (const llvm::APFloat& f : attr.getValues<llvm::APFloat>()) {
      llvm::APFloat d = f;
      bool lost;
      d.convert(llvm::APFloat::IEEEdouble(), llvm::APFloat::rmNearestTiesToEven, &lost);
      out.push_back(d.convertToDouble());
    }
  } else if (mlir::isa<mlir::IntegerType>(et)) {
    const bool is_unsigned = et.isInteger(1) || et.isUnsignedInteger();
    for (const llvm::APInt& x : attr.getValues<llvm::APInt>()) {
      out.push_back(is_unsigned ? static_cast<double>(x.getZExtValue())
                                : static_cast<double>(x.getSExtValue()));
    }
  } else {
    return std::nullopt;
  }
  return out;
}

}  // namespace

bool is_constant(mlir::Value v) {
  return mlir::isa_and_nonnull<ir::ConstantOp>(v.getDefiningOp());
}

std::optional<std::vector<double>> constant_values(mlir::Value v) {
  auto op = mlir::dyn_cast_or_null<ir::ConstantOp>(v.getDefiningOp());
  if (!op) return std::nullopt;
  mlir::Attribute value = op.getValue();
  if (auto dense = mlir::dyn_cast<mlir::DenseElementsAttr>(value)) return from_literal(dense);
  if (auto resource = mlir::dyn_cast<mlir::DenseResourceElementsAttr>(value))
    return from_blob(resource);
  return std::nullopt;
}

mlir::Value make_constant(mlir::OpBuilder& b, mlir::Location loc, mlir::RankedTensorType type,
                          const std::vector<double>& values, llvm::StringRef name_hint) {
  mlir::Type et = type.getElementType();
  mlir::ElementsAttr attr;
  const int64_t n = type.getNumElements();
  if (n > kInlineConstantLimit && (et.isF32() || et.isF64())) {
    mlir::AsmResourceBlob blob;
    if (et.isF32()) {
      std::vector<float> f(values.begin(), values.end());
      blob = mlir::HeapAsmResourceBlob::allocateAndCopyInferAlign<float>(f);
    } else {
      blob = mlir::HeapAsmResourceBlob::allocateAndCopyInferAlign<double>(values);
    }
    attr = mlir::DenseResourceElementsAttr::get(type, name_hint, std::move(blob));
  } else if (auto ft = mlir::dyn_cast<mlir::FloatType>(et)) {
    std::vector<llvm::APFloat> f;
    f.reserve(n);
    for (double x : values) {
      llvm::APFloat a(x);
      bool lost;
      a.convert(ft.getFloatSemantics(), llvm::APFloat::rmNearestTiesToEven, &lost);
      f.push_back(a);
    }
    attr = mlir::DenseElementsAttr::get(type, f);
  } else {
    std::vector<llvm::APInt> ints;
    ints.reserve(n);
    const unsigned width = et.getIntOrFloatBitWidth();
    for (double x : values) {
      ints.emplace_back(width, static_cast<uint64_t>(static_cast<int64_t>(x)), !et.isInteger(1));
    }
    attr = mlir::DenseElementsAttr::get(type, ints);
  }
  return b.create<ir::ConstantOp>(loc, type, attr).getResult();
}

mlir::Value make_none(mlir::OpBuilder& b, mlir::Location loc) {
  return b.create<ir::NoneOp>(loc, b.getNoneType()).getResult();
}

}  // namespace kiln::passes
