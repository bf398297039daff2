// The backward engine: counts dependencies from the roots, then runs nodes in an order where every
// node runs after all nodes that feed it gradient (a max-heap on creation order among the ready
// ones, so later ops run first, as in PyTorch). Input buffers are freed as soon as a node ran.

#include <algorithm>
#include <queue>
#include <unordered_map>

#include "kiln/autograd.h"
#include "kiln/dispatch.h"
#include "kiln/ops.h"

namespace kiln::autograd {
namespace {

thread_local bool tls_grad_enabled = true;
// Callbacks queued by the backward pass running on this thread (null when none runs).
thread_local std::vector<std::function<void()>>* tls_final_callbacks = nullptr;
thread_local bool tls_inference_mode = false;
std::atomic<uint64_t> g_sequence{0};

struct ByNewest {
  bool operator()(Node* a, Node* b) const { return a->sequence_nr() < b->sequence_nr(); }
};

// Adds `g` into a gradient slot (out of place: the slot's tensor may be shared with a caller).
void accumulate(Tensor& slot, Tensor&& g) {
  if (!g.defined()) return;
  if (!slot.defined()) {
    slot = std::move(g);
  } else {
    slot = slot + g;
  }
}

Tensor run_hooks(const std::vector<std::pair<size_t, Hook>>& hooks, Tensor g) {
  for (const auto& [id, hook] : hooks) {
    if (auto replaced = hook(g)) g = *replaced;
  }
  return g;
}

struct Capture {
  Node* node;
  uint32_t input_nr;
  size_t index;
};

void run_engine(const TensorList& roots, const TensorList& grad_roots, bool keep_graph,
                bool create_graph, const std::vector<Edge>* capture_edges, TensorList* captured) {
  KILN_CHECK(grad_roots.empty() || grad_roots.size() == roots.size(), "backward", "expected ",
             roots.size(), " gradients for ", roots.size(), " outputs, got ", grad_roots.size());
  // Root edges and their incoming gradients.
  std::vector<std::pair<Edge, Tensor>> root_grads;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    KILN_CHECK(r.requires_grad(), "backward", "element ", i,
               " of tensors does not require grad and does not have a grad_fn");
    Tensor g;
    if (i < grad_roots.size() && grad_roots[i].defined()) {
      g = grad_roots[i];
      KILN_CHECK(g.sizes() == r.sizes(), "backward", "expected gradient of shape ", r.sizes(),
                 " for output ", i, ", got ", g.sizes());
    } else {
      KILN_CHECK(r.numel() == 1, "backward",
                 "grad can be implicitly created only for scalar outputs, got shape ", r.sizes());
      g = ones_like(r);
    }
    root_grads.emplace_back(gradient_edge(r), std::move(g));
  }

  // Dependency counts over the reachable graph.
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack;
  std::unordered_map<Node*, bool> seen;
  for (auto& [edge, g] : root_grads) {
    if (!seen[edge.fn.get()]) {
      seen[edge.fn.get()] = true;
      stack.push_back(edge.fn.get());
    }
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges) {
      if (!e.fn) continue;
      deps[e.fn.get()]++;
      if (!seen[e.fn.get()]) {
        seen[e.fn.get()] = true;
        stack.push_back(e.fn.get());
      }
    }
  }

  std::vector<Capture> captures;
  if (capture_edges) {
    for (size_t i = 0; i < capture_edges->size(); ++i) {
      const Edge& e = (*capture_edges)[i];
      if (e.fn) captures.push_back({e.fn.get(), e.input_nr, i});
    }
  }

  std::unordered_map<Node*, TensorList> buffers;
  std::unordered_map<Node*, std::shared_ptr<Node>> keep_alive;
  std::priority_queue<Node*, std::vector<Node*>, ByNewest> ready;
  for (auto& [edge, g] : root_grads) {
    auto& buf = buffers[edge.fn.get()];
    if (buf.size() < edge.fn->num_outputs) buf.resize(edge.fn->num_outputs);
    accumulate(buf[edge.input_nr], std::move(g));
    keep_alive[edge.fn.get()] = edge.fn;
  }
  for (auto& [edge, g] : root_grads) {
    Node* n = edge.fn.get();
    if (deps[n] == 0 && keep_alive.count(n)) {
      ready.push(n);
      deps[n] = -1;  // queued
    }
  }

  // Callbacks belong to this pass; a backward run from inside a hook keeps its own.
  std::vector<std::function<void()>> final_callbacks;
  struct CallbackScope {
    std::vector<std::function<void()>>* prev = tls_final_callbacks;
    explicit CallbackScope(std::vector<std::function<void()>>* mine) { tls_final_callbacks = mine; }
    ~CallbackScope() { tls_final_callbacks = prev; }
  } callback_scope(&final_callbacks);

  GradModeGuard mode(create_graph);
  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    std::shared_ptr<Node> holder = keep_alive[node];
    auto buf_it = buffers.find(node);
    const bool has_grad = buf_it != buffers.end();
    TensorList grads;
    if (has_grad) {
      grads = std::move(buf_it->second);
      buffers.erase(buf_it);
    }
    grads.resize(node->num_outputs);
    for (auto& [nr, hook] : node->pre_hooks) {
      if (nr < grads.size() && grads[nr].defined()) {
        if (auto replaced = hook.second(grads[nr])) grads[nr] = *replaced;
      }
    }
    for (const Capture& c : captures) {
      if (c.node == node && c.input_nr < grads.size()) (*captured)[c.index] = grads[c.input_nr];
    }
    // grad() never touches .grad; a node no gradient reached has nothing to propagate.
    const bool skip = !has_grad || (capture_edges && dynamic_cast<AccumulateGrad*>(node));
    TensorList outputs;
    if (!skip) {
      outputs = node->apply(std::move(grads));
      if (!keep_graph) node->release_variables();
    }
    for (size_t i = 0; i < node->next_edges.size(); ++i) {
      const Edge& e = node->next_edges[i];
      if (!e.fn) continue;
      keep_alive[e.fn.get()] = e.fn;
      if (i < outputs.size() && outputs[i].defined()) {
        auto& buf = buffers[e.fn.get()];
        if (buf.size() < e.fn->num_outputs) buf.resize(e.fn->num_outputs);
        accumulate(buf[e.input_nr], std::move(outputs[i]));
      }
      if (--deps[e.fn.get()] == 0) ready.push(e.fn.get());
    }
    keep_alive.erase(node);
  }
  // A callback may queue another: run until none is left.
  for (size_t i = 0; i < final_callbacks.size(); ++i) {
    auto callback = std::move(final_callbacks[i]);
    callback();
  }
}

}  // namespace

Node::Node() : sequence_nr_(g_sequence.fetch_add(1, std::memory_order_relaxed)) {}

void queue_callback(std::function<void()> callback) {
  KILN_CHECK(tls_final_callbacks != nullptr, "queue_callback",
             "no backward pass is running on this thread");
  tls_final_callbacks->push_back(std::move(callback));
}

bool grad_enabled() {
  return tls_grad_enabled;
}
void set_grad_enabled(bool enabled) {
  tls_grad_enabled = enabled;
}
bool inference_mode_enabled() {
  return tls_inference_mode;
}

InferenceMode::InferenceMode() : prev_grad_(tls_grad_enabled), prev_inference_(tls_inference_mode) {
  tls_grad_enabled = false;
  tls_inference_mode = true;
}
InferenceMode::~InferenceMode() {
  tls_grad_enabled = prev_grad_;
  tls_inference_mode = prev_inference_;
}

TensorList AccumulateGrad::apply(TensorList&& grads) {
  Tensor g = grads.empty() ? Tensor() : std::move(grads[0]);
  if (!g.defined()) return {};
  Tensor leaf(leaf_);
  auto& meta = leaf.ensure_autograd_meta();
  g = run_hooks(meta.leaf_hooks, std::move(g));
  if (!grad_enabled()) g = g.detach();
  if (!meta.grad.defined()) {
    meta.grad = std::move(g);
  } else {
    meta.grad = meta.grad + g;
  }
  for (const auto& [id, hook] : meta.post_accumulate_hooks) hook(leaf);
  return {};
}

bool any_requires_grad(std::initializer_list<const Tensor*> inputs) {
  if (!tls_grad_enabled) return false;
  for (const Tensor* t : inputs) {
    if (t && t->defined() && t->requires_grad()) return true;
  }
  return false;
}

bool any_requires_grad(const TensorList& inputs) {
  if (!tls_grad_enabled) return false;
  for (const Tensor& t : inputs) {
    if (t.defined() && t.requires_grad()) return true;
  }
  return false;
}

Edge gradient_edge(const Tensor& t) {
  auto* meta = t.autograd_meta();
  if (!meta) return {};
  if (meta->grad_fn) return {meta->grad_fn, meta->output_nr};
  if (!meta->requires_grad) return {};
  std::lock_guard<std::mutex> lock(meta->grad_accumulator_mutex);
  auto acc = meta->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    meta->grad_accumulator = acc;
  }
  return {acc, 0};
}

void set_history(const std::shared_ptr<Node>& node, const TensorList& inputs,
                 const TensorList& outputs) {
  node->next_edges.clear();
  node->next_edges.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    node->next_edges.push_back(t.defined() ? gradient_edge(t) : Edge{});
  }
  node->num_outputs = static_cast<uint32_t>(outputs.size());
  node->output_sizes.clear();
  node->output_dtypes.clear();
  node->output_devices.clear();
  for (uint32_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    node->output_sizes.push_back(out.defined() ? out.sizes() : Dims{});
    node->output_dtypes.push_back(out.defined() ? out.dtype() : DType::Float32);
    node->output_devices.push_back(out.defined() ? out.device() : Device::CPU);
    if (!out.defined()) continue;
    auto& meta = out.ensure_autograd_meta();
    meta.grad_fn = node;
    meta.output_nr = i;
    meta.requires_grad = true;
  }
}

TensorList FunctionNode::apply(TensorList&& grads) {
  KILN_CHECK(!released_, name_,
             "trying to backward through the graph a second time (or to read saved tensors after "
             "they were freed); pass retain_graph=true to the first backward");
  // Outputs that received no gradient contribute zero.
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined() && i < output_sizes.size()) {
      grads[i] = Tensor(kiln::zeros(output_sizes[i], output_dtypes[i]));
      if (i < output_devices.size() && output_devices[i] != Device::CPU) {
        grads[i] = grads[i].to(output_devices[i]);
      }
    }
  }
  TensorList saved;
  saved.reserve(saved_.size());
  for (const auto& s : saved_) saved.push_back(s.unpack(*this));
  TensorList out = fn_(saved, grads);
  KILN_CHECK(out.size() <= next_edges.size(), name_, "backward returned ", out.size(),
             " gradients for ", next_edges.size(), " inputs");
  return out;
}

void FunctionNode::release_variables() {
  // Saved leaves stay: the user holds them anyway, so dropping them frees nothing, and keeping
  // them lets a second backward through this node work (PyTorch's classic in-place example).
  for (auto& s : saved_) {
    if (!s.is_leaf()) {
      s.reset();
      released_ = true;
    }
  }
}

std::shared_ptr<FunctionNode> record(const char* name, const TensorList& inputs,
                                     const TensorList& outputs, const TensorList& saved_inputs,
                                     const TensorList& saved_outputs, BackwardFn fn) {
  if (!any_requires_grad(inputs)) return nullptr;
  auto node = std::make_shared<FunctionNode>(name, std::move(fn));
  for (const Tensor& t : saved_inputs) node->save(t, false);
  set_history(node, inputs, outputs);
  for (const Tensor& t : saved_outputs) node->save(t, true);
  return node;
}

SavedVariable::SavedVariable(const Tensor& t, bool is_output) : is_output_(is_output) {
  if (!t.defined()) return;
  saved_version_ = t.version();
  was_leaf_ = !is_output && t.is_leaf();
  if (!is_output) {
    data_ = t.impl_ptr();  // an input keeps its own history: no cycle through this node
    return;
  }
  // An output would point back at this node: keep its data and a weak link to its grad_fn.
  const TensorImpl& impl = *t.impl();
  data_ = make_view(impl, impl.sizes(), impl.strides(), impl.storage_offset());
  KILN_TRACE("detach", {t}, {Tensor(data_)});  // the tracer sees the saved copy as the output
  if (auto* meta = t.autograd_meta()) {
    weak_grad_fn_ = meta->grad_fn;
    output_nr_ = meta->output_nr;
    requires_grad_ = meta->requires_grad;
  }
}

Tensor SavedVariable::unpack(const Node& owner) const {
  if (!data_) return {};
  const uint64_t now = data_->storage()->version();
  KILN_CHECK(now == saved_version_, owner.name(),
             "one of the tensors needed for gradient computation has been modified by an "
             "in-place operation: it was saved at version ",
             saved_version_, " and is now at version ", now, " (a tensor of shape ", data_->sizes(),
             ")");
  if (!is_output_) return Tensor(data_);
  Tensor alias(make_view(*data_, data_->sizes(), data_->strides(), data_->storage_offset()));
  KILN_TRACE("detach", {Tensor(data_)}, {alias});
  if (grad_enabled() && requires_grad_) {
    if (auto fn = weak_grad_fn_.lock()) {
      auto& meta = alias.ensure_autograd_meta();
      meta.grad_fn = std::move(fn);
      meta.output_nr = output_nr_;
      meta.requires_grad = true;
    }
  }
  return alias;
}

void SavedVariable::reset() {
  data_.reset();
}

TensorList grad(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs,
                bool retain_graph, bool create_graph, bool allow_unused) {
  std::vector<Edge> edges;
  for (size_t i = 0; i < inputs.size(); ++i) {
    KILN_CHECK(inputs[i].requires_grad(), "autograd::grad", "input ", i, " does not require grad");
    edges.push_back(gradient_edge(inputs[i]));
  }
  TensorList captured(inputs.size());
  run_engine(outputs, grad_outputs, retain_graph || create_graph, create_graph, &edges, &captured);
  for (size_t i = 0; i < captured.size(); ++i) {
    KILN_CHECK(captured[i].defined() || allow_unused, "autograd::grad", "input ", i,
               " was not used to compute the outputs (pass allow_unused=true to get an undefined "
               "gradient instead)");
  }
  return captured;
}

void backward(const TensorList& roots, const TensorList& grad_roots, bool retain_graph,
              bool create_graph) {
  run_engine(roots, grad_roots, retain_graph || create_graph, create_graph, nullptr, nullptr);
}

}  // namespace kiln::autograd
