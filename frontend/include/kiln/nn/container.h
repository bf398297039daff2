#pragma once
// Containers: Sequential (children named "0", "1", ... or by the caller), ModuleList, ModuleDict.

#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/nn/module.h"

namespace kiln::nn {

// Calls its children in order, each through operator() (so their hooks run).
class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  Sequential(std::initializer_list<ModulePtr> modules);
  explicit Sequential(const std::vector<ModulePtr>& modules);
  // Named children: Sequential({{"conv", conv}, {"relu", relu}}).
  Sequential(std::initializer_list<std::pair<std::string, ModulePtr>> named);

  // Appends with the next index as its name, or with `name`.
  void push_back(ModulePtr module);
  void push_back(const std::string& name, ModulePtr module);
  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  const ModulePtr& operator[](size_t i) const;
  template <typename M>
  std::shared_ptr<M> at(size_t i) const {
    auto p = std::dynamic_pointer_cast<M>((*this)[i]);
    KILN_CHECK(p, "Sequential", "element ", i, " is a ", (*this)[i]->type_name(),
               ", not the requested type");
    return p;
  }
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

  Tensor forward(const Tensor& input) override;

 protected:
  void replace_module_impl(const std::string& name, ModulePtr module) override;

 private:
  std::vector<std::string> names_;
  std::vector<ModulePtr> modules_;
};

// Holds submodules by index ("0", "1", ...); has no forward.
class ModuleList : public Module {
 public:
  ModuleList() : Module("ModuleList") {}
  ModuleList(std::initializer_list<ModulePtr> modules);
  explicit ModuleList(const std::vector<ModulePtr>& modules);
  void push_back(ModulePtr module);
  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  const ModulePtr& operator[](size_t i) const;
  template <typename M>
  std::shared_ptr<M> at(size_t i) const {
    auto p = std::dynamic_pointer_cast<M>((*this)[i]);
    KILN_CHECK(p, "ModuleList", "element ", i, " is a ", (*this)[i]->type_name(),
               ", not the requested type");
    return p;
  }
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

 protected:
  void replace_module_impl(const std::string& name, ModulePtr module) override;

 private:
  std::vector<ModulePtr> modules_;
};

// Holds submodules by name, in insertion order; has no forward.
class ModuleDict : public Module {
 public:
  ModuleDict() : Module("ModuleDict") {}
  ModuleDict(std::initializer_list<std::pair<std::string, ModulePtr>> named);
  void insert(const std::string& name, ModulePtr module);
  bool contains(const std::string& name) const { return modules_.contains(name); }
  size_t size() const { return modules_.size(); }
  const ModulePtr& operator[](const std::string& name) const { return modules_.at(name); }
  template <typename M>
  std::shared_ptr<M> at(const std::string& name) const {
    auto p = std::dynamic_pointer_cast<M>((*this)[name]);
    KILN_CHECK(p, "ModuleDict", "'", name, "' is a ", (*this)[name]->type_name(),
               ", not the requested type");
    return p;
  }
  std::vector<std::string> keys() const { return modules_.keys(); }
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

 protected:
  void replace_module_impl(const std::string& name, ModulePtr module) override;

 private:
  OrderedDict<ModulePtr> modules_;
};

}  // namespace kiln::nn
