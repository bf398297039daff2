// Registry entries of the losses and the backward kernels a traced training step records
// (cross_entropy_backward, mse_loss_backward, softmax_backward, ...), so training-step artifacts
// run on the same kernels as eager mode.

#include "kiln/runtime/kernels/loss.h"
#include "common.h"
#include "kiln/runtime/kernels/reduce.h"

namespace kiln::rt::ops {
namespace {

using kernels::LossReduction;

struct LossParams : KernelParams {
  kernels::CrossEntropyOptions ce;
  double beta = 1.0;
};

std::unique_ptr<KernelParams> decode_loss(const AttrMap& a) {
  auto p = std::make_unique<LossParams>();
  const int64_t r = a.i("reduction");
  KILN_CHECK(r >= 0 && r <= 2, a.op(), "attribute 'reduction': expected 0..2, got ", r);
  p->ce.reduction = static_cast<LossReduction>(r);
  if (a.declares("ignore_index")) p->ce.ignore_index = a.i("ignore_index");
  if (a.declares("label_smoothing")) p->ce.label_smoothing = a.f("label_smoothing");
  if (a.declares("beta")) p->beta = a.f("beta");
  return p;
}

// The class weights: the optional input `i` (absent: every class weighs 1).
kernels::CrossEntropyOptions ce_with_weight(const KernelCall& c, size_t i) {
  kernels::CrossEntropyOptions o = params<LossParams>(c).ce;
  o.weight = opt_in(c, i);
  return o;
}
void run_cross_entropy(const KernelCall& c) {
  kernels::cross_entropy_out(in(c, 0), in(c, 1), ce_with_weight(c, 2), out(c));
}
void run_cross_entropy_backward(const KernelCall& c) {
  kernels::cross_entropy_backward_out(in(c, 0), in(c, 1), in(c, 2), ce_with_weight(c, 3), out(c));
}
void run_nll_loss(const KernelCall& c) {
  kernels::nll_loss_out(in(c, 0), in(c, 1), ce_with_weight(c, 2), out(c));
}
void run_mse_loss(const KernelCall& c) {
  kernels::mse_loss_out(in(c, 0), in(c, 1), params<LossParams>(c).ce.reduction, out(c));
}
void run_mse_loss_backward(const KernelCall& c) {
  kernels::mse_loss_backward_out(in(c, 0), in(c, 1), in(c, 2), params<LossParams>(c).ce.reduction,
                                 out(c));
}
void run_smooth_l1_loss(const KernelCall& c) {
  const auto& p = params<LossParams>(c);
  kernels::smooth_l1_loss_out(in(c, 0), in(c, 1), p.ce.reduction, p.beta, out(c));
}
void run_bce_with_logits(const KernelCall& c) {
  kernels::binary_cross_entropy_with_logits_out(in(c, 0), in(c, 1), opt_in(c, 2), opt_in(c, 3),
                                                params<LossParams>(c).ce.reduction, out(c));
}

void run_nll_loss_backward(const KernelCall& c) {
  kernels::nll_loss_backward_out(in(c, 0), in(c, 1), in(c, 2), ce_with_weight(c, 3), out(c));
}
void run_smooth_l1_loss_backward(const KernelCall& c) {
  const auto& p = params<LossParams>(c);
  kernels::smooth_l1_loss_backward_out(in(c, 0), in(c, 1), in(c, 2), p.ce.reduction, p.beta,
                                       out(c));
}
// (grad, input, target, weight?, pos_weight?) -> grad_input.
void run_bce_with_logits_backward(const KernelCall& c) {
  kernels::binary_cross_entropy_with_logits_backward_out(
      in(c, 0), in(c, 1), in(c, 2), opt_in(c, 3), opt_in(c, 4), params<LossParams>(c).ce.reduction,
      out(c));
}

std::unique_ptr<KernelParams> decode_dim(const AttrMap& a) {
  auto p = std::make_unique<IntParams>();
  p->v[0] = a.i("dim");
  return p;
}
// Operands (grad, output) as the tracer records them.
void run_softmax_backward(const KernelCall& c) {
  kernels::softmax_backward_out(in(c, 0), in(c, 1), params<IntParams>(c).v[0], out(c));
}
void run_log_softmax_backward(const KernelCall& c) {
  kernels::log_softmax_backward_out(in(c, 0), in(c, 1), params<IntParams>(c).v[0], out(c));
}

}  // namespace

void register_loss(Registry& r) {
  r.add(with_signature({.name = "cross_entropy", .decode = decode_loss, .run = run_cross_entropy}));
  r.add(with_signature({.name = "cross_entropy_backward",
                        .decode = decode_loss,
                        .run = run_cross_entropy_backward}));
  r.add(with_signature({.name = "nll_loss", .decode = decode_loss, .run = run_nll_loss}));
  r.add(with_signature(
      {.name = "nll_loss_backward", .decode = decode_loss, .run = run_nll_loss_backward}));
  r.add(with_signature({.name = "smooth_l1_loss_backward",
                        .decode = decode_loss,
                        .run = run_smooth_l1_loss_backward}));
  r.add(with_signature({.name = "binary_cross_entropy_with_logits_backward",
                        .decode = decode_loss,
                        .run = run_bce_with_logits_backward}));
  r.add(with_signature({.name = "mse_loss", .decode = decode_loss, .run = run_mse_loss}));
  r.add(with_signature(
      {.name = "mse_loss_backward", .decode = decode_loss, .run = run_mse_loss_backward}));
  r.add(
      with_signature({.name = "smooth_l1_loss", .decode = decode_loss, .run = run_smooth_l1_loss}));
  r.add(with_signature({.name = "binary_cross_entropy_with_logits",
                        .decode = decode_loss,
                        .run = run_bce_with_logits}));
  r.add(with_signature(
      {.name = "softmax_backward", .decode = decode_dim, .run = run_softmax_backward}));
  r.add(with_signature(
      {.name = "log_softmax_backward", .decode = decode_dim, .run = run_log_softmax_backward}));
}

}  // namespace kiln::rt::ops
