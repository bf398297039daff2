// Registry entries of the gradient ops a traced training step of a conv net records
// (conv2d_backward, pooling backward, batch_norm_backward, batch_norm_update_stats), so training
// steps of conv nets run as artifacts on the same kernels as eager backward.
//
// batch_norm_backward in training mode and batch_norm_update_stats recompute the batch statistics
// with the forward kernel, which needs per-call temporaries (allocated from the caching
// allocator): the only kernels here that allocate on the hot path.

#include "common.h"
#include "kiln/runtime/kernels/conv.h"
#include "kiln/runtime/kernels/copy.h"
#include "kiln/runtime/kernels/norm.h"
#include "kiln/runtime/kernels/pool.h"

namespace kiln::rt::ops {
namespace {

std::unique_ptr<KernelParams> decode_conv2d_backward(const AttrMap& a) {
  auto p = std::make_unique<ConvParams>();
  p->p = conv2d_params(a);
  return p;
}
// Operands (grad, input, weight) -> (grad_input, grad_weight, grad_bias).
void run_conv2d_backward(const KernelCall& c) {
  kernels::conv2d_backward_out(in(c, 0), in(c, 1), in(c, 2), params<ConvParams>(c).p, c.outputs[0],
                               c.outputs[1], c.outputs[2]);
}

void run_max_pool2d_backward(const KernelCall& c) {
  kernels::max_pool2d_backward_out(in(c, 0), in(c, 1), out(c));
}

std::unique_ptr<KernelParams> decode_avg_pool2d_backward(const AttrMap& a) {
  auto p = std::make_unique<PoolParams>();
  p->p = pool2d_params(a);
  return p;
}
void run_avg_pool2d_backward(const KernelCall& c) {
  kernels::avg_pool2d_backward_out(in(c, 0), params<PoolParams>(c).p, out(c));
}
void run_adaptive_avg_pool2d_backward(const KernelCall& c) {
  kernels::adaptive_avg_pool2d_backward_out(in(c, 0), out(c));
}

std::unique_ptr<KernelParams> decode_bn_backward(const AttrMap& a) {
  auto p = std::make_unique<FloatParams>();
  p->v[0] = a.f("eps");
  p->k = a.b("training") ? 1 : 0;
  return p;
}
// Operands (grad, input, weight?, running_mean?, running_var?) -> (grad_input, grad_weight,
// grad_bias).
void run_batch_norm_backward(const KernelCall& c) {
  const auto& p = params<FloatParams>(c);
  kernels::batch_norm_backward_recompute_out(in(c, 0), in(c, 1), opt_in(c, 2), opt_in(c, 3),
                                             opt_in(c, 4), p.k != 0, p.v[0], c.outputs[0],
                                             c.outputs[1], c.outputs[2]);
}

std::unique_ptr<KernelParams> decode_momentum(const AttrMap& a) {
  auto p = std::make_unique<FloatParams>();
  p->v[0] = a.f("momentum");
  return p;
}
// (input, running_mean, running_var) -> (new mean, new var): the eager kernel's update, into the
// outputs (eps as eager's default, which the update does not use).
void run_batch_norm_update_stats(const KernelCall& c) {
  kernels::batch_norm_update_stats_out(in(c, 0), in(c, 1), in(c, 2), params<FloatParams>(c).v[0],
                                       out(c, 0), out(c, 1));
}

}  // namespace

void register_backward(Registry& r) {
  r.add(with_signature(
      {.name = "conv2d_backward", .decode = decode_conv2d_backward, .run = run_conv2d_backward}));
  r.add(with_signature({.name = "max_pool2d_backward", .run = run_max_pool2d_backward}));
  r.add(with_signature({.name = "avg_pool2d_backward",
                        .decode = decode_avg_pool2d_backward,
                        .run = run_avg_pool2d_backward}));
  r.add(with_signature(
      {.name = "adaptive_avg_pool2d_backward", .run = run_adaptive_avg_pool2d_backward}));
  r.add(with_signature({.name = "batch_norm_backward",
                        .decode = decode_bn_backward,
                        .run = run_batch_norm_backward}));
  r.add(with_signature({.name = "batch_norm_update_stats",
                        .decode = decode_momentum,
                        .run = run_batch_norm_update_stats}));
}

}  // namespace kiln::rt::ops
