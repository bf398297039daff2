// `_kiln_compiler`: the parts of the `kiln` module that need the compiler (LLVM/MLIR) and the ONNX
// importer, in their own extension so that `import kiln` stays runtime-only. `kiln` re-exports
// them as kiln.import_onnx and kiln.compile when this extension was built.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "kiln/jit/aot.h"
#include "kiln/jit/import_onnx.h"
#include "kiln/jit/save.h"
#include "kiln/runtime/error.h"

namespace py = pybind11;

PYBIND11_MODULE(_kiln_compiler, m) {
  m.doc() =
      "kiln's compiler and ONNX importer for the kiln module (kiln.import_onnx, kiln.compile)";
  m.def(
      "import_onnx",
      [](const std::string& onnx_path, const std::string& kiln_path, py::object input_shapes,
         std::string name) {
        kiln::jit::OnnxImportOptions options;
        if (py::isinstance<py::dict>(input_shapes))
          options.input_shapes = input_shapes.cast<std::map<std::string, std::vector<int64_t>>>();
        else if (!input_shapes.is_none())
          options.shapes = input_shapes.cast<std::vector<std::vector<int64_t>>>();
        if (name.empty()) name = std::filesystem::path(onnx_path).stem().string();
        py::gil_scoped_release nogil;
        const kiln::jit::OnnxImport imported = kiln::jit::import_onnx(onnx_path, options);
        kiln::jit::SaveOptions so = imported.save_options(name);
        so.metadata.emplace_back("onnx", std::filesystem::path(onnx_path).filename().string());
        kiln::jit::save(imported.traced, kiln_path, so);
        return kiln_path;
      },
      py::arg("onnx_path"), py::arg("kiln_path"), py::arg("input_shapes") = py::none(),
      py::arg("name") = "",
      "Imports an ONNX model and writes a .kiln artifact (as `kiln import`); input_shapes gives "
      "the inputs whose dims the model leaves open: {name: shape} or [shape, ...] in order. "
      "Returns kiln_path.");
  m.def(
      "compile",
      [](const std::string& kiln_path, const std::string& output, const std::string& emit,
         const std::string& target, const std::string& cpu, const std::string& name) {
        kiln::jit::AotOptions o;
        o.output = output;
        o.emit = emit;
        o.target = target;
        o.cpu = cpu;
        o.name = name;
        py::gil_scoped_release nogil;
        return kiln::jit::compile_artifact(kiln_path, o).files;
      },
      py::arg("kiln_path"), py::arg("output"), py::arg("emit") = "exe", py::arg("target") = "host",
      py::arg("cpu") = "", py::arg("name") = "model",
      "Compiles a .kiln artifact ahead of time (as `kiln compile M.kiln`): emit exe, so or obj; "
      "returns the files written.");
}
