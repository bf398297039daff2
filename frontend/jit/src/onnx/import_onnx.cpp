// kiln::jit::import_onnx: evaluate an ONNX graph (kiln::onnx) under the tracer. Shape arithmetic
// reads values at import on purpose (static shapes), so read-backs are not warned about.

#include "kiln/jit/import_onnx.h"

#include <algorithm>
#include <filesystem>

#include "kiln/kiln.h"
#include "kiln/onnx/onnx.h"

namespace kiln::jit {

SaveOptions OnnxImport::save_options(const std::string& name) const {
  SaveOptions so;
  so.name = name;
  so.producer = "kiln import";
  so.input_names = input_names;
  so.output_names = output_names;
  so.metadata = {{"onnx_producer", producer}, {"onnx_opset", std::to_string(opset)}};
  return so;
}

OnnxImport import_onnx(const std::string& path, const OnnxImportOptions& options) {
  constexpr const char* kOp = "import_onnx";
  onnx::Model model = onnx::Model::load(path);
  auto named = options.input_shapes;
  auto unnamed = options.shapes;
  TensorList examples;
  OnnxImport out;
  for (const auto& v : model.inputs()) {
    std::vector<int64_t> shape = v.shape;
    const bool open = std::count(shape.begin(), shape.end(), -1) > 0;
    if (auto it = named.find(v.name); it != named.end()) {
      shape = it->second;
      named.erase(it);
    } else if (open) {
      KILN_CHECK(!unnamed.empty(), kOp, "input '", v.name, "' has open dims ", Dims(v.shape),
                 ": give its shape (--input-shape ", v.name, "=...)");
      shape = unnamed.front();
      unnamed.erase(unnamed.begin());
    }
    KILN_CHECK(shape.size() == v.shape.size(), kOp, "input '", v.name, "' has rank ",
               v.shape.size(), ", the given shape has ", shape.size(), " dims");
    for (size_t d = 0; d < shape.size(); ++d)
      KILN_CHECK(v.shape[d] < 0 || v.shape[d] == shape[d], kOp, "input '", v.name, "' fixes dim ",
                 d, " to ", v.shape[d], ", the given shape has ", shape[d]);
    examples.push_back(is_floating(v.dtype) ? randn(shape, TensorOptions(v.dtype))
                                            : zeros(shape, TensorOptions(v.dtype)));
    out.input_names.push_back(v.name);
  }
  KILN_CHECK(named.empty(), kOp, "a shape is given for '", named.begin()->first,
             "', which is not an input of the model");
  KILN_CHECK(unnamed.empty(), kOp, "more shapes given than inputs with open dims");
  for (const auto& v : model.outputs()) out.output_names.push_back(v.name);

  autograd::NoGradGuard no_grad;
  TraceOptions trace_options;
  trace_options.warn_on_read_back = false;
  for (const auto& [k, t] : model.initializers())
    if (is_floating(t.dtype())) trace_options.named_captures.push_back({k, t});
  out.traced = trace([&](const TensorList& in) { return model.run(in); }, examples, trace_options);
  out.num_nodes = model.num_nodes();
  out.opset = model.opset();
  out.producer = model.producer();
  return out;
}

}  // namespace kiln::jit
