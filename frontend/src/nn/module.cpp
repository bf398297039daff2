#include "kiln/nn/module.h"

#include <algorithm>
#include <ostream>
#include <sstream>
#include <unordered_set>

#include "kiln/autograd.h"
#include "kiln/ops.h"

namespace kiln::nn {

namespace {

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

std::string shape_str(const Dims& d) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < d.size(); ++i) os << (i ? ", " : "") << d[i];
  os << "]";
  return os.str();
}

// State shared by the two identity nodes that one call of a module with full backward hooks
// puts around its inputs and outputs.
struct BackwardHookState {
  Module* module = nullptr;
  std::vector<BackwardHook> hooks;
  size_t num_inputs = 0;
  std::vector<size_t> wrapped_inputs;  // positions of inputs that require grad
  TensorList grad_outputs;
  bool have_grad_outputs = false;

  TensorList run_hooks(TensorList grad_input) {
    for (const auto& h : hooks) {
      if (auto r = h(*module, grad_input, grad_outputs)) {
        KILN_CHECK(r->size() == grad_input.size(), "register_full_backward_hook", "hook returned ",
                   r->size(), " gradients, expected ", grad_input.size(), " (one per input)");
        grad_input = std::move(*r);
      }
    }
    return grad_input;
  }
};

TensorList wrap_inputs(const std::shared_ptr<BackwardHookState>& st, const TensorList& inputs) {
  st->num_inputs = inputs.size();
  TensorList sub;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].defined() && inputs[i].requires_grad()) {
      st->wrapped_inputs.push_back(i);
      sub.push_back(inputs[i]);
    }
  }
  if (sub.empty()) return inputs;
  TensorList outs;
  for (const Tensor& t : sub) outs.push_back(t.detach());
  autograd::record("BackwardHookFunctionBackward", sub, outs, {}, {},
                   [st](const TensorList&, const TensorList& grads) {
                     TensorList full(st->num_inputs);
                     for (size_t k = 0; k < st->wrapped_inputs.size(); ++k) {
                       full[st->wrapped_inputs[k]] = grads[k];
                     }
                     full = st->run_hooks(std::move(full));
                     TensorList back;
                     for (size_t idx : st->wrapped_inputs) back.push_back(full[idx]);
                     return back;
                   });
  TensorList result = inputs;
  for (size_t k = 0; k < st->wrapped_inputs.size(); ++k) result[st->wrapped_inputs[k]] = outs[k];
  return result;
}

TensorList wrap_outputs(const std::shared_ptr<BackwardHookState>& st, const TensorList& outputs) {
  std::vector<size_t> pos;
  TensorList sub;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].defined() && outputs[i].requires_grad()) {
      pos.push_back(i);
      sub.push_back(outputs[i]);
    }
  }
  if (sub.empty()) return outputs;
  TensorList outs;
  for (const Tensor& t : sub) outs.push_back(t.detach());
  const size_t n = outputs.size();
  autograd::record("BackwardHookFunctionBackward", sub, outs, {}, {},
                   [st, pos, n](const TensorList&, const TensorList& grads) {
                     st->grad_outputs.assign(n, Tensor());
                     for (size_t k = 0; k < pos.size(); ++k) st->grad_outputs[pos[k]] = grads[k];
                     st->have_grad_outputs = true;
                     // No input carries a gradient: the hooks run now, with empty grad_input.
                     if (st->wrapped_inputs.empty()) st->run_hooks(TensorList(st->num_inputs));
                     return grads;
                   });
  TensorList result = outputs;
  for (size_t k = 0; k < pos.size(); ++k) result[pos[k]] = outs[k];
  return result;
}

}  // namespace

Module::Module(std::string type_name) : type_name_(std::move(type_name)) {}
Module::~Module() = default;

Tensor Module::forward(const Tensor&) {
  fail(type_name_, "forward(const Tensor&) is not implemented for this module");
}

TensorList Module::forward_list(const TensorList& inputs) {
  KILN_CHECK(inputs.size() == 1, type_name_, "forward expects 1 input, got ", inputs.size());
  return {forward(inputs[0])};
}

TensorList Module::call(const TensorList& inputs_in) {
  TensorList inputs = inputs_in;
  for (const auto& [id, hook] : forward_pre_hooks_) {
    if (auto r = hook(*this, inputs)) inputs = std::move(*r);
  }
  std::shared_ptr<BackwardHookState> bw;
  if (!backward_hooks_.empty() && autograd::grad_enabled()) {
    bw = std::make_shared<BackwardHookState>();
    bw->module = this;
    for (const auto& [id, hook] : backward_hooks_) bw->hooks.push_back(hook);
    inputs = wrap_inputs(bw, inputs);
  }
  TensorList outputs = forward_list(inputs);
  for (const auto& [id, hook] : forward_hooks_) {
    if (auto r = hook(*this, inputs, outputs)) outputs = std::move(*r);
  }
  if (bw) outputs = wrap_outputs(bw, outputs);
  return outputs;
}

Tensor Module::operator()(const Tensor& input) {
  TensorList out = call({input});
  KILN_CHECK(!out.empty(), type_name_, "forward returned no outputs");
  return out[0];
}

// --- registration

void Module::check_new_name(const std::string& name, const char* what) const {
  KILN_CHECK(!name.empty(), type_name_, what, " name must not be empty");
  KILN_CHECK(name.find('.') == std::string::npos, type_name_, what,
             " name must not contain '.', got '", name, "'");
  auto taken = [&](const auto& v) {
    return std::any_of(v.begin(), v.end(), [&](const auto& s) { return s.name == name; });
  };
  bool child = std::any_of(children_.begin(), children_.end(),
                           [&](const auto& c) { return c.first == name; });
  KILN_CHECK(!taken(params_) && !taken(buffers_) && !child, type_name_, "attribute '", name,
             "' already exists");
}

Tensor& Module::register_parameter(const std::string& name, Tensor tensor, bool requires_grad) {
  check_new_name(name, "parameter");
  if (tensor.defined()) {
    KILN_CHECK(!requires_grad || tensor.is_floating_point(), type_name_, "parameter '", name,
               "' must be floating point to require grad, got ", tensor.dtype());
    if (!tensor.is_leaf()) tensor = tensor.detach();
    tensor.requires_grad_(requires_grad);
  }
  params_.push_back({name, std::make_unique<Tensor>(std::move(tensor)), true});
  return *params_.back().tensor;
}

Tensor& Module::register_buffer(const std::string& name, Tensor tensor, bool persistent) {
  check_new_name(name, "buffer");
  buffers_.push_back({name, std::make_unique<Tensor>(std::move(tensor)), persistent});
  return *buffers_.back().tensor;
}

void Module::register_module_impl(const std::string& name, ModulePtr module) {
  check_new_name(name, "submodule");
  KILN_CHECK(module.get() != this, type_name_, "a module cannot be its own child ('", name, "')");
  children_.emplace_back(name, std::move(module));
}

void Module::replace_module_impl(const std::string& name, ModulePtr module) {
  for (auto& [n, m] : children_) {
    if (n == name) {
      m = std::move(module);
      return;
    }
  }
  fail(type_name_, "no submodule named '", name, "' to replace");
}

// --- traversal

ModulePtr Module::self_ptr() {
  if (auto p = weak_from_this().lock()) return p;
  // A module not owned by a shared_ptr (on the stack): hand out a non-owning pointer.
  return ModulePtr(ModulePtr(), this);
}

void Module::collect_named_modules(const std::string& prefix, bool include_self,
                                   OrderedDict<ModulePtr>& out, std::vector<const Module*>& seen) {
  if (std::find(seen.begin(), seen.end(), this) != seen.end()) return;
  seen.push_back(this);
  if (include_self) out.insert(prefix, self_ptr());
  for (const auto& [name, child] : children_) {
    if (!child) continue;
    child->collect_named_modules(join(prefix, name), true, out, seen);
  }
}

OrderedDict<ModulePtr> Module::named_modules(const std::string& prefix, bool include_self) {
  OrderedDict<ModulePtr> out;
  std::vector<const Module*> seen;
  collect_named_modules(prefix, include_self, out, seen);
  return out;
}

std::vector<ModulePtr> Module::modules(bool include_self) {
  return named_modules("", include_self).values();
}

std::vector<ModulePtr> Module::children() const {
  std::vector<ModulePtr> out;
  for (const auto& [name, c] : children_)
    if (c) out.push_back(c);
  return out;
}

OrderedDict<ModulePtr> Module::named_children() const {
  OrderedDict<ModulePtr> out;
  for (const auto& [name, c] : children_)
    if (c) out.insert(name, c);
  return out;
}

namespace {
template <typename SlotsOf>
OrderedDict<Tensor> named_tensors(const Module& root, bool recurse, SlotsOf slots_of) {
  OrderedDict<Tensor> out;
  std::unordered_set<const TensorImpl*> seen;
  Module& self = const_cast<Module&>(root);
  auto mods = recurse ? self.named_modules() : OrderedDict<ModulePtr>{{"", self.get_submodule("")}};
  for (const auto& [prefix, m] : mods) {
    for (const auto& [name, t] : slots_of(*m)) {
      if (!t->defined() || !seen.insert(t->impl()).second) continue;
      out.insert(join(prefix, name), *t);
    }
  }
  return out;
}
}  // namespace

OrderedDict<Tensor> Module::named_parameters(bool recurse) const {
  return named_tensors(*this, recurse, [](const Module& m) {
    std::vector<std::pair<std::string, const Tensor*>> v;
    for (const auto& s : m.params_) v.emplace_back(s.name, s.tensor.get());
    return v;
  });
}

OrderedDict<Tensor> Module::named_buffers(bool recurse) const {
  return named_tensors(*this, recurse, [](const Module& m) {
    std::vector<std::pair<std::string, const Tensor*>> v;
    for (const auto& s : m.buffers_) v.emplace_back(s.name, s.tensor.get());
    return v;
  });
}

TensorList Module::parameters(bool recurse) const {
  return named_parameters(recurse).values();
}
TensorList Module::buffers(bool recurse) const {
  return named_buffers(recurse).values();
}

int64_t Module::num_parameters(bool only_trainable) const {
  int64_t n = 0;
  for (const Tensor& p : parameters())
    if (!only_trainable || p.requires_grad()) n += p.numel();
  return n;
}

ModulePtr Module::get_submodule(const std::string& qualified_name) const {
  ModulePtr cur = const_cast<Module*>(this)->self_ptr();
  if (qualified_name.empty()) return cur;
  size_t start = 0;
  while (true) {
    size_t dot = qualified_name.find('.', start);
    std::string part = qualified_name.substr(start, dot == std::string::npos ? dot : dot - start);
    ModulePtr next;
    for (const auto& [n, c] : cur->children_)
      if (n == part) next = c;
    KILN_CHECK(next, type_name_, "no submodule '", part, "' in '", qualified_name, "' (",
               cur->type_name_, " has no child of that name)");
    cur = next;
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

namespace {
std::pair<std::string, std::string> split_last(const std::string& q) {
  size_t dot = q.rfind('.');
  if (dot == std::string::npos) return {"", q};
  return {q.substr(0, dot), q.substr(dot + 1)};
}
}  // namespace

Tensor& Module::get_parameter(const std::string& qualified_name) {
  auto [mod, name] = split_last(qualified_name);
  ModulePtr m = get_submodule(mod);
  for (auto& s : m->params_)
    if (s.name == name) return *s.tensor;
  fail(type_name_, "no parameter named '", qualified_name, "'");
}

Tensor& Module::get_buffer(const std::string& qualified_name) {
  auto [mod, name] = split_last(qualified_name);
  ModulePtr m = get_submodule(mod);
  for (auto& s : m->buffers_)
    if (s.name == name) return *s.tensor;
  fail(type_name_, "no buffer named '", qualified_name, "'");
}

Module& Module::apply(const std::function<void(Module&)>& fn) {
  for (const auto& [n, c] : children_)
    if (c) c->apply(fn);
  fn(*this);
  return *this;
}

// --- mode and state

void Module::train(bool on) {
  training_ = on;
  for (const auto& [n, c] : children_)
    if (c) c->train(on);
}

void Module::zero_grad(bool set_to_none) {
  autograd::NoGradGuard no_grad;
  for (Tensor& p : parameters()) {
    if (!p.grad().defined()) continue;
    if (set_to_none) {
      p.set_grad(Tensor());
    } else {
      Tensor g = p.grad().detach();
      zero_(g);
    }
  }
}

void Module::convert_tensors(const std::function<bool(const Tensor&)>& applies,
                             const std::function<Tensor(const Tensor&)>& convert) {
  autograd::NoGradGuard no_grad;
  for (const ModulePtr& m : modules()) {
    for (auto& s : m->params_) {
      Tensor& t = *s.tensor;
      if (!t.defined() || !applies(t)) continue;
      Tensor grad = t.grad();
      Tensor n = convert(t).detach();
      n.requires_grad_(t.requires_grad());
      if (grad.defined()) n.set_grad(convert(grad).detach());
      t = n;
    }
    for (auto& s : m->buffers_) {
      Tensor& t = *s.tensor;
      if (t.defined() && applies(t)) t = convert(t).detach();
    }
  }
}

Module& Module::to(DType dtype) {
  KILN_CHECK(is_floating(dtype), type_name_, "to() expects a floating-point dtype, got ", dtype);
  convert_tensors([dtype](const Tensor& t) { return t.is_floating_point() && t.dtype() != dtype; },
                  [dtype](const Tensor& t) { return t.to(dtype); });
  return *this;
}

Module& Module::to(Device device) {
  convert_tensors([device](const Tensor& t) { return t.device() != device; },
                  [device](const Tensor& t) { return t.to(device); });
  return *this;
}

void Module::save_to_state_dict(const std::string& prefix, StateDict& out) const {
  for (const auto& s : params_)
    if (s.tensor->defined()) out.insert(join(prefix, s.name), s.tensor->detach());
  for (const auto& s : buffers_)
    if (s.tensor->defined() && s.persistent) out.insert(join(prefix, s.name), s.tensor->detach());
  for (const auto& [n, c] : children_)
    if (c) c->save_to_state_dict(join(prefix, n), out);
}

StateDict Module::state_dict() const {
  StateDict out;
  save_to_state_dict("", out);
  return out;
}

LoadStateDictResult Module::load_state_dict(const StateDict& dict, bool strict) {
  // Slots to write, by qualified name (shared modules reached twice write the same slot twice).
  std::vector<std::pair<std::string, Tensor*>> targets;
  std::unordered_set<std::string> omittable;  // may be missing from the checkpoint
  std::function<void(Module&, const std::string&)> collect = [&](Module& m,
                                                                 const std::string& prefix) {
    for (auto& s : m.params_)
      if (s.tensor->defined()) targets.emplace_back(join(prefix, s.name), s.tensor.get());
    for (auto& s : m.buffers_) {
      if (!s.tensor->defined() || !s.persistent) continue;
      targets.emplace_back(join(prefix, s.name), s.tensor.get());
      if (m.omittable_state(s.name)) omittable.insert(targets.back().first);
    }
    for (auto& [n, c] : m.children_)
      if (c) collect(*c, join(prefix, n));
  };
  collect(*this, "");

  LoadStateDictResult result;
  std::vector<std::string> mismatches;
  std::unordered_set<std::string> own;
  for (const auto& [name, slot] : targets) {
    own.insert(name);
    const Tensor* src = dict.find(name);
    if (!src) {
      if (!omittable.count(name)) result.missing_keys.push_back(name);
      continue;
    }
    if (!src->defined() || src->sizes() != slot->sizes()) {
      mismatches.push_back("size mismatch for " + name + ": copying a param with shape " +
                           (src->defined() ? shape_str(src->sizes()) : "<undefined>") +
                           " from checkpoint, the shape in current model is " +
                           shape_str(slot->sizes()) + ".");
    }
  }
  for (const auto& [name, t] : dict)
    if (!own.count(name)) result.unexpected_keys.push_back(name);

  const bool key_errors =
      strict && (!result.missing_keys.empty() || !result.unexpected_keys.empty());
  if (key_errors || !mismatches.empty()) {
    std::ostringstream os;
    os << "Error(s) in loading state_dict for " << type_name_ << ":";
    auto list = [&](const char* what, const std::vector<std::string>& keys) {
      if (keys.empty()) return;
      os << "\n\t" << what << " key(s) in state_dict: ";
      for (size_t i = 0; i < keys.size(); ++i) os << (i ? ", " : "") << '"' << keys[i] << '"';
      os << ".";
    };
    if (strict) {
      list("Missing", result.missing_keys);
      list("Unexpected", result.unexpected_keys);
    }
    for (const auto& m : mismatches) os << "\n\t" << m;
    fail("load_state_dict", os.str());
  }

  autograd::NoGradGuard no_grad;
  for (const auto& [name, slot] : targets) {
    const Tensor* src = dict.find(name);
    if (!src) continue;
    if (src->is_same(*slot)) continue;
    copy_(*slot, *src);
  }
  return result;
}

// --- hooks

size_t Module::register_forward_pre_hook(ForwardPreHook hook) {
  forward_pre_hooks_.emplace_back(next_hook_id_, std::move(hook));
  return next_hook_id_++;
}

size_t Module::register_forward_hook(ForwardHook hook) {
  forward_hooks_.emplace_back(next_hook_id_, std::move(hook));
  return next_hook_id_++;
}

size_t Module::register_full_backward_hook(BackwardHook hook) {
  backward_hooks_.emplace_back(next_hook_id_, std::move(hook));
  return next_hook_id_++;
}

bool Module::remove_hook(size_t handle) {
  auto drop = [handle](auto& v) {
    auto it = std::find_if(v.begin(), v.end(), [&](const auto& p) { return p.first == handle; });
    if (it == v.end()) return false;
    v.erase(it);
    return true;
  };
  return drop(forward_pre_hooks_) || drop(forward_hooks_) || drop(backward_hooks_);
}

// --- printing

void Module::repr_into(std::ostream& os, int indent) const {
  os << type_name_ << "(" << extra_repr();
  if (!children_.empty()) {
    os << "\n";
    for (const auto& [n, c] : children_) {
      os << std::string(indent + 2, ' ') << "(" << n << "): ";
      if (c)
        c->repr_into(os, indent + 2);
      else
        os << "None";
      os << "\n";
    }
    os << std::string(indent, ' ');
  }
  os << ")";
}

std::string Module::repr() const {
  std::ostringstream os;
  repr_into(os, 0);
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Module& m) {
  return os << m.repr();
}

}  // namespace kiln::nn
