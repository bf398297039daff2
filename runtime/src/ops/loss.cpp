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
  const int64_t r = a.i("reduction", 1);
  KILN_CHECK(r >= 0 && r <= 2, a.op(), "attribute 'reduction': expected 0..2, got ", r);
  p->ce.reduction = static_cast<LossReduction>(r);
  p->ce.ignore_index = a.i("ignore_index", -100);
  p->ce.label_smoothing = a.f("label_smoothing", 0.0);
  p->beta = a.f("beta", 1.0);
  return p;
}

void run_cross_entropy(const KernelCall& c) {
  kernels::cross_entropy_out(in(c, 0), in(c, 1), params<LossParams>(c).ce, out(c));
}
void run_cross_entropy_backward(const KernelCall& c) {
  kernels::cross_entropy_backward_out(in(c, 0), in(c, 1), in(c, 2), params<LossParams>(c).ce,
                                      out(c));
}
void run_nll_loss(const KernelCall& c) {
  kernels::nll_loss_out(in(c, 0), in(c, 1), params<LossParams>(c).ce, out(c));
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
  kernels::binary_cross_entropy_with_logits_out(in(c, 0), in(c, 1), nullptr, nullptr,
                                                params<LossParams>(c).ce.reduction, out(c));
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

constexpr AttrSpec kCe[] = {{"ignore_index", AttrType::Int, false},
                            {"reduction", AttrType::Int, false},
                            {"label_smoothing", AttrType::Float, false}};
constexpr AttrSpec kReduction[] = {{"reduction", AttrType::Int, false}};
constexpr AttrSpec kSmoothL1[] = {{"reduction", AttrType::Int, false},
                                  {"beta", AttrType::Float, false}};
constexpr AttrSpec kDim[] = {{"dim", AttrType::Int}};

}  // namespace

void register_loss(Registry& r) {
  r.add({"cross_entropy", 2, 2, 1, kCe, decode_loss, run_cross_entropy});
  r.add({"cross_entropy_backward", 3, 3, 1, kCe, decode_loss, run_cross_entropy_backward});
  r.add({"nll_loss", 2, 2, 1, kCe, decode_loss, run_nll_loss});
  r.add({"mse_loss", 2, 2, 1, kReduction, decode_loss, run_mse_loss});
  r.add({"mse_loss_backward", 3, 3, 1, kReduction, decode_loss, run_mse_loss_backward});
  r.add({"smooth_l1_loss", 2, 2, 1, kSmoothL1, decode_loss, run_smooth_l1_loss});
  r.add(
      {"binary_cross_entropy_with_logits", 2, 2, 1, kReduction, decode_loss, run_bce_with_logits});
  r.add({"softmax_backward", 2, 2, 1, kDim, decode_dim, run_softmax_backward});
  r.add({"log_softmax_backward", 2, 2, 1, kDim, decode_dim, run_log_softmax_backward});
}

}  // namespace kiln::rt::ops
