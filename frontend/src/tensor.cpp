// kiln::Tensor: metadata, autograd accessors, item(), printing.

#include "kiln/tensor.h"

#include <cmath>
#include <iomanip>
#include <sstream>

#include "kiln/autograd.h"
#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "kiln/runtime/kernels/copy.h"
#include "kiln/runtime/views.h"

namespace kiln {

namespace dispatch::detail {
thread_local TraceHook* active_hook = nullptr;
void note_raw_access(const Tensor& t, const std::source_location& where) {
  if (auto* hook = active_hook) hook->on_raw_access(t, where);
}
}  // namespace dispatch::detail

using autograd::AutogradMeta;

AutogradMeta* Tensor::autograd_meta() const {
  return static_cast<AutogradMeta*>(checked().autograd_meta.get());
}

AutogradMeta& Tensor::ensure_autograd_meta() const {
  auto& slot = const_cast<TensorImpl&>(checked()).autograd_meta;
  if (!slot) slot = std::make_unique<AutogradMeta>();
  return *static_cast<AutogradMeta*>(slot.get());
}

bool Tensor::requires_grad() const {
  auto* m = autograd_meta();
  return m && (m->requires_grad || m->grad_fn);
}

Tensor& Tensor::requires_grad_(bool requires_grad) {
  auto* m = autograd_meta();
  if (m && m->grad_fn) {
    KILN_CHECK(requires_grad, "requires_grad_",
               "cannot turn off requires_grad of a non-leaf tensor; use detach()");
    return *this;
  }
  if (requires_grad) {
    KILN_CHECK(is_floating(dtype()), "requires_grad_",
               "only floating-point tensors can require gradients, got ", dtype());
  }
  if (requires_grad || m) ensure_autograd_meta().requires_grad = requires_grad;
  return *this;
}

Tensor Tensor::grad() const {
  auto* m = autograd_meta();
  return m ? m->grad : Tensor();
}

Tensor& Tensor::mutable_grad() {
  return ensure_autograd_meta().grad;
}

void Tensor::set_grad(const Tensor& g) {
  if (g.defined()) {
    KILN_CHECK(g.sizes() == sizes(), "set_grad", "expected a gradient of shape ", sizes(), ", got ",
               g.sizes());
  }
  ensure_autograd_meta().grad = g;
}

bool Tensor::is_leaf() const {
  auto* m = autograd_meta();
  return !m || !m->grad_fn;
}

std::shared_ptr<autograd::Node> Tensor::grad_fn() const {
  auto* m = autograd_meta();
  return m ? m->grad_fn : nullptr;
}

uint32_t Tensor::output_nr() const {
  auto* m = autograd_meta();
  return m ? m->output_nr : 0;
}

void Tensor::backward(const Tensor& grad_output, bool retain_graph, bool create_graph) const {
  autograd::backward({*this}, grad_output.defined() ? TensorList{grad_output} : TensorList{},
                     retain_graph, create_graph);
}

void Tensor::retain_grad() const {
  KILN_CHECK(requires_grad(), "retain_grad", "the tensor does not require grad");
  if (is_leaf()) return;  // leaves keep their grad anyway
  auto& m = ensure_autograd_meta();
  if (m.retains_grad) return;
  m.retains_grad = true;
  // The gradient reaching this tensor's grad_fn slot is stored into its .grad.
  std::weak_ptr<autograd::Node> weak = m.grad_fn;
  TensorImplPtr self = impl_ptr();
  TensorImpl* raw = self.get();
  m.grad_fn->pre_hooks.push_back(
      {m.output_nr, {SIZE_MAX, [raw](const Tensor& g) -> std::optional<Tensor> {
                       auto* meta = static_cast<AutogradMeta*>(raw->autograd_meta.get());
                       if (meta) meta->grad = meta->grad.defined() ? meta->grad + g : g.detach();
                       return std::nullopt;
                     }}});
}

bool Tensor::retains_grad() const {
  auto* m = autograd_meta();
  return m && m->retains_grad;
}

namespace {
std::atomic<size_t> g_hook_id{0};
}

size_t Tensor::register_hook(Hook hook) const {
  KILN_CHECK(requires_grad(), "register_hook",
             "cannot register a hook on a tensor that does not require grad");
  const size_t id = g_hook_id.fetch_add(1) + 1;
  auto& m = ensure_autograd_meta();
  if (m.grad_fn) {
    m.grad_fn->pre_hooks.push_back({m.output_nr, {id, std::move(hook)}});
  } else {
    m.leaf_hooks.emplace_back(id, std::move(hook));
  }
  return id;
}

size_t Tensor::register_post_accumulate_grad_hook(PostAccumulateGradHook hook) const {
  KILN_CHECK(requires_grad() && is_leaf(), "register_post_accumulate_grad_hook",
             "expected a leaf tensor that requires grad");
  const size_t id = g_hook_id.fetch_add(1) + 1;
  ensure_autograd_meta().post_accumulate_hooks.emplace_back(id, std::move(hook));
  return id;
}

void Tensor::remove_hook(size_t handle) const {
  auto* m = autograd_meta();
  if (!m) return;
  std::erase_if(m->leaf_hooks, [&](const auto& h) { return h.first == handle; });
  std::erase_if(m->post_accumulate_hooks, [&](const auto& h) { return h.first == handle; });
  if (m->grad_fn) {
    std::erase_if(m->grad_fn->pre_hooks, [&](const auto& h) { return h.second.first == handle; });
  }
}

double Tensor::item_double(std::source_location where) const {
  KILN_CHECK(numel() == 1, "item", "expected a tensor with one element, got shape ", sizes());
  double v = 0;
  auto out = kiln::from_blob(&v, Dims{}, DType::Float64);
  kernels::copy_(*out, *views::reshape(checked(), Dims{}));
  if (auto* hook = dispatch::tracer()) [[unlikely]]
    hook->on_read_back(*this, v, where);
  return v;
}

// --- printing --------------------------------------------------------------------------------

namespace {

struct Printer {
  const Tensor& t;
  Tensor f64;  // values as double, contiguous
  bool integral;
  bool boolean;
  int width = 1;
  int precision = 4;
  bool summarize;
  static constexpr int kEdge = 3;

  explicit Printer(const Tensor& t_) : t(t_) {
    f64 = t.to(DType::Float64).contiguous();
    integral = is_integral(t.dtype());
    boolean = t.dtype() == DType::Bool;
    summarize = t.numel() > 1000;
    const double* p = f64.data_ptr<double>();
    for (int64_t i = 0; i < f64.numel(); ++i) width = std::max<int>(width, format(p[i]).size());
  }

  std::string format(double v) const {
    std::ostringstream os;
    if (boolean) {
      os << (v != 0 ? "True" : "False");
    } else if (integral) {
      os << static_cast<int64_t>(v);
    } else if (std::isnan(v)) {
      os << "nan";
    } else if (std::isinf(v)) {
      os << (v > 0 ? "inf" : "-inf");
    } else {
      os << std::fixed << std::setprecision(precision) << v;
    }
    return os.str();
  }

  void print(std::ostream& os, int64_t dim, int64_t offset, int indent) const {
    const auto& sizes = f64.sizes();
    const auto& strides = f64.strides();
    const double* p = f64.data_ptr<double>();
    if (f64.dim() == 0) {
      os << format(p[0]);
      return;
    }
    os << '[';
    const int64_t n = sizes[dim];
    for (int64_t i = 0; i < n; ++i) {
      if (summarize && n > 2 * kEdge && i == kEdge) {
        os << (dim + 1 == f64.dim() ? "..., " : "...,\n" + std::string(indent + 1, ' '));
        i = n - kEdge;
      }
      if (dim + 1 == f64.dim()) {
        const std::string s = format(p[offset + i * strides[dim]]);
        os << std::string(width - s.size(), ' ') << s;
      } else {
        print(os, dim + 1, offset + i * strides[dim], indent + 1);
      }
      if (i + 1 < n) {
        os << ',';
        if (dim + 1 == f64.dim()) {
          os << ' ';
        } else {
          os << std::string(f64.dim() - dim - 1, '\n') << std::string(indent + 1, ' ');
        }
      }
    }
    os << ']';
  }
};

}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  os << "tensor(";
  if (t.numel() == 0) {
    os << "[]";
  } else {
    dispatch::TraceGuard pause(nullptr);  // printing is not part of a traced computation
    Printer(t).print(os, 0, 0, 7);
  }
  os << ", shape=" << t.sizes() << ", dtype=" << t.dtype();
  if (t.requires_grad()) {
    if (auto fn = t.grad_fn()) {
      os << ", grad_fn=<" << fn->name() << ">";
    } else {
      os << ", requires_grad=true";
    }
  }
  return os << ')';
}

std::string to_string(const Tensor& t) {
  std::ostringstream os;
  os << t;
  return os.str();
}

}  // namespace kiln
