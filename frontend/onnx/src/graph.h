#pragma once
// The importer's own graph (no protobuf types past model.cpp) and the legalization table: each
// ONNX op of the default domain evaluated with kiln's eager ops, given its opset.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::onnx::detail {

struct Attribute {
  enum class Kind { Int, Float, String, Ints, Floats, Tensor, Other } kind = Kind::Other;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  Tensor t;
};

struct Node {
  std::string op_type, domain, name;
  int64_t index = 0;  // in the graph (named in errors when the node has no name)
  std::vector<std::string> inputs, outputs;  // "" = an omitted optional input
  std::map<std::string, Attribute> attrs;
};

// What a legalization sees: its node, the node's evaluated inputs (undefined where omitted) and
// the model's opset, with attribute accessors whose errors name the node.
class NodeContext {
 public:
  NodeContext(const Node& node, const TensorList& inputs, int64_t opset)
      : node_(node), inputs_(inputs), opset_(opset) {}
  const Node& node() const { return node_; }
  int64_t opset() const { return opset_; }
  size_t num_inputs() const { return inputs_.size(); }
  // Input i, or an error naming the node when it is missing and required.
  const Tensor& in(size_t i) const;
  bool has(size_t i) const { return i < inputs_.size() && inputs_[i].defined(); }
  // An input whose values the op needs at import time (shapes, axes, pads): as int64s.
  std::vector<int64_t> ints_of(size_t i) const;
  std::optional<double> scalar_of(size_t i) const;

  bool has_attr(const std::string& name) const { return node_.attrs.count(name) > 0; }
  int64_t i(const std::string& name, std::optional<int64_t> fallback = std::nullopt) const;
  double f(const std::string& name, std::optional<double> fallback = std::nullopt) const;
  std::string s(const std::string& name, std::optional<std::string> fallback = std::nullopt) const;
  std::vector<int64_t> ints(const std::string& name,
                            std::optional<std::vector<int64_t>> fallback = std::nullopt) const;
  const Tensor& tensor(const std::string& name) const;
  // An error naming the node and op: "onnx: node 'n' (Conv): <message>".
  [[noreturn]] void fail(const std::string& message) const;

 private:
  const Attribute& attr(const std::string& name, Attribute::Kind kind) const;
  const Node& node_;
  const TensorList& inputs_;
  int64_t opset_;
};

using OpFn = TensorList (*)(const NodeContext&);

// One legalization: op_type (default domain) for opsets [min_opset, kMaxOpset].
struct OpDef {
  const char* op_type;
  int64_t min_opset;
  OpFn fn;
};

// The tables of ops_*.cpp.
std::vector<OpDef> math_ops();
std::vector<OpDef> nn_ops();
std::vector<OpDef> shape_ops();
std::vector<OpDef> rnn_ops();
std::vector<OpDef> quant_ops();
// The legalization of op_type at `opset`, or null.
const OpDef* find_op(const std::string& domain, const std::string& op_type, int64_t opset);

// Helpers shared by the tables. The kiln dtype of an ONNX TensorProto data type, if any.
std::optional<DType> dtype_of_onnx(int64_t onnx_type);
int64_t norm_axis(const NodeContext& c, int64_t axis, int64_t rank);

}  // namespace kiln::onnx::detail
