// Differentiable views: each shares storage with its input; the backward maps the gradient of
// the view back onto the input's shape.

#include <numeric>

#include "kiln/autograd.h"
#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "kiln/runtime/cuda/eager.h"
#include "kiln/runtime/kernels/copy.h"
#include "kiln/runtime/views.h"

namespace kiln {

namespace {

// Wraps a runtime view; records `backward` when the input requires grad.
template <typename Backward>
Tensor make_view_op(const Tensor& self, TensorImplPtr view, const char* name, Backward&& backward) {
  Tensor out(std::move(view));
  if (autograd::any_requires_grad({&self})) {
    auto node = std::make_shared<autograd::FunctionNode>(
        name, [bw = std::forward<Backward>(backward)](const TensorList&, const TensorList& g) {
          return TensorList{bw(g[0])};
        });
    autograd::set_history(node, {self}, {out});
    out.ensure_autograd_meta().is_view = true;
  }
  return out;
}

// Gradient of a strided sub-view: zeros of the input's shape with the gradient written into the
// region the view covered. `view_of` re-creates the same view on any tensor of the input's shape.
using ViewFn = std::function<Tensor(const Tensor&)>;
Tensor scatter_into_view(const Tensor& grad, const Dims& input_sizes, const ViewFn& view_of);

Tensor scatter_into_view(const Tensor& grad, const Dims& input_sizes, const ViewFn& view_of) {
  Tensor result(kiln::zeros(input_sizes, grad.dtype()));
  if (grad.device() != Device::CPU) result = result.to(grad.device());
  {
    autograd::NoGradGuard no_grad;
    Tensor region = view_of(result);
    kernels::copy_(*region.impl(), *grad.impl());
  }
  if (autograd::any_requires_grad({&grad})) {
    // d(result)/d(grad) is the view itself.
    auto node = std::make_shared<autograd::FunctionNode>(
        "ViewScatterBackward",
        [view_of](const TensorList&, const TensorList& g) { return TensorList{view_of(g[0])}; });
    autograd::set_history(node, {grad}, {result});
  }
  return result;
}

}  // namespace

Tensor Tensor::view(std::span<const int64_t> sizes) const {
  Dims in = this->sizes();
  auto out = make_view_op(*this, views::view(*impl(), sizes), "ViewBackward",
                          [in](const Tensor& g) { return g.reshape(in); });
  KILN_TRACE("view", {*this}, {out}, {"shape", out.sizes()});
  return out;
}

Tensor Tensor::reshape(std::span<const int64_t> sizes) const {
  Dims in = this->sizes();
  Dims strides;
  Dims target = views::infer_size(sizes, numel(), "reshape");
  Tensor out;
  if (views::compute_view_strides(*impl(), target, strides)) {
    out = make_view_op(*this, views::view(*impl(), target), "ReshapeBackward",
                       [in](const Tensor& g) { return g.reshape(in); });
  } else {
    out = contiguous().view(target);
  }
  KILN_TRACE("reshape", {*this}, {out}, {"shape", out.sizes()});
  return out;
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  auto out = make_view_op(*this, views::transpose(*impl(), d0, d1), "TransposeBackward",
                          [d0, d1](const Tensor& g) { return g.transpose(d0, d1); });
  KILN_TRACE("transpose", {*this}, {out}, {"dim0", d0}, {"dim1", d1});
  return out;
}

Tensor Tensor::t() const {
  KILN_CHECK(dim() <= 2, "t", "expected a tensor of at most 2 dims, got ", sizes());
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::permute(std::span<const int64_t> order) const {
  auto v = views::permute(*impl(), order);
  Dims inverse(order.size());
  for (size_t i = 0; i < order.size(); ++i) inverse[wrap_dim(order[i], dim(), "permute")] = i;
  auto out = make_view_op(*this, std::move(v), "PermuteBackward",
                          [inverse](const Tensor& g) { return g.permute(inverse); });
  KILN_TRACE("permute", {*this}, {out}, {"dims", Dims(order)});
  return out;
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  Dims in = sizes();
  auto out = make_view_op(
      *this, views::slice(*impl(), d, start, end, step), "SliceBackward", [=](const Tensor& g) {
        return scatter_into_view(g, in,
                                 [=](const Tensor& x) { return x.slice(d, start, end, step); });
      });
  KILN_TRACE("slice", {*this}, {out}, {"dim", d}, {"start", start}, {"end", end}, {"step", step});
  return out;
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  KILN_CHECK(dim() > 0, "narrow", "cannot narrow a 0-dim tensor");
  const int64_t n = size(d);
  const int64_t s = start < 0 ? start + n : start;
  KILN_CHECK(s >= 0 && length >= 0 && s + length <= n, "narrow", "start ", start, " + length ",
             length, " exceeds dimension size ", n);
  return slice(d, s, s + length, 1);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  Dims in = sizes();
  auto out =
      make_view_op(*this, views::select(*impl(), d, index), "SelectBackward", [=](const Tensor& g) {
        return scatter_into_view(g, in, [=](const Tensor& x) { return x.select(d, index); });
      });
  KILN_TRACE("select", {*this}, {out}, {"dim", d}, {"index", index});
  return out;
}

Tensor Tensor::expand(std::span<const int64_t> target) const {
  Dims in = sizes();
  auto out = make_view_op(*this, views::expand(*impl(), target), "ExpandBackward",
                          [in](const Tensor& g) { return sum_to(g, in); });
  KILN_TRACE("expand", {*this}, {out}, {"shape", out.sizes()});
  return out;
}

Tensor Tensor::squeeze() const {
  Dims in = sizes();
  auto out = make_view_op(*this, views::squeeze(*impl()), "SqueezeBackward",
                          [in](const Tensor& g) { return g.reshape(in); });
  KILN_TRACE("reshape", {*this}, {out}, {"shape", out.sizes()});
  return out;
}

Tensor Tensor::squeeze(int64_t d) const {
  Dims in = sizes();
  auto out = make_view_op(*this, views::squeeze(*impl(), d), "SqueezeBackward",
                          [in](const Tensor& g) { return g.reshape(in); });
  KILN_TRACE("reshape", {*this}, {out}, {"shape", out.sizes()});
  return out;
}

Tensor Tensor::unsqueeze(int64_t d) const {
  Dims in = sizes();
  auto out = make_view_op(*this, views::unsqueeze(*impl(), d), "UnsqueezeBackward",
                          [in](const Tensor& g) { return g.reshape(in); });
  KILN_TRACE("reshape", {*this}, {out}, {"shape", out.sizes()});
  return out;
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape(Dims{1});
  const int64_t s = wrap_dim(start_dim, dim(), "flatten");
  const int64_t e = wrap_dim(end_dim, dim(), "flatten");
  KILN_CHECK(s <= e, "flatten", "start_dim ", start_dim, " must not come after end_dim ", end_dim);
  Dims shape;
  for (int64_t i = 0; i < s; ++i) shape.push_back(size(i));
  int64_t merged = 1;
  for (int64_t i = s; i <= e; ++i) merged *= size(i);
  shape.push_back(merged);
  for (int64_t i = e + 1; i < dim(); ++i) shape.push_back(size(i));
  return reshape(shape);
}

Tensor Tensor::as_strided(std::span<const int64_t> sizes_, std::span<const int64_t> strides_,
                          int64_t offset) const {
  Dims in = sizes(), sz(sizes_), st(strides_);
  const int64_t base_offset = storage_offset();
  auto v = views::as_strided(*impl(), sz, st, offset);
  // Backward scatters into the input; valid when the input is contiguous from its offset and
  // the view does not overlap itself (no element read twice), which is checked here.
  const bool input_dense = is_contiguous();
  auto out = make_view_op(*this, std::move(v), "AsStridedBackward", [=](const Tensor& g) {
    KILN_CHECK(input_dense, "as_strided", "backward needs a contiguous input");
    return scatter_into_view(g, in, [=](const Tensor& x) {
      return x.as_strided(sz, st, x.storage_offset() + offset - base_offset);
    });
  });
  KILN_TRACE("as_strided", {*this}, {out}, {"sizes", sz}, {"strides", st}, {"offset", offset});
  return out;
}

Tensor Tensor::index(std::initializer_list<TensorIndex> indices) const {
  int64_t consumed = 0, ellipsis_dims = 0;
  for (const auto& idx : indices) {
    if (std::holds_alternative<int64_t>(idx) || std::holds_alternative<Slice>(idx)) ++consumed;
  }
  bool has_ellipsis = false;
  for (const auto& idx : indices) {
    if (std::holds_alternative<EllipsisIndex>(idx)) {
      KILN_CHECK(!has_ellipsis, "index", "an index can only have a single ellipsis");
      has_ellipsis = true;
    }
  }
  KILN_CHECK(consumed <= dim(), "index", "too many indices for a tensor of dimension ", dim(),
             " (got ", consumed, ")");
  ellipsis_dims = dim() - consumed;
  Tensor out = *this;
  int64_t d = 0;  // current dim in `out`
  for (const auto& idx : indices) {
    if (const auto* i = std::get_if<int64_t>(&idx)) {
      out = out.select(d, *i);
    } else if (const auto* s = std::get_if<Slice>(&idx)) {
      const int64_t n = out.size(d);
      out = out.slice(d, s->start.value_or(0), s->stop.value_or(n), s->step);
      ++d;
    } else if (std::holds_alternative<NoneIndex>(idx)) {
      out = out.unsqueeze(d);
      ++d;
    } else {
      d += ellipsis_dims;
    }
  }
  return out;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == this->dtype()) return *this;
  Tensor out(kiln::empty(sizes(), dtype, device()));
  kernels::copy_(*out.impl(), *impl());
  if (autograd::any_requires_grad({this}) && is_floating(dtype)) {
    DType from = this->dtype();
    auto node = std::make_shared<autograd::FunctionNode>(
        "ToCopyBackward",
        [from](const TensorList&, const TensorList& g) { return TensorList{g[0].to(from)}; });
    autograd::set_history(node, {*this}, {out});
  }
  KILN_TRACE("to", {*this}, {out}, {"dtype", static_cast<int64_t>(dtype)});
  return out;
}

Tensor Tensor::to(Device device) const {
  if (device == this->device()) return *this;
  // The tracer records no device moves yet: a trace is a CPU program (jit::compile's device
  // option is the way to the GPU once it exists).
  KILN_CHECK(!dispatch::tracer(), "to", "moving a tensor to ", device_name(device),
             " cannot be traced yet");
  Tensor out(cuda::to_device(*impl(), device));
  if (autograd::any_requires_grad({this})) {
    const Device from = this->device();
    auto node = std::make_shared<autograd::FunctionNode>(
        "ToDeviceBackward",
        [from](const TensorList&, const TensorList& g) { return TensorList{g[0].to(from)}; });
    autograd::set_history(node, {*this}, {out});
  }
  return out;
}

Tensor Tensor::clone() const {
  Tensor out(kiln::empty(sizes(), dtype(), device()));
  kernels::copy_(*out.impl(), *impl());
  if (autograd::any_requires_grad({this})) {
    auto node = std::make_shared<autograd::FunctionNode>(
        "CloneBackward", [](const TensorList&, const TensorList& g) { return TensorList{g[0]}; });
    autograd::set_history(node, {*this}, {out});
  }
  KILN_TRACE("clone", {*this}, {out});
  return out;
}

Tensor Tensor::detach() const {
  const TensorImpl& t = *impl();
  Tensor out(make_view(t, t.sizes(), t.strides(), t.storage_offset()));
  KILN_TRACE("detach", {*this}, {out});  // same value to the tracer: an alias, not an op
  return out;
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

}  // namespace kiln
