#pragma once
// Tape-based reverse-mode autograd. Each differentiable op that sees an input requiring grad
// records a Node holding only what its backward needs; outputs point at the node. backward()
// walks the graph in dependency order and accumulates into leaves.

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::autograd {

class Node;

struct Edge {
  std::shared_ptr<Node> fn;
  uint32_t input_nr = 0;
  bool valid() const { return static_cast<bool>(fn); }
};

// A tensor saved for backward, with the storage version at save time: unpacking after an in-place
// write raises an error naming the op and both versions.
class SavedVariable {
 public:
  SavedVariable() = default;
  SavedVariable(const Tensor& t, bool is_output);
  Tensor unpack(const Node& owner) const;
  void reset();
  bool defined() const { return static_cast<bool>(data_); }
  bool is_leaf() const { return was_leaf_; }

 private:
  TensorImplPtr data_;  // the saved data, without autograd history
  uint64_t saved_version_ = 0;
  bool is_output_ = false;
  bool requires_grad_ = false;
  bool was_leaf_ = false;
  std::weak_ptr<Node> weak_grad_fn_;  // for saved outputs (a strong ref would be a cycle)
  uint32_t output_nr_ = 0;
};

using PreHook = std::function<std::optional<Tensor>(const Tensor&)>;

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node();
  virtual ~Node() = default;
  virtual std::string name() const = 0;
  // grads[i] is the gradient of output i (undefined when it did not reach this node).
  virtual TensorList apply(TensorList&& grads) = 0;
  // Frees saved tensors once backward ran without retain_graph.
  virtual void release_variables() {}

  std::vector<Edge> next_edges;
  uint64_t sequence_nr() const { return sequence_nr_; }
  // Hooks on the gradient of output `nr`, run before apply (tensor hooks on non-leaves).
  std::vector<std::pair<uint32_t, std::pair<size_t, PreHook>>> pre_hooks;
  uint32_t num_outputs = 1;
  // Output metadata: to build zero gradients for outputs that received none.
  std::vector<Dims> output_sizes;
  std::vector<DType> output_dtypes;
  std::vector<Device> output_devices;

 private:
  uint64_t sequence_nr_;
};

// Accumulates incoming gradients into a leaf's .grad.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(TensorImplPtr leaf) : leaf_(std::move(leaf)) {}
  std::string name() const override { return "AccumulateGrad"; }
  TensorList apply(TensorList&& grads) override;
  const TensorImplPtr& leaf() const { return leaf_; }

 private:
  TensorImplPtr leaf_;
};

struct AutogradMeta : AutogradMetaBase {
  bool requires_grad = false;
  bool retains_grad = false;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;
  uint32_t output_nr = 0;
  // A leaf shared by threads that build graphs concurrently must get one accumulator, or a
  // thread's autograd::grad looks for an edge that another thread's accumulator replaced.
  std::mutex grad_accumulator_mutex;
  std::weak_ptr<Node> grad_accumulator;             // guarded by grad_accumulator_mutex
  std::vector<std::pair<size_t, Hook>> leaf_hooks;  // hooks on a leaf's gradient
  // Run after AccumulateGrad updated .grad.
  std::vector<std::pair<size_t, PostAccumulateGradHook>> post_accumulate_hooks;
  std::string name;      // optional, used in messages and by the tracer
  bool is_view = false;  // a view of a tensor with history: in-place writes are refused
};

// --- grad mode
bool grad_enabled();
void set_grad_enabled(bool enabled);
bool inference_mode_enabled();

class NoGradGuard {
 public:
  NoGradGuard() : prev_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev_); }

 private:
  bool prev_;
};
class EnableGradGuard {
 public:
  EnableGradGuard() : prev_(grad_enabled()) { set_grad_enabled(true); }
  ~EnableGradGuard() { set_grad_enabled(prev_); }

 private:
  bool prev_;
};
class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled) : prev_(grad_enabled()) { set_grad_enabled(enabled); }
  ~GradModeGuard() { set_grad_enabled(prev_); }

 private:
  bool prev_;
};
// No graph and no version-counter bookkeeping: the fastest way to run a model.
class InferenceMode {
 public:
  InferenceMode();
  ~InferenceMode();

 private:
  bool prev_grad_, prev_inference_;
};

// Marks an in-place write to t's storage (skipped in InferenceMode, which keeps no graph that
// could read a stale saved tensor).
inline void bump_version(const Tensor& t) {
  if (!inference_mode_enabled()) t.impl()->storage()->bump_version();
}

// --- engine
// Computes d(outputs)/d(inputs) · grad_outputs. Leaves' .grad is left untouched.
TensorList grad(const TensorList& outputs, const TensorList& inputs,
                const TensorList& grad_outputs = {}, bool retain_graph = false,
                bool create_graph = false, bool allow_unused = false);
// Accumulates into the leaves reachable from `roots`.
void backward(const TensorList& roots, const TensorList& grad_roots = {}, bool retain_graph = false,
              bool create_graph = false);

// Runs `callback` once the backward pass that is running on this thread has finished (PyTorch's
// Variable._execution_engine.queue_callback): how a hook that starts work during backward (a
// data-parallel gradient all-reduce) waits for it at the end. Throws when no backward is running.
void queue_callback(std::function<void()> callback);

// --- used by op implementations
// True when grad mode is on and any input requires grad.
bool any_requires_grad(std::initializer_list<const Tensor*> inputs);
bool any_requires_grad(const TensorList& inputs);
// The edge a gradient for `t` flows along (its grad_fn, or its leaf accumulator).
Edge gradient_edge(const Tensor& t);
// Makes `node` the grad_fn of `outputs` and points its edges at `inputs`.
void set_history(const std::shared_ptr<Node>& node, const TensorList& inputs,
                 const TensorList& outputs);

// A node whose backward is a function over saved tensors: how most ops define their gradient.
using BackwardFn = std::function<TensorList(const TensorList& saved, const TensorList& grads)>;
class FunctionNode final : public Node {
 public:
  FunctionNode(std::string name, BackwardFn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  std::string name() const override { return name_; }
  TensorList apply(TensorList&& grads) override;
  void release_variables() override;
  void save(const Tensor& t, bool is_output = false) { saved_.emplace_back(t, is_output); }

 private:
  std::string name_;
  BackwardFn fn_;
  std::vector<SavedVariable> saved_;
  bool released_ = false;
};

// Records `fn` as the backward of an op with these inputs and outputs when any input requires
// grad; `saved` are tensors the backward reads (marked as outputs when they are). Returns the node
// (or null when nothing needed recording).
std::shared_ptr<FunctionNode> record(const char* name, const TensorList& inputs,
                                     const TensorList& outputs, const TensorList& saved_inputs,
                                     const TensorList& saved_outputs, BackwardFn fn);

}  // namespace kiln::autograd
