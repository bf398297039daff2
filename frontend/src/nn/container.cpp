#include "kiln/nn/container.h"

namespace kiln::nn {

Sequential::Sequential(std::initializer_list<ModulePtr> modules) : Module("Sequential") {
  for (const auto& m : modules) push_back(m);
}

Sequential::Sequential(const std::vector<ModulePtr>& modules) : Module("Sequential") {
  for (const auto& m : modules) push_back(m);
}

Sequential::Sequential(std::initializer_list<std::pair<std::string, ModulePtr>> named)
    : Module("Sequential") {
  for (const auto& [n, m] : named) push_back(n, m);
}

void Sequential::push_back(ModulePtr module) {
  push_back(std::to_string(modules_.size()), std::move(module));
}

void Sequential::push_back(const std::string& name, ModulePtr module) {
  KILN_CHECK(module, "Sequential", "cannot append a null module ('", name, "')");
  register_module(name, module);
  names_.push_back(name);
  modules_.push_back(std::move(module));
}

void Sequential::replace_module_impl(const std::string& name, ModulePtr module) {
  KILN_CHECK(module, "Sequential", "cannot replace '", name, "' with a null module");
  Module::replace_module_impl(name, module);
  for (size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == name) modules_[i] = module;
}

const ModulePtr& Sequential::operator[](size_t i) const {
  KILN_CHECK(i < modules_.size(), "Sequential", "index ", i, " out of range for size ",
             modules_.size());
  return modules_[i];
}

Tensor Sequential::forward(const Tensor& input) {
  Tensor x = input;
  for (const auto& m : modules_) x = (*m)(x);
  return x;
}

ModuleList::ModuleList(std::initializer_list<ModulePtr> modules) : Module("ModuleList") {
  for (const auto& m : modules) push_back(m);
}

ModuleList::ModuleList(const std::vector<ModulePtr>& modules) : Module("ModuleList") {
  for (const auto& m : modules) push_back(m);
}

void ModuleList::push_back(ModulePtr module) {
  KILN_CHECK(module, "ModuleList", "cannot append a null module");
  register_module(std::to_string(modules_.size()), module);
  modules_.push_back(std::move(module));
}

void ModuleList::replace_module_impl(const std::string& name, ModulePtr module) {
  KILN_CHECK(module, "ModuleList", "cannot replace '", name, "' with a null module");
  Module::replace_module_impl(name, module);
  modules_[std::stoul(name)] = std::move(module);
}

const ModulePtr& ModuleList::operator[](size_t i) const {
  KILN_CHECK(i < modules_.size(), "ModuleList", "index ", i, " out of range for size ",
             modules_.size());
  return modules_[i];
}

ModuleDict::ModuleDict(std::initializer_list<std::pair<std::string, ModulePtr>> named)
    : Module("ModuleDict") {
  for (const auto& [n, m] : named) insert(n, m);
}

void ModuleDict::insert(const std::string& name, ModulePtr module) {
  KILN_CHECK(module, "ModuleDict", "cannot insert a null module ('", name, "')");
  register_module(name, module);
  modules_.insert(name, std::move(module));
}

}  // namespace kiln::nn

namespace kiln::nn {
void ModuleDict::replace_module_impl(const std::string& name, ModulePtr module) {
  KILN_CHECK(module, "ModuleDict", "cannot replace '", name, "' with a null module");
  Module::replace_module_impl(name, module);
  modules_.insert_or_assign(name, std::move(module));
}
}  // namespace kiln::nn
