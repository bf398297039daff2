#pragma once
// kiln::nn::Module — the base of every layer and model, as torch.nn.Module.
//
// Modules live in std::shared_ptr (std::make_shared<nn::Linear>(4, 3)). A module owns its
// parameters and buffers in stable slots: register_parameter returns a Tensor& that a layer keeps
// as a reference member (Linear::weight), so replacing the slot (to(dtype), assignment) is seen
// by the layer's forward. Names are qualified with dots through submodules
// ("layer1.0.conv1.weight"), in registration order, exactly as PyTorch orders them.
//
// Calling a module (operator() / call) runs forward pre-hooks, forward, forward hooks, and, when
// full backward hooks are registered, wraps inputs and outputs in identity autograd nodes that
// hand the hooks grad_input / grad_output during backward. A module may be called any number of
// times in one forward; gradients of its parameters sum.

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/nn/ordered_dict.h"
#include "kiln/tensor.h"

namespace kiln::nn {

class Module;
using ModulePtr = std::shared_ptr<Module>;
using StateDict = OrderedDict<Tensor>;

// Hooks return std::nullopt to keep the value they saw, or a replacement.
using ForwardPreHook = std::function<std::optional<TensorList>(Module&, const TensorList& inputs)>;
using ForwardHook = std::function<std::optional<TensorList>(Module&, const TensorList& inputs,
                                                            const TensorList& outputs)>;
// grad_input: gradients w.r.t. the module's tensor inputs (undefined for inputs that do not
// require grad); grad_output: gradients w.r.t. its outputs. A returned list replaces grad_input.
using BackwardHook = std::function<std::optional<TensorList>(Module&, const TensorList& grad_input,
                                                             const TensorList& grad_output)>;

// What load_state_dict(strict = false) could not match.
struct LoadStateDictResult {
  std::vector<std::string> missing_keys;
  std::vector<std::string> unexpected_keys;
};

class Module : public std::enable_shared_from_this<Module> {
 public:
  explicit Module(std::string type_name = "Module");
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  virtual ~Module();

  // The class name shown by printing and in error messages ("Linear", "ResNet").
  const std::string& type_name() const { return type_name_; }

  // --- forward
  // Ordinary layers override forward(x). Modules with several inputs or outputs override
  // forward_list (inputs/outputs in a fixed order; undefined tensors stand for "not given").
  virtual Tensor forward(const Tensor& input);
  virtual TensorList forward_list(const TensorList& inputs);
  // Runs the hooks around forward_list.
  TensorList call(const TensorList& inputs);
  Tensor operator()(const Tensor& input);

  // --- registration (names: non-empty, no '.', unique among this module's members)
  // Stores `tensor` (requires_grad_ set as asked; an undefined tensor registers "no parameter",
  // as PyTorch's None: skipped by parameters() and state_dict()). Returns the stable slot.
  Tensor& register_parameter(const std::string& name, Tensor tensor, bool requires_grad = true);
  // Non-persistent buffers are left out of state_dict().
  Tensor& register_buffer(const std::string& name, Tensor tensor, bool persistent = true);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    static_assert(std::is_base_of_v<Module, M>, "register_module needs an nn::Module");
    register_module_impl(name, module);
    return module;
  }
  // Swaps an already registered child.
  template <typename M>
  std::shared_ptr<M> replace_module(const std::string& name, std::shared_ptr<M> module) {
    replace_module_impl(name, module);
    return module;
  }

  // --- traversal (pre-order: self, then children in registration order)
  TensorList parameters(bool recurse = true) const;
  OrderedDict<Tensor> named_parameters(bool recurse = true) const;
  TensorList buffers(bool recurse = true) const;
  OrderedDict<Tensor> named_buffers(bool recurse = true) const;
  std::vector<ModulePtr> children() const;
  OrderedDict<ModulePtr> named_children() const;
  // Every module once (shared submodules deduplicated), self first when include_self.
  std::vector<ModulePtr> modules(bool include_self = true);
  OrderedDict<ModulePtr> named_modules(const std::string& prefix = "", bool include_self = true);
  // Qualified look-ups: "layer1.0.conv1" / "layer1.0.conv1.weight"; throw when absent.
  ModulePtr get_submodule(const std::string& qualified_name) const;
  Tensor& get_parameter(const std::string& qualified_name);
  Tensor& get_buffer(const std::string& qualified_name);
  // Children first, then self (as PyTorch).
  Module& apply(const std::function<void(Module&)>& fn);
  // Total number of elements over parameters() (shared parameters counted once).
  int64_t num_parameters(bool only_trainable = false) const;

  // --- mode
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Drops (set_to_none) or zeroes every parameter's .grad.
  void zero_grad(bool set_to_none = true);
  // Converts floating-point parameters and buffers (and their grads) to `dtype`.
  Module& to(DType dtype);
  // Moves every parameter and buffer to `device` (PyTorch's module.to(device) / .cuda()): new
  // leaf tensors in the same slots, so build optimizers after moving.
  Module& to(Device device);

  // --- state
  // Parameters, then persistent buffers, per module in pre-order; tensors share data with the
  // module (detached).
  StateDict state_dict() const;
  // Copies values in place (keeping parameter identity). Shape mismatches are always an error;
  // with strict, missing and unexpected keys are too. Nothing is copied when an error is raised.
  // An entry a module says checkpoints may omit (omittable_state) keeps its value when missing
  // and is not reported (PyTorch's rules: BatchNorm's num_batches_tracked, absent from
  // checkpoints written before it existed).
  LoadStateDictResult load_state_dict(const StateDict& dict, bool strict = true);

  // --- hooks (the handle removes the hook via remove_hook)
  size_t register_forward_pre_hook(ForwardPreHook hook);
  size_t register_forward_hook(ForwardHook hook);
  size_t register_full_backward_hook(BackwardHook hook);
  bool remove_hook(size_t handle);

  // --- printing (PyTorch's repr)
  virtual std::string extra_repr() const { return {}; }
  std::string repr() const;

 protected:
  void register_module_impl(const std::string& name, ModulePtr module);
  // Containers override it to keep their own lists in step.
  virtual void replace_module_impl(const std::string& name, ModulePtr module);
  // Replaces every parameter and buffer (of this module and its children) for which `applies`
  // holds with convert(it), detached; parameters keep requires_grad and get converted grads.
  void convert_tensors(const std::function<bool(const Tensor&)>& applies,
                       const std::function<Tensor(const Tensor&)>& convert);
  // Whether load_state_dict accepts a checkpoint without this module's entry `name` (its own
  // parameter or buffer name, unqualified).
  virtual bool omittable_state(const std::string& name) const { return false; }

 private:
  struct TensorSlot {
    std::string name;
    std::unique_ptr<Tensor> tensor;
    bool persistent = true;
  };
  void check_new_name(const std::string& name, const char* what) const;
  void collect_named_modules(const std::string& prefix, bool include_self,
                             OrderedDict<ModulePtr>& out, std::vector<const Module*>& seen);
  void save_to_state_dict(const std::string& prefix, StateDict& out) const;
  ModulePtr self_ptr();
  void repr_into(std::ostream& os, int indent) const;

  std::string type_name_;
  bool training_ = true;
  std::vector<TensorSlot> params_;
  std::vector<TensorSlot> buffers_;
  std::vector<std::pair<std::string, ModulePtr>> children_;

  size_t next_hook_id_ = 1;
  std::vector<std::pair<size_t, ForwardPreHook>> forward_pre_hooks_;
  std::vector<std::pair<size_t, ForwardHook>> forward_hooks_;
  std::vector<std::pair<size_t, BackwardHook>> backward_hooks_;
};

std::ostream& operator<<(std::ostream& os, const Module& m);

}  // namespace kiln::nn
