// Reading a .onnx file into the importer's graph: protobuf parsing, the model's checks (IR
// version, opsets, every node legalizable, graph order), initializers inline or as external data
// (bounds-checked, confined to the model's folder), and the graph's evaluation.

#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_map>

#include "graph.h"
#include "kiln/onnx/onnx.h"
#include "onnx.pb.h"

namespace kiln::onnx {

using detail::Attribute;
using detail::Node;

struct Model::Impl {
  std::vector<ValueInfo> inputs, outputs;
  NamedTensors initializers;
  std::vector<Node> nodes;
  int64_t opset = 0;
  std::string producer;
};

namespace {

constexpr const char* kOp = "onnx";

std::optional<DType> dtype_of(int64_t t) {
  using P = ::onnx::TensorProto;
  switch (t) {
    case P::FLOAT:
      return DType::Float32;
    case P::DOUBLE:
      return DType::Float64;
    case P::FLOAT16:
      return DType::Float16;
    case P::BFLOAT16:
      return DType::BFloat16;
    case P::INT8:
      return DType::Int8;
    case P::UINT8:
      return DType::UInt8;
    case P::INT32:
      return DType::Int32;
    case P::INT64:
      return DType::Int64;
    case P::BOOL:
      return DType::Bool;
    default:
      return std::nullopt;
  }
}

std::string type_name(int32_t t) {
  return ::onnx::TensorProto::DataType_IsValid(t)
             ? ::onnx::TensorProto::DataType_Name(static_cast<::onnx::TensorProto::DataType>(t))
             : "type " + std::to_string(t);
}

// The bytes of an external-data tensor: a file inside `dir` (no absolute path, no "..").
std::string external_bytes(const ::onnx::TensorProto& t, const std::string& dir, size_t want) {
  std::string location;
  uint64_t offset = 0, length = want;
  bool has_length = false;
  for (const auto& kv : t.external_data()) {
    if (kv.key() == "location") location = kv.value();
    try {
      if (kv.key() == "offset") offset = std::stoull(kv.value());
      if (kv.key() == "length") length = std::stoull(kv.value()), has_length = true;
    } catch (const std::exception&) {
      fail(kOp, "initializer '", t.name(), "': external data ", kv.key(), " '", kv.value(),
           "' is not a number");
    }
  }
  const std::filesystem::path rel(location);
  KILN_CHECK(!location.empty(), kOp, "initializer '", t.name(),
             "': external data without location");
  KILN_CHECK(!rel.is_absolute(), kOp, "initializer '", t.name(), "': external data path '",
             location, "' is absolute; only files beside the model are read");
  for (const auto& part : rel)
    KILN_CHECK(part != "..", kOp, "initializer '", t.name(), "': external data path '", location,
               "' leaves the model's folder");
  KILN_CHECK(!dir.empty(), kOp, "initializer '", t.name(),
             "': external data needs the model's folder (load it from a file)");
  KILN_CHECK(!has_length || length == want, kOp, "initializer '", t.name(), "': external data of ",
             length, " bytes for a tensor of ", want);
  const std::filesystem::path file = std::filesystem::path(dir) / rel;
  std::ifstream f(file, std::ios::binary);
  KILN_CHECK(f.good(), kOp, "initializer '", t.name(), "': cannot open external data '",
             file.string(), "'");
  f.seekg(0, std::ios::end);
  const uint64_t size = static_cast<uint64_t>(f.tellg());
  KILN_CHECK(offset <= size && want <= size - offset, kOp, "initializer '", t.name(),
             "': external data '", location, "' holds ", size, " bytes, the tensor needs ", want,
             " from offset ", offset);
  std::string bytes(want, '\0');
  f.seekg(static_cast<std::streamoff>(offset));
  f.read(bytes.data(), static_cast<std::streamsize>(want));
  return bytes;
}

// A TensorProto as a kiln tensor; every size checked against the shape before anything is
// allocated (a shape alone must not make the importer allocate what the file does not hold).
Tensor tensor_of(const ::onnx::TensorProto& t, const std::string& dir) {
  const auto dtype = dtype_of(t.data_type());
  KILN_CHECK(dtype, kOp, "tensor '", t.name(), "': element type ", type_name(t.data_type()),
             " is not supported");
  std::vector<int64_t> shape(t.dims().begin(), t.dims().end());
  for (int64_t d : shape) KILN_CHECK(d >= 0, kOp, "tensor '", t.name(), "': negative dim ", d);
  const int64_t n = checked_numel(shape, "onnx");
  const int64_t esize = static_cast<int64_t>(dtype_size(*dtype));
  KILN_CHECK(n <= INT64_MAX / esize, kOp, "tensor '", t.name(), "': shape ", Dims(shape),
             " overflows the address space");
  const size_t nbytes = static_cast<size_t>(n * esize);
  Tensor out;
  char* p = nullptr;
  auto allocate = [&] {
    out = kiln::empty(shape, TensorOptions(*dtype));
    // A constant of the model (initializer or Constant node): filled through the impl, which the
    // tracer does not watch.
    p = static_cast<char*>(out.impl()->data());
  };
  auto copy_bytes = [&](const std::string& bytes, const char* where) {
    KILN_CHECK(bytes.size() == nbytes, kOp, "tensor '", t.name(), "': ", where, " holds ",
               bytes.size(), " bytes, its shape ", Dims(shape), " of ", dtype_name(*dtype),
               " needs ", nbytes);
    allocate();
    if (nbytes) std::memcpy(p, bytes.data(), nbytes);
  };
  auto fill = [&](const auto& values, const char* field, auto convert) {
    KILN_CHECK(values.size() == n, kOp, "tensor '", t.name(), "': ", field, " holds ",
               values.size(), " values, its shape ", Dims(shape), " needs ", n);
    allocate();
    for (int64_t k = 0; k < n; ++k) convert(k, values[static_cast<int>(k)]);
  };
  if (t.data_location() == ::onnx::TensorProto::EXTERNAL) {
    copy_bytes(external_bytes(t, dir, nbytes), "external data");
  } else if (t.has_raw_data()) {
    copy_bytes(t.raw_data(), "raw_data");
  } else {
    switch (*dtype) {
      case DType::Float32:
        fill(t.float_data(), "float_data",
             [&](int64_t k, float v) { reinterpret_cast<float*>(p)[k] = v; });
        break;
      case DType::Float64:
        fill(t.double_data(), "double_data",
             [&](int64_t k, double v) { reinterpret_cast<double*>(p)[k] = v; });
        break;
      case DType::Int64:
        fill(t.int64_data(), "int64_data",
             [&](int64_t k, int64_t v) { reinterpret_cast<int64_t*>(p)[k] = v; });
        break;
      case DType::Int32:
        fill(t.int32_data(), "int32_data",
             [&](int64_t k, int32_t v) { reinterpret_cast<int32_t*>(p)[k] = v; });
        break;
      case DType::Int8:
      case DType::UInt8:
      case DType::Bool:
        fill(t.int32_data(), "int32_data",
             [&](int64_t k, int32_t v) { p[k] = static_cast<char>(v); });
        break;
      case DType::Float16:
      case DType::BFloat16:  // 16-bit patterns in int32_data
        fill(t.int32_data(), "int32_data", [&](int64_t k, int32_t v) {
          reinterpret_cast<uint16_t*>(p)[k] = static_cast<uint16_t>(v);
        });
        break;
    }
  }
  return out;
}

ValueInfo value_info(const ::onnx::ValueInfoProto& v) {
  ValueInfo out{v.name(), DType::Float32, {}};
  KILN_CHECK(v.type().has_tensor_type(), kOp, "graph value '", v.name(), "' is not a tensor");
  const auto& tt = v.type().tensor_type();
  const auto dtype = dtype_of(tt.elem_type());
  KILN_CHECK(dtype, kOp, "graph value '", v.name(), "': element type ", type_name(tt.elem_type()),
             " is not supported");
  out.dtype = *dtype;
  for (const auto& d : tt.shape().dim())
    out.shape.push_back(d.has_dim_value() && d.dim_value() >= 0 ? d.dim_value() : -1);
  return out;
}

Attribute attribute(const ::onnx::AttributeProto& a, const std::string& dir) {
  using A = ::onnx::AttributeProto;
  Attribute out;
  switch (a.type()) {
    case A::INT:
      out.kind = Attribute::Kind::Int, out.i = a.i();
      break;
    case A::FLOAT:
      out.kind = Attribute::Kind::Float, out.f = a.f();
      break;
    case A::STRING:
      out.kind = Attribute::Kind::String, out.s = a.s();
      break;
    case A::INTS:
      out.kind = Attribute::Kind::Ints, out.ints.assign(a.ints().begin(), a.ints().end());
      break;
    case A::FLOATS:
      out.kind = Attribute::Kind::Floats, out.floats.assign(a.floats().begin(), a.floats().end());
      break;
    case A::TENSOR:
      out.kind = Attribute::Kind::Tensor, out.t = tensor_of(a.t(), dir);
      break;
    default:
      break;  // graphs, sparse tensors, type protos: no legalization reads them
  }
  return out;
}

std::unique_ptr<Model::Impl> parse(std::string_view bytes, const std::string& dir) {
  ::onnx::ModelProto proto;
  KILN_CHECK(bytes.size() < (size_t(1) << 31), kOp, "model of ", bytes.size(),
             " bytes: protobuf files are limited to 2 GiB (use external data)");
  KILN_CHECK(proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())), kOp,
             "not a valid ONNX model (protobuf parsing failed; truncated or not .onnx?)");
  KILN_CHECK(proto.has_graph(), kOp, "the model has no graph");
  KILN_CHECK(proto.ir_version() >= 3 && proto.ir_version() <= kMaxIrVersion, kOp, "IR version ",
             proto.ir_version(), " is not supported (3 to ", kMaxIrVersion, ")");
  auto m = std::make_unique<Model::Impl>();
  m->producer = proto.producer_name() + " " + proto.producer_version();
  for (const auto& o : proto.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") {
      m->opset = o.version();
    }
  }
  KILN_CHECK(m->opset >= 1 && m->opset <= kMaxOpset, kOp, "opset ", m->opset,
             " of the default domain is not supported (1 to ", kMaxOpset, ")");
  const auto& g = proto.graph();
  std::set<std::string> init_names;
  for (const auto& t : g.initializer()) {
    KILN_CHECK(init_names.insert(t.name()).second, kOp, "initializer '", t.name(),
               "' appears twice");
    m->initializers.emplace_back(t.name(), tensor_of(t, dir));
  }
  for (const auto& v : g.input())
    if (!init_names.count(v.name())) m->inputs.push_back(value_info(v));
  for (const auto& v : g.output()) m->outputs.push_back(value_info(v));
  KILN_CHECK(!m->outputs.empty(), kOp, "the graph has no outputs");

  // Nodes: every op legalizable (all failures listed at once), inputs defined before use.
  std::set<std::string> defined(init_names);
  for (const auto& v : m->inputs) defined.insert(v.name);
  std::vector<std::string> unsupported;
  for (const auto& n : g.node()) {
    Node node{n.op_type(), n.domain() == "ai.onnx" ? "" : n.domain(),
              n.name(),    static_cast<int64_t>(m->nodes.size()),
              {},          {},
              {}};
    for (const auto& a : n.attribute()) node.attrs[a.name()] = attribute(a, dir);
    node.inputs.assign(n.input().begin(), n.input().end());
    node.outputs.assign(n.output().begin(), n.output().end());
    if (!detail::find_op(node.domain, node.op_type, m->opset)) {
      unsupported.push_back((node.domain.empty() ? "" : node.domain + ":") + node.op_type +
                            " (opset " + std::to_string(m->opset) + ")");
    }
    for (const auto& in : node.inputs)
      KILN_CHECK(in.empty() || defined.count(in), kOp, "node '", node.name, "' (", node.op_type,
                 ") reads '", in, "' before anything defines it (the graph is not sorted)");
    for (const auto& out : node.outputs) defined.insert(out);
    m->nodes.push_back(std::move(node));
  }
  for (const auto& v : m->outputs)
    KILN_CHECK(defined.count(v.name), kOp, "graph output '", v.name, "' is never defined");
  if (!unsupported.empty()) {
    std::set<std::string> uniq(unsupported.begin(), unsupported.end());
    std::ostringstream os;
    for (const auto& u : uniq) os << (os.tellp() ? ", " : "") << u;
    fail(kOp, "the model uses ", uniq.size(), " op(s) kiln cannot import: ", os.str());
  }
  return m;
}

}  // namespace

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

Model Model::load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  KILN_CHECK(f.good(), kOp, "cannot open '", path, "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  const std::string dir = std::filesystem::absolute(path).parent_path().string();
  try {
    return Model(parse(ss.str(), dir));
  } catch (const Error& e) {
    fail(kOp, "'", path, "': ", e.op() == kOp ? e.message() : e.what());
  }
}

Model Model::from_bytes(std::string_view bytes, const std::string& external_data_dir) {
  return Model(parse(bytes, external_data_dir));
}

const std::vector<ValueInfo>& Model::inputs() const {
  return impl_->inputs;
}
const std::vector<ValueInfo>& Model::outputs() const {
  return impl_->outputs;
}
const NamedTensors& Model::initializers() const {
  return impl_->initializers;
}
int64_t Model::opset() const {
  return impl_->opset;
}
int64_t Model::num_nodes() const {
  return static_cast<int64_t>(impl_->nodes.size());
}
std::string Model::producer() const {
  return impl_->producer;
}

TensorList Model::run(const TensorList& inputs, size_t max_value_bytes) const {
  const Impl& m = *impl_;
  KILN_CHECK(inputs.size() == m.inputs.size(), kOp, "expected ", m.inputs.size(), " inputs, got ",
             inputs.size());
  std::optional<StorageLimit> limit;  // every allocation of the evaluation, this thread's
  if (max_value_bytes) limit.emplace(max_value_bytes);
  std::unordered_map<std::string, Tensor> env;
  for (const auto& [name, t] : m.initializers) env[name] = t;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ValueInfo& v = m.inputs[i];
    const Tensor& x = inputs[i];
    bool ok =
        x.defined() && x.dtype() == v.dtype && x.dim() == static_cast<int64_t>(v.shape.size());
    for (size_t d = 0; ok && d < v.shape.size(); ++d)
      ok = v.shape[d] < 0 || v.shape[d] == x.size(d);
    KILN_CHECK(ok, kOp, "input '", v.name, "' expects ", dtype_name(v.dtype), " ", Dims(v.shape),
               " (-1: any), got ", x.defined() ? std::string(dtype_name(x.dtype())) : "none", " ",
               x.defined() ? x.sizes() : Dims{});
    env[v.name] = x;
  }
  for (const Node& n : m.nodes) {
    TensorList args;
    for (const auto& in : n.inputs) args.push_back(in.empty() ? Tensor() : env.at(in));
    const detail::OpDef* def = detail::find_op(n.domain, n.op_type, m.opset);
    TensorList outs = def->fn(detail::NodeContext(n, args, m.opset));
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      if (n.outputs[k].empty()) continue;
      KILN_CHECK(k < outs.size() && outs[k].defined(), kOp, "node '", n.name, "' (", n.op_type,
                 "): output ", k, " ('", n.outputs[k], "') is not produced by kiln's import");
      const size_t bytes = static_cast<size_t>(outs[k].numel()) * outs[k].element_size();
      KILN_CHECK(max_value_bytes == 0 || bytes <= max_value_bytes, kOp, "node ", n.index, " (",
                 n.op_type, "): output '", n.outputs[k], "' of ", bytes,
                 " bytes exceeds the limit of ", max_value_bytes);
      env[n.outputs[k]] = outs[k];
    }
  }
  TensorList out;
  for (const auto& v : m.outputs) out.push_back(env.at(v.name));
  return out;
}

std::vector<std::string> supported_ops() {
  std::vector<std::string> out;
  for (auto table :
       {detail::math_ops, detail::nn_ops, detail::shape_ops, detail::rnn_ops, detail::quant_ops})
    for (const auto& d : table()) out.push_back(d.op_type);
  std::sort(out.begin(), out.end());
  return out;
}

namespace detail {

const OpDef* find_op(const std::string& domain, const std::string& op_type, int64_t opset) {
  static const std::vector<OpDef> all = [] {
    std::vector<OpDef> v;
    for (auto table : {math_ops, nn_ops, shape_ops, rnn_ops, quant_ops})
      for (const auto& d : table()) v.push_back(d);
    return v;
  }();
  if (!domain.empty()) return nullptr;  // only the default domain so far
  for (const auto& d : all)
    if (op_type == d.op_type && opset >= d.min_opset) return &d;
  return nullptr;
}

const Tensor& NodeContext::in(size_t i) const {
  if (!has(i)) fail("input " + std::to_string(i) + " is required");
  return inputs_[i];
}

std::vector<int64_t> NodeContext::ints_of(size_t i) const {
  Tensor t = in(i).to(DType::Int64).contiguous();
  const int64_t* p = t.data_ptr<int64_t>();
  return std::vector<int64_t>(p, p + t.numel());
}

std::optional<double> NodeContext::scalar_of(size_t i) const {
  if (!has(i)) return std::nullopt;
  if (inputs_[i].numel() != 1)
    fail("input " + std::to_string(i) + " must hold one value, got " +
         std::to_string(inputs_[i].numel()));
  return inputs_[i].item<double>();
}

const Attribute& NodeContext::attr(const std::string& name, Attribute::Kind kind) const {
  auto it = node_.attrs.find(name);
  if (it == node_.attrs.end()) fail("attribute '" + name + "' is required");
  if (it->second.kind != kind) fail("attribute '" + name + "' has the wrong type");
  return it->second;
}

int64_t NodeContext::i(const std::string& name, std::optional<int64_t> fallback) const {
  if (fallback && !has_attr(name)) return *fallback;
  return attr(name, Attribute::Kind::Int).i;
}
double NodeContext::f(const std::string& name, std::optional<double> fallback) const {
  if (fallback && !has_attr(name)) return *fallback;
  return attr(name, Attribute::Kind::Float).f;
}
std::string NodeContext::s(const std::string& name, std::optional<std::string> fallback) const {
  if (fallback && !has_attr(name)) return *fallback;
  return attr(name, Attribute::Kind::String).s;
}
std::vector<int64_t> NodeContext::ints(const std::string& name,
                                       std::optional<std::vector<int64_t>> fallback) const {
  if (fallback && !has_attr(name)) return *fallback;
  return attr(name, Attribute::Kind::Ints).ints;
}
const Tensor& NodeContext::tensor(const std::string& name) const {
  return attr(name, Attribute::Kind::Tensor).t;
}
void NodeContext::fail(const std::string& message) const {
  if (node_.name.empty())
    kiln::fail(kOp, "node ", node_.index, " (", node_.op_type, "): ", message);
  kiln::fail(kOp, "node '", node_.name, "' (", node_.op_type, "): ", message);
}

std::optional<DType> dtype_of_onnx(int64_t onnx_type) {
  return dtype_of(onnx_type);
}

int64_t norm_axis(const NodeContext& c, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= std::max<int64_t>(rank, 1))
    c.fail("axis " + std::to_string(axis) + " out of range for rank " + std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

}  // namespace detail
}  // namespace kiln::onnx
