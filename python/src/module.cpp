// The `kiln` Python module: run .kiln artifacts from Python on the C++ runtime.
//
//   import kiln, numpy as np
//   m = kiln.load("lenet.kiln")
//   s = m.session()                       # one per thread; the weights are shared
//   out = s.run({"x": np.zeros((1, 1, 28, 28), np.float32)})   # {"logits": ndarray}
//
// Inputs are read in place (no copy into Python-side buffers; the runtime's guard checks them),
// outputs come back as ndarrays over the runtime's result tensors, and the GIL is released while
// a session runs, so sessions on several threads run in parallel.

#include <pybind11/stl.h>

#include <mutex>
#include <sstream>

#include "kiln/runtime/error.h"
#include "kiln/runtime/model.h"
#include "tensor.h"

namespace kiln::python {
namespace {

std::string spec_str(const rt::TensorSpec& s) {
  std::ostringstream os;
  os << dtype_name(s.dtype) << " " << s.shape;
  return os.str();
}

std::string names_of(const std::vector<rt::TensorSpec>& specs) {
  std::string out;
  for (const auto& s : specs) out += (out.empty() ? "" : ", ") + ("'" + s.name + "'");
  return out;
}

py::list specs_of(const std::vector<rt::TensorSpec>& specs) {
  py::list out;
  for (const auto& s : specs)
    out.append(
        py::make_tuple(s.name, std::string(dtype_name(s.dtype)),
                       py::tuple(py::cast(std::vector<int64_t>(s.shape.begin(), s.shape.end())))));
  return out;
}

struct Model {
  std::shared_ptr<const rt::Model> model;
};

class Session {
 public:
  explicit Session(std::shared_ptr<const rt::Model> model)
      : model_(model), session_(std::make_unique<rt::Session>(std::move(model))) {}

  // inputs: {name: array or kiln.Tensor}, a list/tuple in the model's order, or one array.
  py::dict run(py::object inputs) {
    const auto& specs = model_->inputs();
    std::vector<py::object> given(specs.size());
    if (py::isinstance<py::dict>(inputs)) {
      for (auto [key, value] : inputs.cast<py::dict>()) {
        const std::string name = py::str(key);
        const int i = model_->input_index(name);
        if (i < 0)
          throw py::value_error("run: the model has no input '" + name + "'; its inputs are " +
                                names_of(specs));
        given[i] = py::reinterpret_borrow<py::object>(value);
      }
    } else if (py::isinstance<py::list>(inputs) || py::isinstance<py::tuple>(inputs)) {
      auto seq = inputs.cast<py::sequence>();
      if (seq.size() != specs.size())
        throw py::value_error("run: expected " + std::to_string(specs.size()) + " inputs (" +
                              names_of(specs) + "), got " + std::to_string(seq.size()));
      for (size_t i = 0; i < specs.size(); ++i) given[i] = seq[i];
    } else if (specs.size() == 1) {
      given[0] = inputs;
    } else {
      throw py::value_error("run: the model takes " + std::to_string(specs.size()) + " inputs (" +
                            names_of(specs) + "): pass a dict or a list");
    }
    std::vector<TensorImplPtr> tensors(specs.size());
    std::vector<py::object> keep;  // arrays made from other objects live until the run ends
    for (size_t i = 0; i < specs.size(); ++i) {
      const rt::TensorSpec& spec = specs[i];
      if (!given[i])
        throw py::value_error("run: missing input '" + spec.name + "' (" + spec_str(spec) + ")");
      TensorImplPtr t;
      if (py::isinstance<Tensor>(given[i])) {
        t = given[i].cast<const Tensor&>().impl;
      } else {
        py::array a = py::array::ensure(given[i]);
        if (!a)
          throw py::value_error("run: input '" + spec.name + "' must be an array (" +
                                spec_str(spec) + ")");
        keep.push_back(a);
        t = borrow_array(a, "run: input '" + spec.name + "'", /*keep_alive=*/false);
      }
      const bool same_shape = t->sizes().size() == spec.shape.size() &&
                              std::equal(spec.shape.begin(), spec.shape.end(), t->sizes().begin());
      if (t->dtype() != spec.dtype || !same_shape) {
        std::ostringstream os;
        os << "run: input '" << spec.name << "' expects " << spec_str(spec) << ", got "
           << dtype_name(t->dtype()) << " " << t->sizes();
        throw py::value_error(os.str());
      }
      tensors[i] = std::move(t);
    }
    std::vector<const TensorImpl*> ptrs;
    for (const auto& t : tensors) ptrs.push_back(t.get());
    std::vector<TensorImplPtr> outs;
    {
      std::unique_lock<std::mutex> lock(busy_, std::try_to_lock);
      if (!lock.owns_lock())
        throw std::runtime_error(
            "run: this Session is running on another thread; give each "
            "thread its own Session (Model.session())");
      py::gil_scoped_release nogil;
      outs = session_->run(ptrs);
    }
    py::dict result;
    for (size_t i = 0; i < outs.size(); ++i)
      result[py::str(model_->outputs()[i].name)] = to_numpy(outs[i]);
    return result;
  }

 private:
  std::shared_ptr<const rt::Model> model_;
  std::unique_ptr<rt::Session> session_;
  std::mutex busy_;
};

}  // namespace
}  // namespace kiln::python

PYBIND11_MODULE(kiln, m) {
  using namespace kiln::python;
  m.doc() =
      "kiln: run .kiln artifacts on kiln's C++ runtime; exchange tensors with NumPy and "
      "PyTorch (DLPack) without copies.";
  py::register_exception<kiln::Error>(m, "Error", PyExc_RuntimeError);
  bind_tensor(m);
  py::class_<Model>(m, "Model",
                    "A loaded, verified .kiln artifact (weights shared by its sessions).")
      .def_property_readonly("name", [](const Model& s) { return s.model->name(); })
      .def_property_readonly("input_names",
                             [](const Model& s) {
                               std::vector<std::string> n;
                               for (const auto& i : s.model->inputs()) n.push_back(i.name);
                               return n;
                             })
      .def_property_readonly("output_names",
                             [](const Model& s) {
                               std::vector<std::string> n;
                               for (const auto& o : s.model->outputs()) n.push_back(o.name);
                               return n;
                             })
      .def_property_readonly(
          "inputs", [](const Model& s) { return specs_of(s.model->inputs()); },
          "[(name, dtype, shape)] of the inputs")
      .def_property_readonly("outputs", [](const Model& s) { return specs_of(s.model->outputs()); })
      .def(
          "session", [](const Model& s) { return std::make_unique<Session>(s.model); },
          "A new session: its own activation arena; use one per thread.")
      .def("__repr__", [](const Model& s) {
        return "kiln.Model('" + s.model->name() + "', inputs " + names_of(s.model->inputs()) +
               ", outputs " + names_of(s.model->outputs()) + ")";
      });
  py::class_<Session>(m, "Session")
      .def("run", &Session::run, py::arg("inputs"),
           "Runs the model: inputs as {name: array}, a list in order, or one array; returns "
           "{output name: ndarray}. Releases the GIL while it runs.");
  m.def(
      "load", [](const std::string& path) { return Model{kiln::rt::Model::load(path)}; },
      py::arg("path"), "Maps and verifies a .kiln artifact.");
  // The compiler's functions, when the build has them (python/src/compiler.cpp), loaded on first
  // use: `import kiln` alone never loads LLVM.
  if (!py::module_::import("importlib.util").attr("find_spec")("_kiln_compiler").is_none()) {
    auto forward = [](const char* name) {
      return [name](py::args args, py::kwargs kwargs) {
        return py::module_::import("_kiln_compiler").attr(name)(*args, **kwargs);
      };
    };
    m.def("import_onnx", forward("import_onnx"),
          "import_onnx(onnx_path, kiln_path, input_shapes=None, name='') -> kiln_path: imports an "
          "ONNX model and writes a .kiln artifact (as `kiln import`).");
    m.def("compile", forward("compile"),
          "compile(kiln_path, output, emit='exe', target='host', cpu='', name='model') -> files: "
          "an artifact compiled ahead of time (as `kiln compile M.kiln`).");
  }
}
