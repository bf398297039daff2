// Convolution, pooling, normalization and friends of ONNX's default domain on kiln's eager ops.
// Spatial ops are 2-d (Conv also 1-d); asymmetric pads become an explicit kiln pad first.

#include "graph.h"

namespace kiln::onnx::detail {
namespace {

using C = const NodeContext&;

struct Spatial {
  std::vector<int64_t> kernel, strides, dilations, pads;  // pads: begins then ends
};

// The kernel, strides, dilations and explicit pads of a windowed op over `x` (auto_pad resolved).
Spatial spatial(C c, const Tensor& x, std::vector<int64_t> kernel) {
  const size_t n = kernel.size();
  Spatial s{kernel, c.ints("strides", std::vector<int64_t>(n, 1)),
            c.ints("dilations", std::vector<int64_t>(n, 1)),
            c.ints("pads", std::vector<int64_t>(2 * n, 0))};
  if (s.strides.size() != n || s.dilations.size() != n || s.pads.size() != 2 * n)
    c.fail("strides, dilations and pads must match the " + std::to_string(n) + " spatial dims");
  const std::string auto_pad = c.s("auto_pad", "NOTSET");
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (size_t d = 0; d < n; ++d) {
      const int64_t in = x.size(2 + static_cast<int64_t>(d));
      const int64_t out = (in + s.strides[d] - 1) / s.strides[d];
      const int64_t span = (kernel[d] - 1) * s.dilations[d] + 1;
      const int64_t total = std::max<int64_t>(0, (out - 1) * s.strides[d] + span - in);
      const int64_t small = total / 2, big = total - small;
      s.pads[d] = auto_pad == "SAME_UPPER" ? small : big;
      s.pads[d + n] = auto_pad == "SAME_UPPER" ? big : small;
    }
  } else if (auto_pad == "VALID") {
    std::fill(s.pads.begin(), s.pads.end(), 0);
  } else if (auto_pad != "NOTSET") {
    c.fail("auto_pad '" + auto_pad + "' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID");
  }
  return s;
}

// Symmetric pads as the op's padding; asymmetric ones applied with kiln::pad (`value`).
std::pair<Tensor, std::vector<int64_t>> apply_pads(const Tensor& x, const Spatial& s,
                                                   double value) {
  const size_t n = s.kernel.size();
  bool symmetric = true;
  for (size_t d = 0; d < n; ++d) symmetric = symmetric && s.pads[d] == s.pads[d + n];
  if (symmetric) return {x, std::vector<int64_t>(s.pads.begin(), s.pads.begin() + n)};
  std::vector<int64_t> p;  // kiln::pad: (begin, end) from the last dim backwards
  for (size_t d = n; d-- > 0;) p.insert(p.end(), {s.pads[d], s.pads[d + n]});
  return {pad(x, p, PadMode::Constant, value), std::vector<int64_t>(n, 0)};
}

TensorList conv(C c) {
  const Tensor& x = c.in(0);
  const Tensor& w = c.in(1);
  const Tensor bias = c.has(2) ? c.in(2) : Tensor();
  const int64_t groups = c.i("group", 1);
  if (w.dim() != x.dim() || x.dim() < 3)
    c.fail("input and weight must have the same rank, 3 or 4, got " + std::to_string(x.dim()) +
           " and " + std::to_string(w.dim()));
  std::vector<int64_t> kernel = c.ints("kernel_shape", std::vector<int64_t>{});
  if (kernel.empty()) kernel.assign(w.sizes().begin() + 2, w.sizes().end());
  if (x.dim() == 4 && kernel.size() == 2) {
    const Spatial s = spatial(c, x, kernel);
    auto [xp, p] = apply_pads(x, s, 0.0);
    return {conv2d(xp, w, bias, {s.strides[0], s.strides[1]}, {p[0], p[1]},
                   {s.dilations[0], s.dilations[1]}, groups)};
  }
  if (x.dim() == 3 && kernel.size() == 1) {
    const Spatial s = spatial(c, x, kernel);
    auto [xp, p] = apply_pads(x, s, 0.0);
    return {conv1d(xp, w, bias, s.strides[0], p[0], s.dilations[0], groups)};
  }
  c.fail("only 1-d and 2-d convolutions are supported, got a " + std::to_string(x.dim()) +
         "-d input");
}

TensorList conv_transpose(C c) {
  const Tensor& x = c.in(0);
  const Tensor& w = c.in(1);
  if (x.dim() != 4) c.fail("only 2-d transposed convolutions are supported");
  if (c.has_attr("output_shape")) c.fail("output_shape is not supported; give pads instead");
  const std::string auto_pad = c.s("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID")
    c.fail("auto_pad '" + auto_pad + "' is not supported");
  const auto strides = c.ints("strides", std::vector<int64_t>{1, 1});
  const auto dil = c.ints("dilations", std::vector<int64_t>{1, 1});
  const auto pads = c.ints("pads", std::vector<int64_t>{0, 0, 0, 0});
  const auto out_pad = c.ints("output_padding", std::vector<int64_t>{0, 0});
  if (pads.size() != 4 || pads[0] != pads[2] || pads[1] != pads[3])
    c.fail("only symmetric pads are supported");
  return {conv_transpose2d(x, w, c.has(2) ? c.in(2) : Tensor(), {strides[0], strides[1]},
                           {pads[0], pads[1]}, {out_pad[0], out_pad[1]}, c.i("group", 1),
                           {dil[0], dil[1]})};
}

TensorList pool(C c, bool is_max) {
  const Tensor& x = c.in(0);
  const auto kernel = c.ints("kernel_shape");
  if (x.dim() != 4 || kernel.size() != 2) c.fail("only 2-d pooling is supported");
  if (is_max && c.num_inputs() > 0 && c.node().outputs.size() > 1 && !c.node().outputs[1].empty())
    c.fail("the Indices output is not supported");
  const Spatial s = spatial(c, x, kernel);
  const bool ceil = c.i("ceil_mode", 0) != 0;
  if (is_max) {
    auto [xp, p] = apply_pads(x, s, -std::numeric_limits<double>::infinity());
    return {max_pool2d(xp, {kernel[0], kernel[1]}, Pair2{s.strides[0], s.strides[1]}, {p[0], p[1]},
                       {s.dilations[0], s.dilations[1]}, ceil)};
  }
  if (s.dilations != std::vector<int64_t>{1, 1}) c.fail("dilated average pooling is not supported");
  const bool include_pad = c.i("count_include_pad", 0) != 0;
  const bool symmetric = s.pads[0] == s.pads[2] && s.pads[1] == s.pads[3];
  auto [xp, p] = apply_pads(x, s, 0.0);
  if (!symmetric && !include_pad) {  // the padding is explicit: divide by the real counts
    auto [ones_p, unused] = apply_pads(ones_like(x), s, 0.0);
    auto window = [&](const Tensor& t) {
      return avg_pool2d(t, {kernel[0], kernel[1]}, Pair2{s.strides[0], s.strides[1]}, 0, ceil,
                        true);
    };
    return {div(window(xp), window(ones_p))};
  }
  return {avg_pool2d(xp, {kernel[0], kernel[1]}, Pair2{s.strides[0], s.strides[1]}, {p[0], p[1]},
                     ceil, include_pad)};
}
TensorList max_pool(C c) {
  return pool(c, true);
}
TensorList average_pool(C c) {
  return pool(c, false);
}

TensorList global_average_pool(C c) {
  const Tensor& x = c.in(0);
  if (x.dim() == 4) return {adaptive_avg_pool2d(x, 1)};
  std::vector<int64_t> dims;
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return {mean(x, dims, true)};
}
TensorList global_max_pool(C c) {
  const Tensor& x = c.in(0);
  std::vector<int64_t> dims;
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return {amax(x, dims, true)};
}

TensorList batch_normalization(C c) {
  if (c.i("training_mode", 0)) c.fail("training_mode = 1 is not supported (export in eval mode)");
  if (c.node().outputs.size() > 1) c.fail("the running-statistics outputs are not supported");
  return {batch_norm(c.in(0), c.in(3), c.in(4), c.in(1), c.in(2), /*training=*/false, 0.1,
                     c.f("epsilon", 1e-5))};
}

TensorList layer_normalization(C c) {
  const Tensor& x = c.in(0);
  const int64_t axis = norm_axis(c, c.i("axis", -1), x.dim());
  if (c.node().outputs.size() > 1) {
    for (size_t k = 1; k < c.node().outputs.size(); ++k)
      if (!c.node().outputs[k].empty()) c.fail("the Mean and InvStdDev outputs are not supported");
  }
  std::vector<int64_t> shape(x.sizes().begin() + axis, x.sizes().end());
  return {layer_norm(x, shape, c.in(1), c.has(2) ? c.in(2) : Tensor(), c.f("epsilon", 1e-5))};
}

TensorList dropout(C c) {
  return {c.in(0)};
}  // inference: the identity (mask not produced)

TensorList flatten(C c) {
  const Tensor& x = c.in(0);
  const int64_t axis = c.i("axis", 1);
  const int64_t a = axis < 0 ? axis + x.dim() : axis;
  if (a < 0 || a > x.dim()) c.fail("axis " + std::to_string(axis) + " out of range");
  int64_t rows = 1;
  for (int64_t d = 0; d < a; ++d) rows *= x.size(d);
  return {x.reshape({rows, rows == 0 ? 0 : -1})};
}

TensorList pad_op(C c) {
  const Tensor& x = c.in(0);
  const std::string mode = c.s("mode", "constant");
  std::vector<int64_t> pads = c.opset() < 11 ? c.ints("pads") : c.ints_of(1);
  const double value = c.opset() < 11 ? c.f("value", 0.0) : c.scalar_of(2).value_or(0.0);
  if (c.opset() >= 18 || c.has(3)) c.fail("the axes input is not supported");
  const int64_t r = x.dim();
  if (static_cast<int64_t>(pads.size()) != 2 * r) c.fail("pads must hold 2 * rank values");
  int64_t first = 0;  // the dims before the first padded one need no entry
  while (first < r && pads[first] == 0 && pads[first + r] == 0) ++first;
  std::vector<int64_t> p;  // kiln: (begin, end) from the last dim backwards
  for (int64_t d = r - 1; d >= first; --d) p.insert(p.end(), {pads[d], pads[d + r]});
  const PadMode m = mode == "constant"  ? PadMode::Constant
                    : mode == "reflect" ? PadMode::Reflect
                    : mode == "edge"
                        ? PadMode::Replicate
                        : (c.fail("mode '" + mode + "' is not supported"), PadMode::Constant);
  if (p.empty()) return {x};
  return {pad(x, p, m, value)};
}

}  // namespace

std::vector<OpDef> nn_ops() {
  return {
      {"Conv", 1, conv},
      {"ConvTranspose", 1, conv_transpose},
      {"MaxPool", 1, max_pool},
      {"AveragePool", 1, average_pool},
      {"GlobalAveragePool", 1, global_average_pool},
      {"GlobalMaxPool", 1, global_max_pool},
      {"BatchNormalization", 1, batch_normalization},
      {"LayerNormalization", 17, layer_normalization},
      {"Dropout", 1, dropout},
      {"Flatten", 1, flatten},
      {"Pad", 2, pad_op},
  };
}

}  // namespace kiln::onnx::detail
