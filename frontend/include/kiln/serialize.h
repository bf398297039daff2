#pragma once
// Saving and loading tensors.
//
// kiln::save / kiln::load: kiln's own binary format for a Value tree (tensors, lists, string-keyed
// dicts, numbers, strings) — enough for module and optimizer state dicts. Storages are written once
// each: tensors that share a storage (views) load as views of ONE new storage, with their sizes,
// strides and offsets. Every count, size and offset in a file is bounds- and overflow-checked and
// every section is CRC-32 checked; a bad file raises kiln::Error naming the file and the problem.
//
// .npy (NumPy) and .safetensors: the interchange formats (DESIGN.md §7).

#include <concepts>
#include <cstdint>
#include <iterator>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {

// name -> tensor in a fixed order (state dicts, safetensors files).
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

namespace serialize_detail {
// Any iterable of (string, T) pairs: std::map, std::vector<std::pair>, nn::OrderedDict, ...
template <typename R>
concept NamedRange = requires(const R& r) {
  { std::begin(r)->first } -> std::convertible_to<std::string>;
  std::begin(r)->second;
  std::end(r);
};
}  // namespace serialize_detail

class Value {
 public:
  using List = std::vector<Value>;
  using Dict = std::vector<std::pair<std::string, Value>>;  // insertion-ordered, unique keys

  Value() = default;  // None
  Value(std::nullptr_t) {}
  Value(bool b) : v_(b) {}
  Value(int v) : v_(int64_t{v}) {}
  Value(int64_t v) : v_(v) {}
  Value(uint64_t v);  // must fit in int64
  Value(double v) : v_(v) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(Tensor t) : v_(std::move(t)) {}
  Value(List l) : v_(std::move(l)) {}
  Value(Dict d);  // throws on a duplicate key
  Value(const std::vector<Tensor>& tensors);
  // A dict from any range of (string, X) pairs with X convertible to Value: std::map<string,
  // Tensor>, NamedTensors, nn::StateDict (nn::OrderedDict<Tensor>), std::map<string, Value>...
  template <serialize_detail::NamedRange R>
  requires(!std::is_same_v<R, Dict>) Value(const R& items) {
    Dict d;
    for (const auto& item : items) d.emplace_back(std::string(item.first), Value(item.second));
    *this = Value(std::move(d));
  }

  bool is_none() const { return v_.index() == 0; }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_int() const { return std::holds_alternative<int64_t>(v_); }
  bool is_double() const { return std::holds_alternative<double>(v_); }
  bool is_string() const { return std::holds_alternative<std::string>(v_); }
  bool is_tensor() const { return std::holds_alternative<Tensor>(v_); }
  bool is_list() const { return std::holds_alternative<List>(v_); }
  bool is_dict() const { return std::holds_alternative<Dict>(v_); }
  std::string kind() const;  // "none", "bool", "int", "double", "string", "tensor", "list", "dict"

  // Accessors throw kiln::Error when the Value holds something else.
  bool to_bool() const;
  int64_t to_int() const;
  double to_double() const;  // ints convert
  const std::string& to_string() const;
  const Tensor& to_tensor() const;
  const List& to_list() const;
  List& to_list();
  const Dict& to_dict() const;
  Dict& to_dict();

  // Dict helpers: `at` throws when the key is missing; `find` returns nullptr.
  const Value& at(const std::string& key) const;
  const Value* find(const std::string& key) const;
  bool contains(const std::string& key) const { return find(key) != nullptr; }
  // Adds or replaces a key of a dict (a None Value becomes an empty dict first).
  void insert(const std::string& key, Value value);

  // A dict or list of tensors back as NamedTensors / std::map / vector.
  NamedTensors to_named_tensors() const;
  std::map<std::string, Tensor> to_tensor_map() const;
  std::vector<Tensor> to_tensor_list() const;

 private:
  std::variant<std::monostate, bool, int64_t, double, std::string, Tensor, List, Dict> v_;
};

// Binary format: see frontend/src/serialize/serialize.cpp for the layout.
void save(const Value& value, const std::string& path);
Value load(const std::string& path);
// In-memory variants (the same bytes as the file).
std::vector<uint8_t> save_to_bytes(const Value& value);
Value load_from_bytes(const std::vector<uint8_t>& bytes, const std::string& name = "<memory>");

// .npy: reads format versions 1.0, 2.0 and 3.0; dtypes f2 f4 f8 i1 u1 i4 i8 b1 (little-endian or
// byte-order-free), C or Fortran order (returned as a contiguous tensor). Writes version 1.0 (2.0
// when the header needs it), C order; bfloat16 has no NumPy dtype and is refused.
Tensor read_npy(const std::string& path);
void write_npy(const std::string& path, const Tensor& tensor);

// .safetensors: dtypes F32 F64 F16 BF16 I8 U8 I32 I64 BOOL. Reading validates that every tensor's
// data_offsets lie inside the file, match its shape and dtype, do not overlap and together cover
// the data buffer exactly. Tensors come back in data-offset order.
struct SafetensorsFile {
  NamedTensors tensors;
  std::vector<std::pair<std::string, std::string>> metadata;  // "__metadata__", in file order
};
SafetensorsFile read_safetensors_file(const std::string& path);
NamedTensors read_safetensors(const std::string& path);
void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::vector<std::pair<std::string, std::string>>& metadata = {});
template <serialize_detail::NamedRange R>
requires(!std::is_same_v<R, NamedTensors>) void write_safetensors(
    const std::string& path, const R& tensors,
    const std::vector<std::pair<std::string, std::string>>& metadata = {}) {
  NamedTensors v;
  for (const auto& item : tensors) v.emplace_back(std::string(item.first), item.second);
  write_safetensors(path, v, metadata);
}

}  // namespace kiln
