#pragma once
// kiln.Tensor (a runtime tensor), its zero-copy exchange with NumPy arrays and DLPack capsules,
// and the dtype names shared with kiln.Model.

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>

#include "kiln/runtime/tensor.h"

namespace kiln::python {

namespace py = pybind11;

// kiln.Tensor: shares its memory with whatever it came from or goes to.
struct Tensor {
  TensorImplPtr impl;
};

// NumPy's dtype for `t` (ValueError for bfloat16, which NumPy lacks: use DLPack).
py::dtype numpy_dtype(DType t);
// The kiln dtype of a NumPy dtype, or ValueError naming `what`.
DType dtype_of(const py::dtype& d, const std::string& what);
// A view of the array's memory (no copy); `owner`, when given, is kept alive by the tensor.
// Arrays with negative or unaligned strides are refused (ValueError naming `what`).
TensorImplPtr borrow_array(const py::array& a, const std::string& what, bool keep_alive);
// An ndarray over the tensor's memory (no copy); the array keeps the tensor alive.
py::array to_numpy(const TensorImplPtr& t);
// The PyCapsule "dltensor" exporting `t`, and the tensor a DLPack producer hands over.
py::capsule to_dlpack(const TensorImplPtr& t);
TensorImplPtr from_dlpack(py::object obj);

void bind_tensor(py::module_& m);

}  // namespace kiln::python
