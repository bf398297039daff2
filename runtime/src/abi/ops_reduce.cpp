// kiln_abi_* wrappers for reductions, softmax and losses.

#include <climits>

#include "decode.h"
#include "kiln/runtime/kernels/loss.h"
#include "kiln/runtime/kernels/reduce.h"

using namespace kiln;
using namespace kiln::kernels;

namespace {
// A reduction over dims (empty = all), as the kiln ops carry it.
template <typename Fn>
void reduce(abi::Args& a, Fn fn) {
  auto dims = a.arr();
  const bool keepdim = a.b();
  fn(a.t(0), dims, keepdim, a.t(1));
}

std::optional<int64_t> flat_or_dim(int64_t d) {
  return d == INT64_MIN ? std::nullopt : std::optional<int64_t>(d);
}

CrossEntropyOptions ce_options(abi::Args& a, bool smoothing) {
  CrossEntropyOptions o;
  o.ignore_index = a.i();
  o.reduction = static_cast<LossReduction>(a.i());
  if (smoothing) o.label_smoothing = a.f();
  return o;
}
}  // namespace

KILN_ABI_OP(sum, reduce(a, sum_out))
KILN_ABI_OP(mean, reduce(a, mean_out))
KILN_ABI_OP(prod, reduce(a, prod_out))
KILN_ABI_OP(amax, reduce(a, amax_out))
KILN_ABI_OP(amin, reduce(a, amin_out))
KILN_ABI_OP(logsumexp, reduce(a, logsumexp_out))
KILN_ABI_OP(max, {
  const int64_t dim = a.i();
  max_out(a.t(0), dim, a.b(), a.t(1), a.t(2));
})
KILN_ABI_OP(min, {
  const int64_t dim = a.i();
  min_out(a.t(0), dim, a.b(), a.t(1), a.t(2));
})
KILN_ABI_OP(argmax, {
  const int64_t dim = a.i();
  argmax_out(a.t(0), flat_or_dim(dim), a.b(), a.t(1));
})
KILN_ABI_OP(argmin, {
  const int64_t dim = a.i();
  argmin_out(a.t(0), flat_or_dim(dim), a.b(), a.t(1));
})
KILN_ABI_OP(var, {
  auto dims = a.arr();
  const bool unbiased = a.b();
  const bool keepdim = a.b();
  var_out(a.t(0), dims, unbiased ? 1.0 : 0.0, keepdim, a.t(1));
})
KILN_ABI_OP(norm, {
  const double p = a.f();
  auto dims = a.arr();
  norm_out(a.t(0), p, dims, a.b(), a.t(1));
})
KILN_ABI_OP(softmax, softmax_out(a.t(0), a.i(), a.t(1)))
KILN_ABI_OP(log_softmax, log_softmax_out(a.t(0), a.i(), a.t(1)))
KILN_ABI_OP(softmax_backward, softmax_backward_out(a.t(0), a.t(1), a.i(), a.t(2)))
KILN_ABI_OP(log_softmax_backward, log_softmax_backward_out(a.t(0), a.t(1), a.i(), a.t(2)))
KILN_ABI_OP(cumsum, cumsum_out(a.t(0), a.i(), a.t(1)))

// Tensors: input, target, weight? (class weights), out.
KILN_ABI_OP(cross_entropy, {
  CrossEntropyOptions o = ce_options(a, true);
  o.weight = a.opt(2);
  cross_entropy_out(a.t(0), a.t(1), o, a.t(3));
})
KILN_ABI_OP(cross_entropy_backward, {
  CrossEntropyOptions o = ce_options(a, true);
  o.weight = a.opt(3);
  cross_entropy_backward_out(a.t(0), a.t(1), a.t(2), o, a.t(4));
})
KILN_ABI_OP(nll_loss, {
  CrossEntropyOptions o = ce_options(a, false);
  o.weight = a.opt(2);
  nll_loss_out(a.t(0), a.t(1), o, a.t(3));
})
// Tensors: grad, input, target, weight?, grad_input.
KILN_ABI_OP(nll_loss_backward, {
  CrossEntropyOptions o = ce_options(a, false);
  o.weight = a.opt(3);
  nll_loss_backward_out(a.t(0), a.t(1), a.t(2), o, a.t(4));
})
KILN_ABI_OP(smooth_l1_loss_backward, {
  const auto r = static_cast<LossReduction>(a.i());
  smooth_l1_loss_backward_out(a.t(0), a.t(1), a.t(2), r, a.f(), a.t(3));
})
// Tensors: grad, input, target, weight?, pos_weight?, grad_input.
KILN_ABI_OP(binary_cross_entropy_with_logits_backward,
            binary_cross_entropy_with_logits_backward_out(a.t(0), a.t(1), a.t(2), a.opt(3),
                                                          a.opt(4),
                                                          static_cast<LossReduction>(a.i()),
                                                          a.t(5)))
KILN_ABI_OP(mse_loss, mse_loss_out(a.t(0), a.t(1), static_cast<LossReduction>(a.i()), a.t(2)))
KILN_ABI_OP(mse_loss_backward, mse_loss_backward_out(a.t(0), a.t(1), a.t(2),
                                                     static_cast<LossReduction>(a.i()), a.t(3)))
KILN_ABI_OP(smooth_l1_loss, {
  const auto r = static_cast<LossReduction>(a.i());
  smooth_l1_loss_out(a.t(0), a.t(1), r, a.f(), a.t(2));
})
// Tensors: input, target, weight?, pos_weight?, out.
KILN_ABI_OP(binary_cross_entropy_with_logits,
            binary_cross_entropy_with_logits_out(a.t(0), a.t(1), a.opt(2), a.opt(3),
                                                 static_cast<LossReduction>(a.i()), a.t(4)))
