#include "kiln/optim/state_value.h"

#include <string>

namespace kiln::optim {
namespace {

// A list of doubles is tagged so that it is not confused with a list of tensors on the way back.
Value encode(const StateValue& v) {
  return std::visit(
      [](const auto& x) -> Value {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::vector<double>>) {
          Value::List values;
          for (double d : x) values.emplace_back(d);
          return Value(Value::Dict{{"doubles", Value(std::move(values))}});
        } else if constexpr (std::is_same_v<T, TensorList>) {
          return Value(x);
        } else {
          return Value(x);
        }
      },
      v);
}

StateValue decode(const Value& v, const std::string& key) {
  if (v.is_bool()) return v.to_bool();
  if (v.is_int()) return v.to_int();
  if (v.is_double()) return v.to_double();
  if (v.is_string()) return v.to_string();
  if (v.is_tensor()) return v.to_tensor();
  if (v.is_list()) return v.to_tensor_list();
  if (v.is_dict() && v.contains("doubles")) {
    std::vector<double> out;
    for (const Value& d : v.at("doubles").to_list()) out.push_back(d.to_double());
    return out;
  }
  fail("optimizer state", "entry '", key, "' holds a ", v.kind(), ", not an optimizer state value");
}

Value encode_map(const StateMap& m) {
  Value::Dict d;
  for (const auto& [k, v] : m) d.emplace_back(k, encode(v));
  return Value(std::move(d));
}

StateMap decode_map(const Value& v) {
  StateMap m;
  for (const auto& [k, x] : v.to_dict()) m.emplace(k, decode(x, k));
  return m;
}

}  // namespace

Value to_value(const OptimizerStateDict& dict) {
  Value::Dict state;
  for (const auto& [index, s] : dict.state)
    state.emplace_back(std::to_string(index), encode_map(s));
  Value::List groups;
  for (const auto& g : dict.param_groups) {
    Value::List params;
    for (int64_t p : g.params) params.emplace_back(p);
    groups.emplace_back(
        Value::Dict{{"params", Value(std::move(params))}, {"options", encode_map(g.options)}});
  }
  return Value(
      Value::Dict{{"state", Value(std::move(state))}, {"param_groups", Value(std::move(groups))}});
}

OptimizerStateDict state_dict_from_value(const Value& value) {
  OptimizerStateDict dict;
  for (const auto& [key, s] : value.at("state").to_dict()) {
    size_t used = 0;
    int64_t index = -1;
    try {
      index = std::stoll(key, &used);
    } catch (const std::exception&) {
    }
    KILN_CHECK(used == key.size() && index >= 0, "optimizer state",
               "expected a parameter index as state key, got '", key, "'");
    dict.state.emplace(index, decode_map(s));
  }
  for (const Value& g : value.at("param_groups").to_list()) {
    ParamGroupState group;
    for (const Value& p : g.at("params").to_list()) group.params.push_back(p.to_int());
    group.options = decode_map(g.at("options"));
    dict.param_groups.push_back(std::move(group));
  }
  return dict;
}

}  // namespace kiln::optim
