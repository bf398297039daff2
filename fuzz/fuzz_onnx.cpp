// libFuzzer target over the ONNX importer (frontend/onnx): any byte string must either be
// rejected with kiln::Error or load and evaluate (on zero inputs, open dims set to 1, at most 64 K
// input elements and 8 MB per tensor: the work of an iteration stays bounded) without a
// crash, another exception or a sanitizer report. Built by fuzz/CMakeLists.txt when protobuf and
// libonnx-dev are installed; the importer's sources are instrumented, kiln's eager library and
// kernels come from the normal build.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kiln/kiln.h"
#include "kiln/onnx/onnx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    // No model folder: external data is refused (a fuzzed path must never reach the filesystem).
    kiln::onnx::Model model =
        kiln::onnx::Model::from_bytes(std::string_view(reinterpret_cast<const char*>(data), size));
    kiln::TensorList inputs;
    int64_t elements = 0;
    for (const auto& v : model.inputs()) {
      std::vector<int64_t> shape;
      for (int64_t d : v.shape) shape.push_back(d < 0 ? 1 : d);
      const int64_t n = kiln::checked_numel(shape, "fuzz");
      elements += n;
      if (n > (1 << 16) || elements > (1 << 16)) return 0;  // keep an iteration fast
      inputs.push_back(kiln::zeros(shape, kiln::TensorOptions(v.dtype)));
    }
    if (model.num_nodes() > 64) return 0;
    model.run(inputs, /*max_value_bytes=*/8 << 20);  // no tensor above 8 MB
  } catch (const kiln::Error&) {
  }
  return 0;
}
