// Neural-network ops: the runtime's fused forward and backward kernels behind autograd nodes.
// Their backward nodes are first-order: differentiating a gradient of these ops again raises a
// clear error instead of returning a wrong second derivative.

#include "kernel_params.h"
#include "kiln/autograd.h"
#include "kiln/dispatch.h"
#include "kiln/nn_ops.h"
#include "kiln/ops.h"
#include "kiln/runtime/kernels/conv.h"
#include "kiln/runtime/kernels/embedding.h"
#include "kiln/runtime/kernels/interpolate.h"
#include "kiln/runtime/kernels/loss.h"
#include "kiln/runtime/kernels/norm.h"
#include "kiln/runtime/kernels/pool.h"

namespace kiln {

namespace {

const TensorImpl* opt(const Tensor& t) {
  return t.defined() ? t.impl() : nullptr;
}
TensorImpl* opt_mut(const Tensor& t) {
  return t.defined() ? t.impl() : nullptr;
}

// Every backward here runs a fused kernel and reports itself to the tracer as a kiln.*_backward
// op (so training steps trace); none is differentiable again.
void first_order_only(const char* op, const TensorList& grads) {
  if (!autograd::grad_enabled()) return;
  for (const Tensor& g : grads) {
    KILN_CHECK(!(g.defined() && g.requires_grad()), op,
               "double backward (create_graph through this op's gradient) is not supported");
  }
}

Tensor new_tensor(std::span<const int64_t> sizes, DType dtype, Device device) {
  return Tensor(kiln::empty(sizes, dtype, device));
}
Tensor new_like(const Tensor& t) {
  return Tensor(kiln::empty(t.sizes(), t.dtype(), t.device()));
}
// The spatial (H, W) dims of an N, C, H, W or C, H, W shape: what a gradient op records as the
// input size it scatters back to.
Dims spatial(const Dims& sizes) {
  return Dims(std::span<const int64_t>(sizes.end() - 2, 2));
}
// Normalization statistics keep float64 inputs' precision; everything else accumulates in f32.
DType stat_dtype(const Tensor& t) {
  return t.dtype() == DType::Float64 ? DType::Float64 : DType::Float32;
}

kernels::LossReduction to_kernel(Reduction r) {
  switch (r) {
    case Reduction::None:
      return kernels::LossReduction::None;
    case Reduction::Sum:
      return kernels::LossReduction::Sum;
    case Reduction::Mean:
      return kernels::LossReduction::Mean;
  }
  return kernels::LossReduction::Mean;
}

}  // namespace

// --- convolution ------------------------------------------------------------------------------

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, Pair2 stride,
              Pair2 padding, Pair2 dilation, int64_t groups) {
  const kernels::Conv2dParams p = detail::conv2d_params(stride, padding, dilation, groups);
  Tensor out = new_tensor(kernels::conv2d_output_shape(input.sizes(), weight.sizes(), p),
                          input.dtype(), input.device());
  kernels::conv2d_out(*input.impl(), *weight.impl(), opt(bias), p, *out.impl());
  autograd::record(
      "Conv2dBackward", {input, weight, bias}, {out}, {input, weight}, {},
      [p, has_bias = bias.defined()](const TensorList& s, const TensorList& g) {
        first_order_only("conv2d", g);
        const Tensor &x = s[0], &w = s[1];
        // A trace records all three gradients (one op); autograd gets those it needs.
        const bool all = dispatch::tracer() != nullptr;
        Tensor gi = all || x.requires_grad() ? new_like(x) : Tensor();
        Tensor gw = all || w.requires_grad() ? new_like(w) : Tensor();
        Tensor gb = all || has_bias ? new_tensor(Dims{w.size(0)}, w.dtype(), w.device()) : Tensor();
        kernels::conv2d_backward_out(*g[0].contiguous().impl(), *x.impl(), *w.impl(), p,
                                     opt_mut(gi), opt_mut(gw), opt_mut(gb));
        KILN_TRACE("conv2d_backward", TensorList({g[0], x, w}), TensorList({gi, gw, gb}),
                   {"stride", Dims{p.stride_h, p.stride_w}}, {"padding", Dims{p.pad_h, p.pad_w}},
                   {"dilation", Dims{p.dilation_h, p.dilation_w}}, {"groups", p.groups});
        return TensorList{x.requires_grad() ? gi : Tensor(), w.requires_grad() ? gw : Tensor(),
                          has_bias ? gb : Tensor()};
      });
  KILN_TRACE("conv2d",
             bias.defined() ? TensorList({input, weight, bias}) : TensorList({input, weight}),
             {out}, {"stride", Dims{stride.h, stride.w}}, {"padding", Dims{padding.h, padding.w}},
             {"dilation", Dims{dilation.h, dilation.w}}, {"groups", groups});
  return out;
}

Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias, int64_t stride,
              int64_t padding, int64_t dilation, int64_t groups) {
  kernels::Conv1dParams p{stride, padding, dilation, groups};
  Tensor out = new_tensor(kernels::conv1d_output_shape(input.sizes(), weight.sizes(), p),
                          input.dtype(), input.device());
  kernels::conv1d_out(*input.impl(), *weight.impl(), opt(bias), p, *out.impl());
  autograd::record(
      "Conv1dBackward", {input, weight, bias}, {out}, {input, weight}, {},
      [p, has_bias = bias.defined()](const TensorList& s, const TensorList& g) {
        first_order_only("conv1d", g);
        const Tensor &x = s[0], &w = s[1];
        // A trace records all three gradients (one op); autograd gets those it needs.
        const bool all = dispatch::tracer() != nullptr;
        Tensor gi = all || x.requires_grad() ? new_like(x) : Tensor();
        Tensor gw = all || w.requires_grad() ? new_like(w) : Tensor();
        Tensor gb = all || has_bias ? new_tensor(Dims{w.size(0)}, w.dtype(), w.device()) : Tensor();
        kernels::conv1d_backward_out(*g[0].contiguous().impl(), *x.impl(), *w.impl(), p,
                                     opt_mut(gi), opt_mut(gw), opt_mut(gb));
        KILN_TRACE("conv1d_backward", TensorList({g[0], x, w}), TensorList({gi, gw, gb}),
                   {"stride", p.stride}, {"padding", p.padding}, {"dilation", p.dilation},
                   {"groups", p.groups});
        return TensorList{x.requires_grad() ? gi : Tensor(), w.requires_grad() ? gw : Tensor(),
                          has_bias ? gb : Tensor()};
      });
  KILN_TRACE(
      "conv1d", bias.defined() ? TensorList({input, weight, bias}) : TensorList({input, weight}),
      {out}, {"stride", stride}, {"padding", padding}, {"dilation", dilation}, {"groups", groups});
  return out;
}

Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias, Pair2 stride,
                        Pair2 padding, Pair2 output_padding, int64_t groups, Pair2 dilation) {
  kernels::ConvTranspose2dParams p;
  p.stride_h = stride.h, p.stride_w = stride.w;
  p.pad_h = padding.h, p.pad_w = padding.w;
  p.output_pad_h = output_padding.h, p.output_pad_w = output_padding.w;
  p.dilation_h = dilation.h, p.dilation_w = dilation.w;
  p.groups = groups;
  Tensor out = new_tensor(kernels::conv_transpose2d_output_shape(input.sizes(), weight.sizes(), p),
                          input.dtype(), input.device());
  kernels::conv_transpose2d_out(*input.impl(), *weight.impl(), opt(bias), p, *out.impl());
  autograd::record(
      "ConvTranspose2dBackward", {input, weight, bias}, {out}, {input, weight}, {},
      [p, has_bias = bias.defined()](const TensorList& s, const TensorList& g) {
        first_order_only("conv_transpose2d", g);
        const Tensor &x = s[0], &w = s[1];
        const bool all = dispatch::tracer() != nullptr;  // a trace records all three gradients
        Tensor gi = all || x.requires_grad() ? new_like(x) : Tensor();
        Tensor gw = all || w.requires_grad() ? new_like(w) : Tensor();
        Tensor gb = all || has_bias ? new_tensor(Dims{w.size(1) * p.groups}, w.dtype(), w.device())
                                    : Tensor();
        kernels::conv_transpose2d_backward_out(*g[0].contiguous().impl(), *x.impl(), *w.impl(), p,
                                               opt_mut(gi), opt_mut(gw), opt_mut(gb));
        KILN_TRACE("conv_transpose2d_backward", TensorList({g[0], x, w}), TensorList({gi, gw, gb}),
                   {"stride", Dims{p.stride_h, p.stride_w}}, {"padding", Dims{p.pad_h, p.pad_w}},
                   {"output_padding", Dims{p.output_pad_h, p.output_pad_w}}, {"groups", p.groups},
                   {"dilation", Dims{p.dilation_h, p.dilation_w}});
        return TensorList{x.requires_grad() ? gi : Tensor(), w.requires_grad() ? gw : Tensor(),
                          has_bias ? gb : Tensor()};
      });
  KILN_TRACE("conv_transpose2d",
             bias.defined() ? TensorList({input, weight, bias}) : TensorList({input, weight}),
             {out}, {"stride", Dims{stride.h, stride.w}}, {"padding", Dims{padding.h, padding.w}},
             {"output_padding", Dims{output_padding.h, output_padding.w}}, {"groups", groups},
             {"dilation", Dims{dilation.h, dilation.w}});
  return out;
}

// --- pooling
// --------------------------------------------------------------------------------------

std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, Pair2 kernel,
                                                  std::optional<Pair2> stride, Pair2 padding,
                                                  Pair2 dilation, bool ceil_mode) {
  auto p = detail::pool2d_params(kernel, stride, padding, dilation, ceil_mode);
  Dims shape = kernels::max_pool2d_output_shape(input.sizes(), p);
  Tensor out = new_tensor(shape, input.dtype(), input.device());
  Tensor indices = new_tensor(shape, DType::Int64, input.device());
  kernels::max_pool2d_out(*input.impl(), p, *out.impl(), indices.impl());
  Dims in = input.sizes();
  DType dt = input.dtype();
  Device dev = input.device();
  autograd::record("MaxPool2dBackward", {input}, {out}, {indices}, {},
                   [in, dt, dev](const TensorList& s, const TensorList& g) {
                     first_order_only("max_pool2d", g);
                     Tensor gi = new_tensor(in, dt, dev);
                     kernels::max_pool2d_backward_out(*g[0].contiguous().impl(), *s[0].impl(),
                                                      *gi.impl());
                     KILN_TRACE("max_pool2d_backward", TensorList({g[0], s[0]}), {gi},
                                {"input_size", spatial(in)});
                     return TensorList{gi};
                   });
  KILN_TRACE("max_pool2d", {input}, TensorList({out, indices}),
             {"kernel", Dims{kernel.h, kernel.w}}, {"stride", Dims{p.stride_h, p.stride_w}},
             {"padding", Dims{padding.h, padding.w}}, {"dilation", Dims{dilation.h, dilation.w}},
             {"ceil_mode", ceil_mode});
  return {out, indices};
}

Tensor max_pool2d(const Tensor& input, Pair2 kernel, std::optional<Pair2> stride, Pair2 padding,
                  Pair2 dilation, bool ceil_mode) {
  return max_pool2d_with_indices(input, kernel, stride, padding, dilation, ceil_mode).first;
}

Tensor avg_pool2d(const Tensor& input, Pair2 kernel, std::optional<Pair2> stride, Pair2 padding,
                  bool ceil_mode, bool count_include_pad) {
  auto p = detail::pool2d_params(kernel, stride, padding, 1, ceil_mode);
  p.count_include_pad = count_include_pad;
  Tensor out =
      new_tensor(kernels::avg_pool2d_output_shape(input.sizes(), p), input.dtype(), input.device());
  kernels::avg_pool2d_out(*input.impl(), p, *out.impl());
  Dims in = input.sizes();
  DType dt = input.dtype();
  Device dev = input.device();
  autograd::record(
      "AvgPool2dBackward", {input}, {out}, {}, {},
      [in, dt, dev, p](const TensorList&, const TensorList& g) {
        first_order_only("avg_pool2d", g);
        Tensor gi = new_tensor(in, dt, dev);
        kernels::avg_pool2d_backward_out(*g[0].contiguous().impl(), p, *gi.impl());
        KILN_TRACE("avg_pool2d_backward", {g[0]}, {gi}, {"kernel", Dims{p.kernel_h, p.kernel_w}},
                   {"stride", Dims{p.stride_h, p.stride_w}}, {"padding", Dims{p.pad_h, p.pad_w}},
                   {"ceil_mode", p.ceil_mode}, {"count_include_pad", p.count_include_pad},
                   {"input_size", spatial(in)});
        return TensorList{gi};
      });
  KILN_TRACE("avg_pool2d", {input}, {out}, {"kernel", Dims{kernel.h, kernel.w}},
             {"stride", Dims{p.stride_h, p.stride_w}}, {"padding", Dims{padding.h, padding.w}},
             {"ceil_mode", ceil_mode}, {"count_include_pad", count_include_pad});
  return out;
}

Tensor adaptive_avg_pool2d(const Tensor& input, Pair2 output_size) {
  Tensor out = new_tensor(
      kernels::adaptive_avg_pool2d_output_shape(input.sizes(), output_size.h, output_size.w),
      input.dtype(), input.device());
  kernels::adaptive_avg_pool2d_out(*input.impl(), *out.impl());
  Dims in = input.sizes();
  DType dt = input.dtype();
  Device dev = input.device();
  autograd::record(
      "AdaptiveAvgPool2dBackward", {input}, {out}, {}, {},
      [in, dt, dev](const TensorList&, const TensorList& g) {
        first_order_only("adaptive_avg_pool2d", g);
        Tensor gi = new_tensor(in, dt, dev);
        kernels::adaptive_avg_pool2d_backward_out(*g[0].contiguous().impl(), *gi.impl());
        KILN_TRACE("adaptive_avg_pool2d_backward", {g[0]}, {gi}, {"input_size", spatial(in)});
        return TensorList{gi};
      });
  KILN_TRACE("adaptive_avg_pool2d", {input}, {out},
             {"output_size", Dims{output_size.h, output_size.w}});
  return out;
}

// --- normalization
// --------------------------------------------------------------------------------

Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum,
                  double eps) {
  KILN_CHECK(input.dim() >= 2, "batch_norm", "expected input of at least 2 dims (N, C, ...), got ",
             input.sizes());
  const int64_t C = input.size(1);
  Tensor out = new_like(input);
  Tensor save_mean = training ? new_tensor(Dims{C}, stat_dtype(input), input.device()) : Tensor();
  Tensor save_invstd = training ? new_tensor(Dims{C}, stat_dtype(input), input.device()) : Tensor();
  kernels::batch_norm_out(*input.impl(), opt(weight), opt(bias), opt_mut(running_mean),
                          opt_mut(running_var), training, momentum, eps, *out.impl(),
                          opt_mut(save_mean), opt_mut(save_invstd));
  if (training) {
    if (running_mean.defined()) autograd::bump_version(running_mean);
    if (running_var.defined()) autograd::bump_version(running_var);
  }
  // Running statistics are read (not differentiated) in eval mode: save copies' references.
  autograd::record(
      "BatchNormBackward", {input, weight, bias}, {out},
      {input, weight, save_mean, save_invstd, training ? Tensor() : running_mean,
       training ? Tensor() : running_var},
      {}, [training, eps](const TensorList& s, const TensorList& g) {
        first_order_only("batch_norm", g);
        const Tensor &x = s[0], &w = s[1];
        const bool all = dispatch::tracer() != nullptr;
        Tensor gi = all || x.requires_grad() ? new_like(x) : Tensor();
        Tensor gw =
            all || (w.defined() && w.requires_grad())
                ? new_tensor(Dims{x.size(1)}, w.defined() ? w.dtype() : x.dtype(), x.device())
                : Tensor();
        Tensor gb = w.defined() ? new_tensor(w.sizes(), w.dtype(), x.device())
                                : new_tensor(Dims{x.size(1)}, x.dtype(), x.device());
        kernels::batch_norm_backward_out(*g[0].contiguous().impl(), *x.impl(), opt(w), opt(s[4]),
                                         opt(s[5]), opt(s[2]), opt(s[3]), training, eps,
                                         opt_mut(gi), opt_mut(gw), opt_mut(gb));
        // Traced: the batch statistics are recomputed from x by the op itself.
        KILN_TRACE("batch_norm_backward", TensorList({g[0], x, w, s[4], s[5]}),
                   TensorList({gi, gw, gb}), {"training", training}, {"eps", eps});
        return TensorList{x.requires_grad() ? gi : Tensor(),
                          w.defined() && w.requires_grad() ? gw : Tensor(), gb};
      });
  KILN_TRACE("batch_norm", TensorList({input, running_mean, running_var, weight, bias}), {out},
             {"training", training}, {"momentum", momentum}, {"eps", eps});
  // The running statistics were written in place: a trace records that as new values of them.
  if (training && running_mean.defined() && running_var.defined()) {
    KILN_TRACE("batch_norm_update_stats", TensorList({input, running_mean, running_var}),
               TensorList({running_mean, running_var}), {"momentum", momentum});
  }
  return out;
}

Tensor layer_norm(const Tensor& input, std::span<const int64_t> normalized_shape,
                  const Tensor& weight, const Tensor& bias, double eps) {
  Dims ns(normalized_shape);
  Dims stats = kernels::layer_norm_stats_shape(input.sizes(), ns);
  Tensor out = new_like(input);
  Tensor mean = new_tensor(stats, stat_dtype(input), input.device());
  Tensor rstd = new_tensor(stats, stat_dtype(input), input.device());
  kernels::layer_norm_out(*input.impl(), ns, opt(weight), opt(bias), eps, *out.impl(), mean.impl(),
                          rstd.impl());
  autograd::record(
      "LayerNormBackward", {input, weight, bias}, {out}, {input, weight, mean, rstd}, {},
      [ns, eps, has_bias = bias.defined()](const TensorList& s, const TensorList& g) {
        first_order_only("layer_norm", g);
        const Tensor &x = s[0], &w = s[1];
        const bool all = dispatch::tracer() != nullptr;  // all three, traced
        const bool want_w = w.defined() && w.requires_grad();
        Tensor gi = all || x.requires_grad() ? new_like(x) : Tensor();
        Tensor gw = want_w ? new_like(w) : all ? new_tensor(ns, x.dtype(), x.device()) : Tensor();
        Tensor gb = all || has_bias ? new_tensor(ns, x.dtype(), x.device()) : Tensor();
        kernels::layer_norm_backward_out(*g[0].contiguous().impl(), *x.impl(), ns, *s[2].impl(),
                                         *s[3].impl(), opt(w), opt_mut(gi), opt_mut(gw),
                                         opt_mut(gb));
        // The traced op recomputes mean and rstd from input (as batch_norm's does).
        KILN_TRACE("layer_norm_backward", TensorList({g[0], x, w}), TensorList({gi, gw, gb}),
                   {"normalized_shape", ns}, {"eps", eps});
        return TensorList{x.requires_grad() ? gi : Tensor(), want_w ? gw : Tensor(),
                          has_bias ? gb : Tensor()};
      });
  KILN_TRACE("layer_norm", TensorList({input, weight, bias}), {out}, {"normalized_shape", ns},
             {"eps", eps});
  return out;
}

Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight, const Tensor& bias,
                  double eps) {
  KILN_CHECK(input.dim() >= 2, "group_norm", "expected input of at least 2 dims (N, C, ...), got ",
             input.sizes());
  Tensor out = new_like(input);
  Tensor mean = new_tensor(Dims{input.size(0), num_groups}, stat_dtype(input), input.device());
  Tensor rstd = new_tensor(Dims{input.size(0), num_groups}, stat_dtype(input), input.device());
  kernels::group_norm_out(*input.impl(), num_groups, opt(weight), opt(bias), eps, *out.impl(),
                          mean.impl(), rstd.impl());
  autograd::record(
      "GroupNormBackward", {input, weight, bias}, {out}, {input, weight, mean, rstd}, {},
      [num_groups, eps, has_bias = bias.defined()](const TensorList& s, const TensorList& g) {
        first_order_only("group_norm", g);
        const Tensor &x = s[0], &w = s[1];
        const bool all = dispatch::tracer() != nullptr;  // all three, traced
        const bool want_w = w.defined() && w.requires_grad();
        Tensor gi = all || x.requires_grad() ? new_like(x) : Tensor();
        Tensor gw = want_w ? new_like(w)
                    : all  ? new_tensor(Dims{x.size(1)}, x.dtype(), x.device())
                           : Tensor();
        Tensor gb = all || has_bias ? new_tensor(Dims{x.size(1)}, x.dtype(), x.device()) : Tensor();
        kernels::group_norm_backward_out(*g[0].contiguous().impl(), *x.impl(), num_groups,
                                         *s[2].impl(), *s[3].impl(), opt(w), opt_mut(gi),
                                         opt_mut(gw), opt_mut(gb));
        // The traced op recomputes mean and rstd from input (as batch_norm's does).
        KILN_TRACE("group_norm_backward", TensorList({g[0], x, w}), TensorList({gi, gw, gb}),
                   {"num_groups", num_groups}, {"eps", eps});
        return TensorList{x.requires_grad() ? gi : Tensor(), want_w ? gw : Tensor(),
                          has_bias ? gb : Tensor()};
      });
  KILN_TRACE("group_norm", TensorList({input, weight, bias}), {out}, {"num_groups", num_groups},
             {"eps", eps});
  return out;
}

// --- embedding ----------------------------------------------------------------------------------

Tensor interpolate(const Tensor& input, const InterpolateOptions& o) {
  constexpr const char* op = "interpolate";
  KILN_CHECK(input.dim() == 4, op, "expected a 4-d (N, C, H, W) input, got ", input.sizes());
  KILN_CHECK(o.size().has_value() != o.scale_factor().has_value(), op,
             "expected exactly one of size and scale_factor, got ", o.size() ? "both" : "neither");
  KILN_CHECK(!o.align_corners() || o.mode() == InterpolateMode::Bilinear, op,
             "align_corners can only be set with mode Bilinear");
  kernels::InterpolateParams p;
  p.mode = o.mode() == InterpolateMode::Bilinear ? kernels::InterpolateMode::Bilinear
                                                 : kernels::InterpolateMode::Nearest;
  p.align_corners = o.align_corners().value_or(false);
  const int64_t H = input.size(2), W = input.size(3);
  int64_t Ho = 0, Wo = 0;
  if (o.size()) {
    const auto& s = *o.size();
    KILN_CHECK(s.size() == 1 || s.size() == 2, op, "expected size of 1 or 2 values, got ",
               s.size());
    Ho = s[0], Wo = s.back();
    KILN_CHECK(Ho > 0 && Wo > 0, op, "expected an output size > 0, got (", Ho, ", ", Wo, ")");
  } else {
    const auto& s = *o.scale_factor();
    KILN_CHECK(s.size() == 1 || s.size() == 2, op, "expected scale_factor of 1 or 2 values, got ",
               s.size());
    Ho = kernels::interpolate_output_size(op, H, s[0]);
    Wo = kernels::interpolate_output_size(op, W, s.back());
    if (!o.recompute_scale_factor()) p.scale_h = s[0], p.scale_w = s.back();
  }
  Tensor out =
      new_tensor(Dims{input.size(0), input.size(1), Ho, Wo}, input.dtype(), input.device());
  kernels::interpolate_out(*input.impl(), p, *out.impl());
  Dims in = input.sizes();
  DType dt = input.dtype();
  Device dev = input.device();
  autograd::record("InterpolateBackward", {input}, {out}, {}, {},
                   [in, dt, dev, p](const TensorList&, const TensorList& g) {
                     first_order_only("interpolate", g);
                     Tensor gi = new_tensor(in, dt, dev);
                     kernels::interpolate_backward_out(*g[0].contiguous().impl(), p, *gi.impl());
                     KILN_TRACE("interpolate_backward", {g[0]}, {gi},
                                {"mode", static_cast<int64_t>(p.mode)},
                                {"align_corners", p.align_corners}, {"scale_h", p.scale_h},
                                {"scale_w", p.scale_w}, {"input_size", spatial(in)});
                     return TensorList{gi};
                   });
  KILN_TRACE("interpolate", {input}, {out}, {"mode", static_cast<int64_t>(p.mode)},
             {"align_corners", p.align_corners}, {"scale_h", p.scale_h}, {"scale_w", p.scale_w},
             {"output_size", Dims{Ho, Wo}});
  return out;
}

Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx) {
  Tensor out = new_tensor(kernels::embedding_output_shape(indices.sizes(), weight.sizes()),
                          weight.dtype(), weight.device());
  kernels::embedding_out(*weight.impl(), *indices.impl(), *out.impl());
  Dims ws = weight.sizes();
  DType dt = weight.dtype();
  Device dev = weight.device();
  autograd::record("EmbeddingBackward", {weight}, {out}, {indices}, {},
                   [ws, dt, dev, padding_idx](const TensorList& s, const TensorList& g) {
                     first_order_only("embedding", g);
                     Tensor gw = new_tensor(ws, dt, dev);
                     kernels::embedding_backward_out(*g[0].contiguous().impl(), *s[0].impl(),
                                                     padding_idx, false, *gw.impl());
                     KILN_TRACE("embedding_backward", TensorList({g[0], s[0]}), {gw},
                                {"weight_size", ws}, {"padding_idx", padding_idx.value_or(-1)});
                     return TensorList{gw};
                   });
  KILN_TRACE("embedding", TensorList({weight, indices}), {out},
             {"padding_idx", padding_idx.value_or(-1)});
  return out;
}

// --- losses -----------------------------------------------------------------------------------

namespace {
kernels::CrossEntropyOptions ce_options(const Tensor& weight, int64_t ignore_index,
                                        Reduction reduction, double smoothing) {
  kernels::CrossEntropyOptions o;
  o.weight = opt(weight);
  o.ignore_index = ignore_index;
  o.reduction = to_kernel(reduction);
  o.label_smoothing = smoothing;
  return o;
}
}  // namespace

Tensor cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight,
                     int64_t ignore_index, Reduction reduction, double label_smoothing) {
  auto o = ce_options(weight, ignore_index, reduction, label_smoothing);
  Tensor out =
      new_tensor(kernels::cross_entropy_output_shape(input.sizes(), target.sizes(), o.reduction),
                 input.dtype(), input.device());
  kernels::cross_entropy_out(*input.impl(), *target.impl(), o, *out.impl());
  autograd::record(
      "CrossEntropyBackward", {input}, {out}, {input, target, weight}, {},
      [ignore_index, reduction, label_smoothing](const TensorList& s, const TensorList& g) {
        first_order_only("cross_entropy", g);
        auto o = ce_options(s[2], ignore_index, reduction, label_smoothing);
        Tensor gi = new_like(s[0]);
        kernels::cross_entropy_backward_out(*g[0].contiguous().impl(), *s[0].impl(), *s[1].impl(),
                                            o, *gi.impl());
        KILN_TRACE("cross_entropy_backward", TensorList({g[0], s[0], s[1], s[2]}), {gi},
                   {"ignore_index", ignore_index}, {"reduction", static_cast<int64_t>(reduction)},
                   {"label_smoothing", label_smoothing});
        return TensorList{gi};
      });
  KILN_TRACE("cross_entropy", TensorList({input, target, weight}), {out},
             {"ignore_index", ignore_index}, {"reduction", static_cast<int64_t>(reduction)},
             {"label_smoothing", label_smoothing});
  return out;
}

Tensor nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight,
                int64_t ignore_index, Reduction reduction) {
  auto o = ce_options(weight, ignore_index, reduction, 0.0);
  Tensor out =
      new_tensor(kernels::cross_entropy_output_shape(input.sizes(), target.sizes(), o.reduction),
                 input.dtype(), input.device());
  kernels::nll_loss_out(*input.impl(), *target.impl(), o, *out.impl());
  autograd::record("NllLossBackward", {input}, {out}, {input, target, weight}, {},
                   [ignore_index, reduction](const TensorList& s, const TensorList& g) {
                     first_order_only("nll_loss", g);
                     auto o = ce_options(s[2], ignore_index, reduction, 0.0);
                     Tensor gi = new_like(s[0]);
                     kernels::nll_loss_backward_out(*g[0].contiguous().impl(), *s[0].impl(),
                                                    *s[1].impl(), o, *gi.impl());
                     KILN_TRACE("nll_loss_backward", TensorList({g[0], s[0], s[1], s[2]}), {gi},
                                {"ignore_index", ignore_index},
                                {"reduction", static_cast<int64_t>(reduction)});
                     return TensorList{gi};
                   });
  KILN_TRACE("nll_loss", TensorList({input, target, weight}), {out}, {"ignore_index", ignore_index},
             {"reduction", static_cast<int64_t>(reduction)});
  return out;
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  const auto r = to_kernel(reduction);
  Tensor out(kiln::empty(kernels::pointwise_loss_output_shape(input.sizes(), r), input.dtype(),
                         input.device()));
  kernels::mse_loss_out(*input.impl(), *target.impl(), r, *out.impl());
  autograd::record("MseLossBackward", {input, target}, {out}, {input, target}, {},
                   [r](const TensorList& s, const TensorList& g) {
                     first_order_only("mse_loss", g);
                     Tensor gi = new_like(s[0]);
                     kernels::mse_loss_backward_out(*g[0].contiguous().impl(), *s[0].impl(),
                                                    *s[1].impl(), r, *gi.impl());
                     KILN_TRACE("mse_loss_backward", TensorList({g[0], s[0], s[1]}), {gi},
                                {"reduction", static_cast<int64_t>(r)});
                     return TensorList{gi, s[1].requires_grad() ? -gi : Tensor()};
                   });
  KILN_TRACE("mse_loss", TensorList({input, target}), {out},
             {"reduction", static_cast<int64_t>(reduction)});
  return out;
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction, double beta) {
  const auto r = to_kernel(reduction);
  Tensor out = new_tensor(kernels::pointwise_loss_output_shape(input.sizes(), r), input.dtype(),
                          input.device());
  kernels::smooth_l1_loss_out(*input.impl(), *target.impl(), r, beta, *out.impl());
  autograd::record("SmoothL1LossBackward", {input, target}, {out}, {input, target}, {},
                   [r, beta](const TensorList& s, const TensorList& g) {
                     first_order_only("smooth_l1_loss", g);
                     Tensor gi = new_like(s[0]);
                     kernels::smooth_l1_loss_backward_out(*g[0].contiguous().impl(), *s[0].impl(),
                                                          *s[1].impl(), r, beta, *gi.impl());
                     KILN_TRACE("smooth_l1_loss_backward", TensorList({g[0], s[0], s[1]}), {gi},
                                {"reduction", static_cast<int64_t>(r)}, {"beta", beta});
                     return TensorList{gi, s[1].requires_grad() ? -gi : Tensor()};
                   });
  KILN_TRACE("smooth_l1_loss", TensorList({input, target}), {out},
             {"reduction", static_cast<int64_t>(reduction)}, {"beta", beta});
  return out;
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const Tensor& weight, const Tensor& pos_weight,
                                        Reduction reduction) {
  const auto r = to_kernel(reduction);
  Tensor out = new_tensor(kernels::pointwise_loss_output_shape(input.sizes(), r), input.dtype(),
                          input.device());
  kernels::binary_cross_entropy_with_logits_out(*input.impl(), *target.impl(), opt(weight),
                                                opt(pos_weight), r, *out.impl());
  autograd::record("BinaryCrossEntropyWithLogitsBackward", {input}, {out},
                   {input, target, weight, pos_weight}, {},
                   [r](const TensorList& s, const TensorList& g) {
                     first_order_only("binary_cross_entropy_with_logits", g);
                     Tensor gi = new_like(s[0]);
                     kernels::binary_cross_entropy_with_logits_backward_out(
                         *g[0].contiguous().impl(), *s[0].impl(), *s[1].impl(), opt(s[2]),
                         opt(s[3]), r, *gi.impl());
                     KILN_TRACE("binary_cross_entropy_with_logits_backward",
                                TensorList({g[0], s[0], s[1], s[2], s[3]}), {gi},
                                {"reduction", static_cast<int64_t>(r)});
                     return TensorList{gi};
                   });
  KILN_TRACE("binary_cross_entropy_with_logits", TensorList({input, target, weight, pos_weight}),
             {out}, {"reduction", static_cast<int64_t>(reduction)});
  return out;
}

}  // namespace kiln
