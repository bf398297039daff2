// The reference interpreter's kernels for the gradient ops a traced training step records
// (kiln.*_backward): the runtime's fused backward kernels, called on the recorded operands.

#include "interpreter_kernels.h"
#include "kiln/autograd.h"
#include "kiln/ir/KilnDialect.h"
#include "kiln/ops.h"
#include "kiln/runtime/kernels/conv.h"
#include "kiln/runtime/kernels/embedding.h"
#include "kiln/runtime/kernels/interpolate.h"
#include "kiln/runtime/kernels/loss.h"
#include "kiln/runtime/kernels/norm.h"
#include "kiln/runtime/kernels/pool.h"
#include "kiln/runtime/kernels/quantize.h"
#include "kiln/runtime/kernels/reduce.h"

namespace kiln::jit::interp {

void add_gradient_kernels(KernelTable& table) {
  using L = const TensorList&;
  using A = const Attrs&;
  using O = mlir::Operation*;
  const KernelTable gradients = {
      {id<ir::SoftmaxBackwardOp>(),
       [](L x, A a, O) {
         return TensorList{x[1] * (x[0] - sum(x[0] * x[1], Dims{a.i("dim")}, true))};
       }},
      {id<ir::LogSoftmaxBackwardOp>(),
       [](L x, A a, O) {
         return TensorList{x[0] - exp(x[1]) * sum(x[0], Dims{a.i("dim")}, true)};
       }},
      {id<ir::BatchNormBackwardOp>(),
       [](L x, A a, O op) {
         auto ptr = [](const Tensor& t) { return t.defined() ? t.impl() : nullptr; };
         Tensor gi = result_like(op, 0), gw = result_like(op, 1), gb = result_like(op, 2);
         kernels::batch_norm_backward_recompute_out(
             *x[0].contiguous().impl(), *x[1].contiguous().impl(), ptr(x[2]), ptr(x[3]), ptr(x[4]),
             a.b("training"), a.f("eps"), gi.impl(), gw.impl(), gb.impl());
         return TensorList{gi, gw, gb};
       }},
      {id<ir::Conv2dBackwardOp>(),
       [](L x, A a, O op) {
         kernels::Conv2dParams p;
         const Dims s = a.dims("stride"), pad = a.dims("padding"), d = a.dims("dilation");
         p.stride_h = s[0], p.stride_w = s[1], p.pad_h = pad[0], p.pad_w = pad[1];
         p.dilation_h = d[0], p.dilation_w = d[1], p.groups = a.i("groups");
         Tensor gi = result_like(op, 0), gw = result_like(op, 1), gb = result_like(op, 2);
         kernels::conv2d_backward_out(*x[0].contiguous().impl(), *x[1].contiguous().impl(),
                                      *x[2].contiguous().impl(), p, gi.impl(), gw.impl(),
                                      gb.impl());
         return TensorList{gi, gw, gb};
       }},
      {id<ir::Conv1dBackwardOp>(),
       [](L x, A a, O op) {
         const kernels::Conv1dParams p{a.i("stride"), a.i("padding"), a.i("dilation"),
                                       a.i("groups")};
         Tensor gi = result_like(op, 0), gw = result_like(op, 1), gb = result_like(op, 2);
         kernels::conv1d_backward_out(*x[0].contiguous().impl(), *x[1].contiguous().impl(),
                                      *x[2].contiguous().impl(), p, gi.impl(), gw.impl(),
                                      gb.impl());
         return TensorList{gi, gw, gb};
       }},
      {id<ir::ConvTranspose2dBackwardOp>(),
       [](L x, A a, O op) {
         const Dims s = a.dims("stride"), pad = a.dims("padding"), o = a.dims("output_padding"),
                    d = a.dims("dilation");
         const kernels::ConvTranspose2dParams p{s[0], s[1], pad[0], pad[1],       o[0],
                                                o[1], d[0], d[1],   a.i("groups")};
         Tensor gi = result_like(op, 0), gw = result_like(op, 1), gb = result_like(op, 2);
         kernels::conv_transpose2d_backward_out(
             *x[0].contiguous().impl(), *x[1].contiguous().impl(), *x[2].contiguous().impl(), p,
             gi.impl(), gw.impl(), gb.impl());
         return TensorList{gi, gw, gb};
       }},
      {id<ir::LayerNormBackwardOp>(),
       [](L x, A a, O op) {
         Tensor gi = result_like(op, 0), gw = result_like(op, 1), gb = result_like(op, 2);
         Tensor w = x[2].defined() ? x[2].contiguous() : Tensor();
         kernels::layer_norm_backward_recompute_out(
             *x[0].contiguous().impl(), *x[1].contiguous().impl(), a.dims("normalized_shape"),
             w.defined() ? w.impl() : nullptr, a.f("eps"), gi.impl(), gw.impl(), gb.impl());
         return TensorList{gi, gw, gb};
       }},
      {id<ir::GroupNormBackwardOp>(),
       [](L x, A a, O op) {
         Tensor gi = result_like(op, 0), gw = result_like(op, 1), gb = result_like(op, 2);
         Tensor w = x[2].defined() ? x[2].contiguous() : Tensor();
         kernels::group_norm_backward_recompute_out(
             *x[0].contiguous().impl(), *x[1].contiguous().impl(), a.i("num_groups"),
             w.defined() ? w.impl() : nullptr, a.f("eps"), gi.impl(), gw.impl(), gb.impl());
         return TensorList{gi, gw, gb};
       }},
      {id<ir::EmbeddingBackwardOp>(),
       [](L x, A a, O op) {
         Tensor gw = result_like(op, 0);
         const int64_t pad = a.i("padding_idx");
         kernels::embedding_backward_out(*x[0].contiguous().impl(), *x[1].contiguous().impl(),
                                         pad < 0 ? std::nullopt : std::optional<int64_t>(pad),
                                         false, *gw.impl());
         return TensorList{gw};
       }},
      {id<ir::NllLossBackwardOp>(),
       [](L x, A a, O op) {
         Tensor gi = result_like(op, 0);
         kernels::CrossEntropyOptions o;
         o.ignore_index = a.i("ignore_index");
         o.reduction = static_cast<kernels::LossReduction>(a.i("reduction"));
         Tensor w = x[3].defined() ? x[3].contiguous() : Tensor();
         o.weight = w.defined() ? w.impl() : nullptr;
         kernels::nll_loss_backward_out(*x[0].contiguous().impl(), *x[1].contiguous().impl(),
                                        *x[2].contiguous().impl(), o, *gi.impl());
         return TensorList{gi};
       }},
      {id<ir::SmoothL1LossBackwardOp>(),
       [](L x, A a, O op) {
         Tensor gi = result_like(op, 0);
         kernels::smooth_l1_loss_backward_out(
             *x[0].contiguous().impl(), *x[1].contiguous().impl(), *x[2].contiguous().impl(),
             static_cast<kernels::LossReduction>(a.i("reduction")), a.f("beta", 1.0), *gi.impl());
         return TensorList{gi};
       }},
      {id<ir::BinaryCrossEntropyWithLogitsBackwardOp>(),
       [](L x, A a, O op) {
         Tensor gi = result_like(op, 0);
         Tensor w = x[3].defined() ? x[3].contiguous() : Tensor();
         Tensor pw = x[4].defined() ? x[4].contiguous() : Tensor();
         kernels::binary_cross_entropy_with_logits_backward_out(
             *x[0].contiguous().impl(), *x[1].contiguous().impl(), *x[2].contiguous().impl(),
             w.defined() ? w.impl() : nullptr, pw.defined() ? pw.impl() : nullptr,
             static_cast<kernels::LossReduction>(a.i("reduction")), *gi.impl());
         return TensorList{gi};
       }},
      {id<ir::MaxPool2dBackwardOp>(),
       [](L x, A, O op) {
         Tensor gi = result_like(op, 0);
         kernels::max_pool2d_backward_out(*x[0].contiguous().impl(), *x[1].contiguous().impl(),
                                          *gi.impl());
         return TensorList{gi};
       }},
      {id<ir::AvgPool2dBackwardOp>(),
       [](L x, A a, O op) {
         kernels::Pool2dParams p;
         const Dims k = a.dims("kernel"), s = a.dims("stride"), pad = a.dims("padding");
         p.kernel_h = k[0], p.kernel_w = k[1], p.stride_h = s[0], p.stride_w = s[1];
         p.pad_h = pad[0], p.pad_w = pad[1];
         p.ceil_mode = a.b("ceil_mode"), p.count_include_pad = a.b("count_include_pad");
         Tensor gi = result_like(op, 0);
         kernels::avg_pool2d_backward_out(*x[0].contiguous().impl(), p, *gi.impl());
         return TensorList{gi};
       }},
      {id<ir::FakeQuantizeBackwardOp>(),
       [](L x, A a, O op) {
         Tensor gi = result_like(op, 0);
         kernels::fake_quantize_backward_out(
             *x[0].contiguous().impl(), *x[1].impl(), *x[2].impl(), *x[3].impl(),
             {a.i("axis"), a.i("quant_min"), a.i("quant_max")}, *gi.impl());
         return TensorList{gi};
       }},
      {id<ir::InterpolateBackwardOp>(),
       [](L x, A a, O op) {
         kernels::InterpolateParams p;
         p.mode = static_cast<kernels::InterpolateMode>(a.i("mode"));
         p.align_corners = a.b("align_corners");
         p.scale_h = a.f("scale_h"), p.scale_w = a.f("scale_w");
         Tensor gi = result_like(op, 0);
         kernels::interpolate_backward_out(*x[0].contiguous().impl(), p, *gi.impl());
         return TensorList{gi};
       }},
      {id<ir::AdaptiveAvgPool2dBackwardOp>(),
       [](L x, A, O op) {
         Tensor gi = result_like(op, 0);
         kernels::adaptive_avg_pool2d_backward_out(*x[0].contiguous().impl(), *gi.impl());
         return TensorList{gi};
       }},
      {id<ir::MseLossBackwardOp>(),
       [](L x, A a, O) {
         // d/dinput of mean((input - target)^2) (or the sum): 2 (input - target) * g [/ numel]
         Tensor d = (x[1] - x[2]) * 2.0;
         if (reduction(a) == Reduction::Mean) d = d / static_cast<double>(x[1].numel());
         return TensorList{d * x[0]};
       }},
      {id<ir::CrossEntropyBackwardOp>(),
       [](L x, A a, O) {
         // Replays the eager op's own backward on the recorded operands.
         Tensor logits = x[1].detach().requires_grad_();
         Tensor loss;
         {
           autograd::EnableGradGuard grad;
           loss = cross_entropy(logits, x[2], x[3], a.i("ignore_index"), reduction(a),
                                a.f("label_smoothing"));
         }
         return TensorList{autograd::grad({loss}, {logits}, {x[0]})[0]};
       }},
  };
  for (const auto& [key, kernel] : gradients) table.try_emplace(key, kernel);
}

}  // namespace kiln::jit::interp
