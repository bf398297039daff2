#pragma once
// kiln::jit::import_onnx — an ONNX model (kiln::onnx::Model) evaluated under the tracer on inputs
// of static shapes, so that it becomes a kiln-dialect module with its float initializers as named
// weights; save it with jit::save (names included), compile it with jit::compile. Built when kiln
// has ONNX import (protobuf + libonnx-dev): KILN_JIT_HAVE_ONNX.
//
//   auto imported = kiln::jit::import_onnx("resnet18.onnx", {.input_shapes = {{"x", {8, 3, 224,
//   224}}}}); kiln::jit::save(imported.traced, "r18.kiln", imported.save_options());

#include <map>
#include <string>
#include <vector>

#include "kiln/jit/save.h"
#include "kiln/trace/trace.h"

namespace kiln::jit {

struct OnnxImportOptions {
  // Shapes of inputs whose dims the model leaves open, by name; `shapes` in order for the others.
  std::map<std::string, std::vector<int64_t>> input_shapes;
  std::vector<std::vector<int64_t>> shapes;
};

struct OnnxImport {
  TracedFunction traced;
  std::vector<std::string> input_names, output_names;
  int64_t num_nodes = 0, opset = 0;
  std::string producer;
  // The model's input/output names and its origin as metadata, for jit::save.
  SaveOptions save_options(const std::string& name = "model") const;
};

// Throws kiln::Error naming what is wrong (see kiln/onnx/onnx.h), or an input whose shape is
// open and not given.
OnnxImport import_onnx(const std::string& path, const OnnxImportOptions& options = {});

}  // namespace kiln::jit
