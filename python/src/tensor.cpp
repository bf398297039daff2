// kiln.Tensor and the zero-copy bridges: NumPy (buffer protocol, ndarray base objects) and
// DLPack (python/src/dlpack.h). Memory that belongs to Python is released with the GIL held.

#include "tensor.h"

#include <pybind11/stl.h>

#include <memory>
#include <sstream>
#include <vector>

#include "dlpack.h"
#include "kiln/runtime/error.h"

namespace kiln::python {
namespace {

// Runs `release` with the GIL (a Python object may be freed), or not at all once the
// interpreter is gone.
std::function<void(void*)> gil_deleter(std::function<void()> release) {
  return [release = std::move(release)](void*) {
    if (!Py_IsInitialized()) return;
    py::gil_scoped_acquire gil;
    release();
  };
}

// A tensor over `data` with the given geometry whose storage runs `deleter` when freed.
TensorImplPtr wrap(void* data, std::span<const int64_t> sizes, std::span<const int64_t> strides,
                   DType dtype, std::function<void(void*)> deleter) {
  TensorImplPtr view = from_blob(data, sizes, dtype, strides);  // checks the geometry
  auto storage = make_intrusive<Storage>(data, view->storage()->nbytes(), std::move(deleter));
  return make_intrusive<TensorImpl>(std::move(storage), view->sizes(), view->strides(), 0, dtype);
}

std::string describe(const TensorImplPtr& t) {
  std::ostringstream os;
  os << "kiln.Tensor(dtype=" << dtype_name(t->dtype()) << ", shape=" << t->sizes() << ")";
  return os.str();
}

dlpack::DataType dl_type(DType t) {
  const uint8_t bits = static_cast<uint8_t>(dtype_size(t) * 8);
  switch (t) {
    case DType::Float32:
    case DType::Float64:
    case DType::Float16:
      return {dlpack::kFloat, bits, 1};
    case DType::BFloat16:
      return {dlpack::kBfloat, bits, 1};
    case DType::Int8:
    case DType::Int32:
    case DType::Int64:
      return {dlpack::kInt, bits, 1};
    case DType::UInt8:
      return {dlpack::kUInt, bits, 1};
    case DType::Bool:
      return {dlpack::kBool, 8, 1};
  }
  throw py::value_error("unknown dtype");
}

DType kiln_type(dlpack::DataType d) {
  if (d.lanes == 1) {
    for (DType t : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int8,
                    DType::UInt8, DType::Int32, DType::Int64, DType::Bool}) {
      const dlpack::DataType k = dl_type(t);
      if (k.code == d.code && k.bits == d.bits) return t;
    }
  }
  throw py::value_error("from_dlpack: no kiln dtype for DLPack type code " +
                        std::to_string(d.code) + ", " + std::to_string(d.bits) + " bits, " +
                        std::to_string(d.lanes) + " lanes");
}

// What a DLPack capsule we export owns: the tensor and the shape/strides arrays it points to.
struct Export {
  dlpack::ManagedTensor managed{};
  TensorImplPtr tensor;
  std::vector<int64_t> shape, strides;
};

}  // namespace

py::dtype numpy_dtype(DType t) {
  switch (t) {
    case DType::Float32:
      return py::dtype::of<float>();
    case DType::Float64:
      return py::dtype::of<double>();
    case DType::Float16:
      return py::dtype("float16");
    case DType::Int8:
      return py::dtype::of<int8_t>();
    case DType::UInt8:
      return py::dtype::of<uint8_t>();
    case DType::Int32:
      return py::dtype::of<int32_t>();
    case DType::Int64:
      return py::dtype::of<int64_t>();
    case DType::Bool:
      return py::dtype::of<bool>();
    case DType::BFloat16:
      break;
  }
  throw py::value_error("NumPy has no bfloat16: exchange bfloat16 tensors through DLPack");
}

DType dtype_of(const py::dtype& d, const std::string& what) {
  const char kind = d.kind();
  const auto size = d.itemsize();
  if (kind == 'f' && size == 4) return DType::Float32;
  if (kind == 'f' && size == 8) return DType::Float64;
  if (kind == 'f' && size == 2) return DType::Float16;
  if (kind == 'i' && size == 1) return DType::Int8;
  if (kind == 'u' && size == 1) return DType::UInt8;
  if (kind == 'i' && size == 4) return DType::Int32;
  if (kind == 'i' && size == 8) return DType::Int64;
  if (kind == 'b' && size == 1) return DType::Bool;
  throw py::value_error(what + ": no kiln dtype for NumPy dtype " +
                        py::str(static_cast<const py::object&>(d)).cast<std::string>());
}

TensorImplPtr borrow_array(const py::array& a, const std::string& what, bool keep_alive) {
  const DType dtype = dtype_of(a.dtype(), what);
  std::vector<int64_t> sizes(a.shape(), a.shape() + a.ndim()), strides;
  for (py::ssize_t i = 0; i < a.ndim(); ++i) {
    const py::ssize_t s = a.strides(i);
    if (s < 0 || s % a.itemsize() != 0)
      throw py::value_error(what +
                            ": arrays with negative or unaligned strides cannot be "
                            "shared; pass numpy.ascontiguousarray(a)");
    strides.push_back(s / a.itemsize());
  }
  void* data = const_cast<void*>(a.data());
  if (!keep_alive) return from_blob(data, sizes, dtype, strides);
  auto* owner = new py::object(a);  // released with the storage
  return wrap(data, sizes, strides, dtype, gil_deleter([owner] { delete owner; }));
}

py::array to_numpy(const TensorImplPtr& t) {
  std::vector<py::ssize_t> shape(t->sizes().begin(), t->sizes().end()), strides;
  for (int64_t s : t->strides()) strides.push_back(s * static_cast<py::ssize_t>(t->itemsize()));
  auto* keep = new TensorImplPtr(t);
  py::capsule base(keep, [](void* p) { delete static_cast<TensorImplPtr*>(p); });
  return py::array(numpy_dtype(t->dtype()), shape, strides, t->data(), base);
}

py::capsule to_dlpack(const TensorImplPtr& t) {
  auto e = std::make_unique<Export>();
  e->tensor = t;
  e->shape.assign(t->sizes().begin(), t->sizes().end());
  e->strides.assign(t->strides().begin(), t->strides().end());
  dlpack::Tensor& dl = e->managed.dl_tensor;
  dl.data = t->data();
  dl.device = {dlpack::kCPU, 0};
  dl.ndim = static_cast<int32_t>(t->dim());
  dl.dtype = dl_type(t->dtype());
  dl.shape = e->shape.data();
  dl.strides = e->strides.data();
  dl.byte_offset = 0;
  e->managed.manager_ctx = e.get();
  e->managed.deleter = [](dlpack::ManagedTensor* m) {
    delete static_cast<Export*>(m->manager_ctx);
  };
  dlpack::ManagedTensor* managed = &e.release()->managed;
  // A capsule nobody consumed frees the export; a consumer renames it "used_dltensor" and calls
  // the deleter itself.
  return py::capsule(managed, "dltensor", [](PyObject* cap) {
    if (PyCapsule_IsValid(cap, "dltensor")) {
      auto* m = static_cast<dlpack::ManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
      m->deleter(m);
    }
  });
}

TensorImplPtr from_dlpack(py::object obj) {
  if (py::hasattr(obj, "__dlpack__")) obj = obj.attr("__dlpack__")();
  PyObject* cap = obj.ptr();
  if (!PyCapsule_IsValid(cap, "dltensor"))
    throw py::value_error(
        "from_dlpack: expected an object with __dlpack__ or an unused "
        "\"dltensor\" capsule");
  auto* m = static_cast<dlpack::ManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
  const dlpack::Tensor& dl = m->dl_tensor;
  if (dl.device.device_type != dlpack::kCPU)
    throw py::value_error("from_dlpack: kiln.Tensor is CPU memory; got DLPack device type " +
                          std::to_string(dl.device.device_type) + " (copy it to the CPU first)");
  const DType dtype = kiln_type(dl.dtype);
  std::vector<int64_t> sizes(dl.shape, dl.shape + dl.ndim), strides;
  if (dl.strides) strides.assign(dl.strides, dl.strides + dl.ndim);
  void* data = static_cast<char*>(dl.data) + dl.byte_offset;
  // Take ownership only once the tensor exists (a refused one stays the producer's).
  TensorImplPtr t = wrap(data, sizes, strides, dtype, gil_deleter([m] {
                           if (m->deleter) m->deleter(m);
                         }));
  PyCapsule_SetName(cap, "used_dltensor");
  return t;
}

void bind_tensor(py::module_& m) {
  py::class_<Tensor>(m, "Tensor",
                     "A CPU tensor of the kiln runtime that shares memory with NumPy arrays and "
                     "DLPack producers/consumers (PyTorch).")
      .def(py::init([](const py::array& a) { return Tensor{borrow_array(a, "Tensor", true)}; }),
           py::arg("array"), "A view of a NumPy array's memory (no copy; keeps it alive).")
      .def_property_readonly("shape",
                             [](const Tensor& t) {
                               return py::tuple(py::cast(std::vector<int64_t>(
                                   t.impl->sizes().begin(), t.impl->sizes().end())));
                             })
      .def_property_readonly(
          "dtype", [](const Tensor& t) { return std::string(dtype_name(t.impl->dtype())); })
      .def(
          "numpy", [](const Tensor& t) { return to_numpy(t.impl); },
          "An ndarray over the same memory (no copy).")
      .def(
          "__array__", [](const Tensor& t, py::object) { return to_numpy(t.impl); },
          py::arg("dtype") = py::none())
      .def(
          "__dlpack__", [](const Tensor& t, py::object) { return to_dlpack(t.impl); },
          py::arg("stream") = py::none())
      .def("__dlpack_device__",
           [](const Tensor&) { return py::make_tuple(static_cast<int>(dlpack::kCPU), 0); })
      .def("__repr__", [](const Tensor& t) { return describe(t.impl); });
  m.def(
      "from_numpy", [](const py::array& a) { return Tensor{borrow_array(a, "from_numpy", true)}; },
      py::arg("array"), "A kiln.Tensor over the array's memory (no copy).");
  m.def(
      "from_dlpack", [](py::object o) { return Tensor{from_dlpack(std::move(o))}; }, py::arg("obj"),
      "A kiln.Tensor over a DLPack producer's memory (a torch.Tensor, an object with "
      "__dlpack__, or a \"dltensor\" capsule); no copy.");
  m.def(
      "to_dlpack", [](const Tensor& t) { return to_dlpack(t.impl); }, py::arg("tensor"),
      "The legacy \"dltensor\" PyCapsule (torch.utils.dlpack.from_dlpack reads it).");
}

}  // namespace kiln::python
