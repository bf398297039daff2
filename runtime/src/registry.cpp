// The kernel registry and attribute decoding (core: references no kernel).

#include "kiln/runtime/registry.h"

#include <algorithm>

namespace kiln::rt {

std::string_view attr_type_name(AttrType t) {
  switch (t) {
    case AttrType::Int:
      return "int";
    case AttrType::Float:
      return "float";
    case AttrType::Bool:
      return "bool";
    case AttrType::Ints:
      return "int array";
    case AttrType::String:
      return "string";
  }
  return "?";
}

const AttrValue* AttrMap::find(std::string_view name) const {
  for (const AttrValue& v : values_) {
    if (v.name == name) return &v;
  }
  return nullptr;
}

const AttrValue& AttrMap::get(std::string_view name, AttrType type) const {
  const AttrValue* v = find(name);
  KILN_CHECK(v, op_, "missing attribute '", name, "' (", attr_type_name(type), ")");
  // Integers stand in for bools and floats (an artifact may store 0/1 or 2 for 2.0).
  const bool ok = v->type == type || (type == AttrType::Bool && v->type == AttrType::Int) ||
                  (type == AttrType::Float && v->type == AttrType::Int) ||
                  (type == AttrType::Int && v->type == AttrType::Bool);
  KILN_CHECK(ok, op_, "attribute '", name, "': expected ", attr_type_name(type), ", got ",
             attr_type_name(v->type));
  return *v;
}

bool AttrMap::declares(std::string_view name) const {
  if (find(name)) return true;
  for (const AttrSpec& s : specs_)
    if (s.name == name) return true;
  return false;
}

const AttrSpec* AttrMap::optional_spec(std::string_view name) const {
  for (const AttrSpec& s : specs_)
    if (s.name == name) return s.required ? nullptr : &s;
  return nullptr;
}

int64_t AttrMap::i(std::string_view name) const {
  if (const AttrSpec* s = find(name) ? nullptr : optional_spec(name))
    return static_cast<int64_t>(s->fallback);
  return get(name, AttrType::Int).i;
}
int64_t AttrMap::i(std::string_view name, int64_t fallback) const {
  return find(name) ? i(name) : fallback;
}
double AttrMap::f(std::string_view name) const {
  if (const AttrSpec* s = find(name) ? nullptr : optional_spec(name)) return s->fallback;
  const AttrValue& v = get(name, AttrType::Float);
  return v.type == AttrType::Int ? static_cast<double>(v.i) : v.f;
}
double AttrMap::f(std::string_view name, double fallback) const {
  return find(name) ? f(name) : fallback;
}
bool AttrMap::b(std::string_view name) const {
  if (const AttrSpec* s = find(name) ? nullptr : optional_spec(name)) return s->fallback != 0;
  return get(name, AttrType::Bool).i != 0;
}
bool AttrMap::b(std::string_view name, bool fallback) const {
  return find(name) ? get(name, AttrType::Bool).i != 0 : fallback;
}
std::span<const int64_t> AttrMap::ints(std::string_view name) const {
  if (!find(name) && optional_spec(name)) return {};
  return get(name, AttrType::Ints).ints;
}
std::string_view AttrMap::s(std::string_view name) const {
  if (!find(name) && optional_spec(name)) return {};
  return get(name, AttrType::String).s;
}
std::span<const int64_t> AttrMap::ints(std::string_view name, size_t n) const {
  std::span<const int64_t> v = ints(name);
  KILN_CHECK(v.size() == n, op_, "attribute '", name, "': expected ", n, " values, got ", v.size());
  return v;
}

void Registry::add(const KernelDef& def) {
  auto it = std::lower_bound(defs_.begin(), defs_.end(), def.name,
                             [](const KernelDef& d, std::string_view n) { return d.name < n; });
  if (it != defs_.end() && it->name == def.name) {
    *it = def;
  } else {
    defs_.insert(it, def);
  }
}

const KernelDef* Registry::find(std::string_view name) const {
  auto it = std::lower_bound(defs_.begin(), defs_.end(), name,
                             [](const KernelDef& d, std::string_view n) { return d.name < n; });
  return it != defs_.end() && it->name == name ? &*it : nullptr;
}

void Registry::add_function(std::string_view name, void* fn) {
  for (auto& [n, f] : functions_)
    if (n == name) {
      f = fn;
      return;
    }
  functions_.emplace_back(std::string(name), fn);
}

void* Registry::function(std::string_view name) const {
  for (const auto& [n, f] : functions_)
    if (n == name) return f;
  return nullptr;
}

std::vector<std::string_view> Registry::names() const {
  std::vector<std::string_view> out;
  for (const KernelDef& d : defs_) out.push_back(d.name);
  return out;
}

}  // namespace kiln::rt
