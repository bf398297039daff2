#pragma once
// Custom differentiable functions — the extension API, as in PyTorch's C++ frontend:
//
//   struct Cube : kiln::autograd::Function<Cube> {
//     static Tensor forward(AutogradContext* ctx, const Tensor& x) {
//       ctx->save_for_backward({x});
//       return my_c_cube(x);                     // any code: a C library, a hand kernel
//     }
//     static TensorList backward(AutogradContext* ctx, TensorList grads) {
//       Tensor x = ctx->get_saved_variables()[0];
//       return {grads[0] * 3.0 * x * x};         // one gradient per forward argument
//     }
//   };
//   Tensor y = Cube::apply(x);

#include <any>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "kiln/autograd.h"

namespace kiln::autograd {

class AutogradContext;
class CppNodeBase;
namespace detail {
void wrap_outputs(const std::shared_ptr<CppNodeBase>& node, const TensorList& inputs,
                  TensorList& outputs, bool needs_grad);
}

class AutogradContext {
 public:
  void save_for_backward(TensorList tensors) { to_save_ = std::move(tensors); }
  TensorList get_saved_variables() const;
  // Inputs the forward modified in place: their versions are bumped and their history rebased.
  void mark_dirty(const TensorList& tensors) { dirty_ = tensors; }
  // Outputs that get no gradient (indices, masks).
  void mark_non_differentiable(const TensorList& tensors) { non_differentiable_ = tensors; }
  // Arbitrary non-tensor state for backward (sizes, flags, scalars).
  std::unordered_map<std::string, std::any> saved_data;

 private:
  template <typename T>
  friend struct Function;
  friend class CppNodeBase;
  friend void detail::wrap_outputs(const std::shared_ptr<CppNodeBase>&, const TensorList&,
                                   TensorList&, bool);
  TensorList to_save_;
  TensorList dirty_;
  TensorList non_differentiable_;
  std::vector<SavedVariable> saved_;
  const Node* owner_ = nullptr;
};

class CppNodeBase : public Node {
 public:
  AutogradContext ctx;
  std::string node_name;
  // Position of each tensor input among the forward's arguments.
  std::vector<size_t> tensor_arg_index;
  std::string name() const override { return node_name; }
  void release_variables() override {
    for (auto& s : ctx.saved_) s.reset();
  }
  // Converts the raw tensors saved during forward, now that outputs are known.
  void finalize_saved(const TensorList& outputs);
  // Picks the gradients of tensor arguments out of backward's per-argument list.
  TensorList select_input_grads(TensorList&& per_arg, size_t num_args) const;
};

template <typename T>
class CppNode final : public CppNodeBase {
 public:
  TensorList apply(TensorList&& grads) override {
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!grads[i].defined() && i < output_sizes.size()) {
        grads[i] = Tensor(kiln::zeros(output_sizes[i], output_dtypes[i]));
      }
    }
    return select_input_grads(T::backward(&ctx, std::move(grads)), num_args);
  }
  size_t num_args = 0;
};

std::string demangle(const char* mangled);

namespace detail {
inline void collect(TensorList& out, std::vector<size_t>& index, size_t pos, const Tensor& t) {
  out.push_back(t);
  index.push_back(pos);
}
template <typename A>
inline void collect(TensorList&, std::vector<size_t>&, size_t, const A&) {}
}  // namespace detail

template <typename T>
struct Function {
  template <typename... Args>
  static auto apply(Args&&... args) {
    TensorList inputs;
    std::vector<size_t> index;
    size_t pos = 0;
    (detail::collect(inputs, index, pos++, args), ...);
    const bool needs_grad = any_requires_grad(inputs);
    auto node = std::make_shared<CppNode<T>>();
    node->node_name = demangle(typeid(T).name());
    node->tensor_arg_index = index;
    node->num_args = sizeof...(Args);
    using Result = decltype(T::forward(&node->ctx, std::forward<Args>(args)...));
    Result result;
    {
      NoGradGuard no_grad;
      result = T::forward(&node->ctx, std::forward<Args>(args)...);
    }
    if constexpr (std::is_same_v<Result, Tensor>) {
      TensorList outputs{result};
      detail::wrap_outputs(node, inputs, outputs, needs_grad);
      return outputs[0];
    } else {
      TensorList outputs = result;
      detail::wrap_outputs(node, inputs, outputs, needs_grad);
      return outputs;
    }
  }
};

}  // namespace kiln::autograd
