#pragma once
// ONNX models in kiln: kiln::onnx::Model reads a .onnx file (opset <= 17 of the default domain,
// IR version <= 8), checks it, and evaluates its graph with kiln's eager ops. Evaluated under
// kiln::jit::trace, the graph is recorded in the kiln dialect with the initializers as named
// weights: `kiln import model.onnx -o m.kiln` does exactly that (tools/kiln/import.cpp).
//
//   auto m = kiln::onnx::Model::load("resnet18.onnx");
//   kiln::TensorList y = m.run({x});       // eager, kiln's kernels
//
// Every unsupported (domain, op, opset) of a model is reported at once, when it is loaded; a
// truncated or malformed file, an opset above 17, external data outside the model's folder and an
// initializer whose bytes contradict its shape each get one clear kiln::Error.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/serialize.h"
#include "kiln/tensor.h"

namespace kiln::onnx {

inline constexpr int64_t kMaxOpset = 17;
inline constexpr int64_t kMaxIrVersion = 8;

// A graph input or output: its element type and shape (-1 where the model leaves a dim open).
struct ValueInfo {
  std::string name;
  DType dtype = DType::Float32;
  std::vector<int64_t> shape;
};

class Model {
 public:
  // `path`'s folder anchors external data (only files inside it are read).
  static Model load(const std::string& path);
  static Model from_bytes(std::string_view bytes, const std::string& external_data_dir = "");
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ~Model();

  const std::vector<ValueInfo>& inputs() const;
  const std::vector<ValueInfo>& outputs() const;
  // The weights (initializers that are not graph inputs), in file order.
  const NamedTensors& initializers() const;
  int64_t opset() const;
  int64_t num_nodes() const;
  std::string producer() const;

  // Evaluates the graph on `inputs` (one per input, in order; their shapes fill the open dims).
  // max_value_bytes > 0: no tensor larger than that is allocated (kiln::StorageLimit) and no
  // value larger is kept (kiln::Error naming the node), as a service evaluating models it does
  // not trust (or the fuzzer) bounds their memory and work.
  TensorList run(const TensorList& inputs, size_t max_value_bytes = 0) const;

  struct Impl;

 private:
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The (domain, op) pairs this importer legalizes, "op_type" or "domain:op_type" (for docs/tests).
std::vector<std::string> supported_ops();

}  // namespace kiln::onnx
