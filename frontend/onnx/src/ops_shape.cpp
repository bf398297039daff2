// Shape, layout and indexing ops of ONNX's default domain. Shapes are static once the inputs are
// given, so the shape arithmetic of exported models (Shape -> Gather -> Concat -> Reshape) is
// computed here, at import, and only its result reaches the traced graph.

#include "graph.h"

namespace kiln::onnx::detail {
namespace {

using C = const NodeContext&;

// Shape arithmetic folded at import: values from shapes and attributes, constants of the trace
// (written through the impl, which the tracer does not watch; Tensor::data_ptr it would refuse).
Tensor int64s(const std::vector<int64_t>& v) {
  Tensor t = kiln::empty(Dims{static_cast<int64_t>(v.size())}, TensorOptions(DType::Int64));
  std::copy(v.begin(), v.end(), t.impl()->data_ptr<int64_t>());
  return t;
}

TensorList reshape_op(C c) {
  const Tensor& x = c.in(0);
  std::vector<int64_t> shape = c.ints_of(1);
  const bool allow_zero = c.i("allowzero", 0) != 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0 && !allow_zero) {
      if (static_cast<int64_t>(d) >= x.dim()) c.fail("shape copies a dim the input lacks");
      shape[d] = x.size(static_cast<int64_t>(d));
    }
  }
  return {x.reshape(shape)};
}

TensorList transpose_op(C c) {
  const Tensor& x = c.in(0);
  std::vector<int64_t> perm = c.ints("perm", std::vector<int64_t>{});
  if (perm.empty())
    for (int64_t d = x.dim() - 1; d >= 0; --d) perm.push_back(d);
  return {x.permute(perm)};
}

TensorList concat(C c) {
  TensorList parts;
  for (size_t i = 0; i < c.num_inputs(); ++i)
    if (c.has(i)) parts.push_back(c.in(i));
  if (parts.empty()) c.fail("needs at least one input");
  return {cat(parts, norm_axis(c, c.i("axis"), parts[0].dim()))};
}

TensorList split_op(C c) {
  const Tensor& x = c.in(0);
  const int64_t axis = norm_axis(c, c.i("axis", 0), x.dim());
  std::vector<int64_t> sizes = c.opset() < 13 ? c.ints("split", std::vector<int64_t>{})
                                              : (c.has(1) ? c.ints_of(1) : std::vector<int64_t>{});
  const int64_t n = static_cast<int64_t>(c.node().outputs.size());
  if (sizes.empty()) {
    if (x.size(axis) % n != 0) c.fail("the axis does not split evenly into the outputs");
    sizes.assign(static_cast<size_t>(n), x.size(axis) / n);
  }
  return split_with_sizes(x, sizes, axis);
}

// Slice: starts/ends/axes as attributes before opset 10, then inputs with steps; ends clamp.
TensorList slice_op(C c) {
  Tensor x = c.in(0);
  std::vector<int64_t> starts, ends, axes, steps;
  if (c.opset() < 10) {
    starts = c.ints("starts"), ends = c.ints("ends");
    axes = c.ints("axes", std::vector<int64_t>{});
  } else {
    starts = c.ints_of(1), ends = c.ints_of(2);
    if (c.has(3)) axes = c.ints_of(3);
    if (c.has(4)) steps = c.ints_of(4);
  }
  if (axes.empty())
    for (size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<int64_t>(k));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    c.fail("starts, ends, axes and steps must have one entry per sliced axis");
  for (size_t k = 0; k < starts.size(); ++k) {
    const int64_t axis = norm_axis(c, axes[k], x.dim()), n = x.size(axis), step = steps[k];
    if (step == 0) c.fail("steps must not be 0");
    auto wrap = [n](int64_t v) { return v < 0 ? std::max<int64_t>(v, INT64_MIN + n) + n : v; };
    if (step > 0) {
      const int64_t s = std::clamp<int64_t>(wrap(starts[k]), 0, n);
      x = x.slice(axis, s, std::max(s, std::clamp<int64_t>(wrap(ends[k]), 0, n)), step);
      continue;
    }
    // Backwards (a reversal, as exports of F.pad compute their pads): the indices, selected.
    const int64_t s = std::clamp<int64_t>(wrap(starts[k]), -1, n - 1),
                  e = std::clamp<int64_t>(wrap(ends[k]), -1, n - 1);
    std::vector<int64_t> picked;
    for (int64_t i = s; i > e; i += step) picked.push_back(i);
    x = index_select(x, axis, int64s(picked));
  }
  return {x};
}

std::vector<int64_t> axes_of(C c) {  // Squeeze/Unsqueeze: an attribute before 13, then an input
  if (c.opset() < 13) return c.ints("axes", std::vector<int64_t>{});
  return c.has(1) ? c.ints_of(1) : std::vector<int64_t>{};
}

TensorList squeeze_op(C c) {
  Tensor x = c.in(0);
  std::vector<int64_t> axes = axes_of(c);
  if (axes.empty()) return {x.squeeze()};
  for (int64_t& a : axes) a = norm_axis(c, a, x.dim());
  std::sort(axes.rbegin(), axes.rend());
  for (int64_t a : axes) {
    if (x.size(a) != 1)
      c.fail("cannot squeeze axis " + std::to_string(a) + " of size " + std::to_string(x.size(a)));
    x = x.squeeze(a);
  }
  return {x};
}

TensorList unsqueeze_op(C c) {
  Tensor x = c.in(0);
  std::vector<int64_t> axes = axes_of(c);
  const int64_t out_rank = x.dim() + static_cast<int64_t>(axes.size());
  for (int64_t& a : axes) a = norm_axis(c, a, out_rank);
  std::sort(axes.begin(), axes.end());
  for (int64_t a : axes) x = x.unsqueeze(a);
  return {x};
}

TensorList shape_op(C c) {
  const Tensor& x = c.in(0);
  const int64_t r = x.dim();
  auto clampi = [r](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + r : v, 0, r); };
  const int64_t start = clampi(c.i("start", 0)), end = clampi(c.i("end", r));
  std::vector<int64_t> dims(x.sizes().begin() + start, x.sizes().begin() + std::max(start, end));
  return {int64s(dims)};
}

TensorList size_op(C c) {
  Tensor t = kiln::empty(Dims{}, TensorOptions(DType::Int64));
  *t.impl()->data_ptr<int64_t>() = c.in(0).numel();
  return {t};
}

// Gather along `axis`: index_select over the flattened indices, reshaped to the indices' shape.
TensorList gather_op(C c) {
  const Tensor& x = c.in(0);
  const int64_t axis = norm_axis(c, c.i("axis", 0), x.dim());
  Tensor idx = c.in(1).to(DType::Int64);
  idx = where(lt(idx, zeros_like(idx)), add(idx, static_cast<double>(x.size(axis))), idx);
  Tensor picked = index_select(x, axis, idx.reshape({-1}));
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().begin() + axis);
  shape.insert(shape.end(), idx.sizes().begin(), idx.sizes().end());
  shape.insert(shape.end(), x.sizes().begin() + axis + 1, x.sizes().end());
  return {picked.reshape(shape)};
}

// Expand: numpy broadcasting of the input against `shape` (either side may be larger).
TensorList expand_op(C c) {
  const Tensor& x = c.in(0);
  const std::vector<int64_t> shape = c.ints_of(1);
  const int64_t r = std::max<int64_t>(x.dim(), static_cast<int64_t>(shape.size()));
  std::vector<int64_t> out(static_cast<size_t>(r));
  for (int64_t d = 0; d < r; ++d) {
    const int64_t xi = d - (r - x.dim()), si = d - (r - static_cast<int64_t>(shape.size()));
    const int64_t a = xi >= 0 ? x.size(xi) : 1, b = si >= 0 ? shape[si] : 1;
    if (a != b && a != 1 && b != 1) c.fail("shape does not broadcast with the input");
    out[d] = a == 1 ? b : a;
  }
  std::vector<int64_t> lifted(static_cast<size_t>(r - x.dim()), 1);  // rank r, same elements
  lifted.insert(lifted.end(), x.sizes().begin(), x.sizes().end());
  return {x.reshape(lifted).expand(out)};
}

TensorList constant_of_shape(C c) {
  const std::vector<int64_t> shape = c.ints_of(0);
  if (!c.has_attr("value")) return {zeros(shape)};
  const Tensor& v = c.tensor("value");
  return {full(shape, v.item<double>(), TensorOptions(v.dtype()))};
}

TensorList constant(C c) {
  if (c.has_attr("value")) return {c.tensor("value")};
  if (c.has_attr("value_float")) return {scalar_tensor(c.f("value_float"))};
  if (c.has_attr("value_int")) {
    Tensor t = kiln::empty(Dims{}, TensorOptions(DType::Int64));
    *t.impl()->data_ptr<int64_t>() = c.i("value_int");
    return {t};
  }
  if (c.has_attr("value_ints")) return {int64s(c.ints("value_ints"))};
  c.fail("only value, value_float, value_int and value_ints constants are supported");
}

TensorList range_op(C c) {
  const Tensor& s = c.in(0);
  const double start = s.item<double>(), limit = c.in(1).item<double>(),
               delta = c.in(2).item<double>();
  if (delta == 0) c.fail("delta must not be 0");
  return {arange(start, limit, delta, TensorOptions(s.dtype()))};
}

TensorList tile_op(C c) {
  const Tensor& x = c.in(0);
  const std::vector<int64_t> reps = c.ints_of(1);
  if (static_cast<int64_t>(reps.size()) != x.dim()) c.fail("repeats must hold one value per dim");
  Tensor r = x;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (reps[d] == 1) continue;
    r = cat(TensorList(static_cast<size_t>(reps[d]), r), d);
  }
  return {r};
}

}  // namespace

std::vector<OpDef> shape_ops() {
  return {
      {"Reshape", 5, reshape_op},     {"Transpose", 1, transpose_op},
      {"Concat", 4, concat},          {"Split", 2, split_op},
      {"Slice", 1, slice_op},         {"Squeeze", 1, squeeze_op},
      {"Unsqueeze", 1, unsqueeze_op}, {"Shape", 1, shape_op},
      {"Size", 1, size_op},           {"Gather", 1, gather_op},
      {"Expand", 8, expand_op},       {"ConstantOfShape", 9, constant_of_shape},
      {"Constant", 1, constant},      {"Range", 11, range_op},
      {"Tile", 6, tile_op},
  };
}

}  // namespace kiln::onnx::detail
