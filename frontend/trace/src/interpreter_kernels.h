#pragma once
// What the reference interpreter's kernel table is made of (interpreter.cpp, and the gradient
// ops' entries in interpreter_gradients.cpp): each kiln op's kernel, keyed by the op's class.

#include <functional>
#include <string>

#include "kiln/nn_ops.h"
#include "kiln/tensor.h"
#include "llvm/ADT/DenseMap.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Operation.h"
#include "types.h"

namespace kiln::jit::interp {

// An op's attributes, read by name (a missing integer or array attribute is an error).
struct Attrs {
  mlir::Operation* op;
  int64_t i(const char* name) const {
    auto a = op->getAttrOfType<mlir::IntegerAttr>(name);
    KILN_CHECK(a, op_name(), "missing integer attribute '", name, "'");
    return a.getInt();
  }
  double f(const char* name, double fallback = 0.0) const {
    auto a = op->getAttrOfType<mlir::FloatAttr>(name);
    return a ? a.getValueAsDouble() : fallback;
  }
  bool b(const char* name) const {
    auto a = op->getAttrOfType<mlir::BoolAttr>(name);
    return a && a.getValue();
  }
  Dims dims(const char* name) const {
    auto a = op->getAttrOfType<mlir::DenseI64ArrayAttr>(name);
    KILN_CHECK(a, op_name(), "missing array attribute '", name, "'");
    return Dims(std::vector<int64_t>(a.asArrayRef().begin(), a.asArrayRef().end()));
  }
  std::string s(const char* name) const {
    auto a = op->getAttrOfType<mlir::StringAttr>(name);
    return a ? a.getValue().str() : std::string();
  }
  Pair2 pair(const char* name) const {
    Dims d = dims(name);
    return Pair2(d[0], d[1]);
  }
  std::string op_name() const { return op->getName().getStringRef().str(); }
};

using Kernel = std::function<TensorList(const TensorList&, const Attrs&, mlir::Operation*)>;
// Keyed by the op's class (its TypeID): dispatch on op identity, never on its name.
using KernelTable = llvm::DenseMap<mlir::TypeID, Kernel>;
template <class Op>
mlir::TypeID id() {
  return mlir::TypeID::get<Op>();
}

// A fresh tensor of result i's type.
inline Tensor result_like(mlir::Operation* op, unsigned i) {
  auto type = mlir::cast<mlir::RankedTensorType>(op->getResult(i).getType());
  return Tensor(
      kiln::empty(Dims(std::vector<int64_t>(type.getShape().begin(), type.getShape().end())),
                  dtype_of_element(type.getElementType())));
}
inline Reduction reduction(const Attrs& a) {
  return static_cast<Reduction>(a.i("reduction"));
}

// The gradient ops a traced training step records (kiln.*_backward).
void add_gradient_kernels(KernelTable& table);

}  // namespace kiln::jit::interp
