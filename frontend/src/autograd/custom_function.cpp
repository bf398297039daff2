#include "kiln/custom_function.h"

#include <cxxabi.h>

#include <cstdlib>

#include "kiln/dispatch.h"

namespace kiln::autograd {

std::string demangle(const char* mangled) {
  int status = 0;
  char* out = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string name = status == 0 && out ? out : mangled;
  std::free(out);
  return name;
}

TensorList AutogradContext::get_saved_variables() const {
  TensorList out;
  out.reserve(saved_.size());
  for (const auto& s : saved_) out.push_back(s.unpack(*owner_));
  return out;
}

void CppNodeBase::finalize_saved(const TensorList& outputs) {
  ctx.owner_ = this;
  for (const Tensor& t : ctx.to_save_) {
    bool is_output = false;
    for (const Tensor& o : outputs) is_output |= o.defined() && t.defined() && o.is_same(t);
    ctx.saved_.emplace_back(t, is_output);
  }
  ctx.to_save_.clear();
}

TensorList CppNodeBase::select_input_grads(TensorList&& per_arg, size_t num_args) const {
  KILN_CHECK(per_arg.size() == num_args || per_arg.size() == tensor_arg_index.size(), node_name,
             "backward returned ", per_arg.size(),
             " gradients; expected one per forward argument (", num_args, ")");
  if (per_arg.size() == tensor_arg_index.size() && num_args != tensor_arg_index.size()) {
    return std::move(per_arg);  // already one per tensor input
  }
  TensorList out;
  out.reserve(tensor_arg_index.size());
  for (size_t i : tensor_arg_index) out.push_back(std::move(per_arg[i]));
  return out;
}

namespace detail {

void wrap_outputs(const std::shared_ptr<CppNodeBase>& node, const TensorList& inputs,
                  TensorList& outputs, bool needs_grad) {
  // A tracer checks that forward computed its outputs with ops it recorded.
  if (auto* hook = dispatch::tracer()) [[unlikely]]
    hook->on_custom_function(node->node_name, outputs);
  for (const Tensor& d : node->ctx.dirty_) bump_version(d);
  // The context keeps none of these after apply: a dirty input is also an output, whose grad_fn
  // is this node, so holding it would be a reference cycle (node -> tensor -> node) that leaks
  // the whole graph.
  TensorList dirty, non_differentiable;
  dirty.swap(node->ctx.dirty_);
  non_differentiable.swap(node->ctx.non_differentiable_);
  if (!needs_grad) {
    node->ctx.to_save_.clear();
    return;
  }
  // Outputs that alias an input not marked dirty would silently share history: make them views.
  for (Tensor& o : outputs) {
    for (const Tensor& in : inputs) {
      bool is_dirty = false;
      for (const Tensor& d : dirty) is_dirty |= d.is_same(in);
      if (o.is_same(in) && !is_dirty) o = o.detach();
    }
  }
  TensorList differentiable = outputs;
  for (Tensor& o : differentiable) {
    for (const Tensor& nd : non_differentiable) {
      if (o.is_same(nd)) o = Tensor();
    }
  }
  set_history(node, inputs, differentiable);
  node->finalize_saved(outputs);
}

}  // namespace detail
}  // namespace kiln::autograd
