#pragma once
// Normalization layers (PyTorch semantics and names): batch_norm, layer_norm, group_norm, forward
// and backward.
//
// DTypes: input / out / grads float32 or float64 (float16 / bfloat16 computed in float32).
// Parameters and statistics (weight, bias, running_mean/var, save_mean/invstd, mean/rstd) may be
// any floating dtype and any strides: they are small and converted on the way in and out.
// Statistics are accumulated in double.

#include <cstdint>
#include <span>

#include "kiln/runtime/tensor.h"

namespace kiln::kernels {

// ---- batch_norm: input [N, C, *] (rank >= 2), per-channel parameters [C] ------------------------
// training: normalizes with the batch statistics (biased variance), writes save_mean / save_invstd
//   (= 1/sqrt(var + eps)) when given, and updates running_mean / running_var when given:
//   running = (1 - momentum) * running + momentum * batch_stat, using the UNBIASED variance.
//   Needs more than one value per channel.
// inference: normalizes with running_mean / running_var (both required).
// weight / bias may be null (1 and 0).
void batch_norm_out(const TensorImpl& input, const TensorImpl* weight, const TensorImpl* bias,
                    TensorImpl* running_mean, TensorImpl* running_var, bool training,
                    double momentum, double eps, TensorImpl& out, TensorImpl* save_mean,
                    TensorImpl* save_invstd);

// training: uses save_mean / save_invstd (from the forward) — the full batch-statistics gradient.
// inference: uses running_mean / running_var (+ eps) — the statistics are constants.
// Any grad output may be null.
void batch_norm_backward_out(const TensorImpl& grad_output, const TensorImpl& input,
                             const TensorImpl* weight, const TensorImpl* running_mean,
                             const TensorImpl* running_var, const TensorImpl* save_mean,
                             const TensorImpl* save_invstd, bool training, double eps,
                             TensorImpl* grad_input, TensorImpl* grad_weight,
                             TensorImpl* grad_bias);

// The two ops a traced batch_norm training step records (kiln.batch_norm_backward and
// kiln.batch_norm_update_stats), shared by the runtime's executor, its C ABI and the interpreter.
// In training mode the backward recomputes the batch statistics from input with the forward
// kernel (per-call temporaries), so the forward's save_mean / save_invstd are not kept.
void batch_norm_backward_recompute_out(const TensorImpl& grad_output, const TensorImpl& input,
                                       const TensorImpl* weight, const TensorImpl* running_mean,
                                       const TensorImpl* running_var, bool training, double eps,
                                       TensorImpl* grad_input, TensorImpl* grad_weight,
                                       TensorImpl* grad_bias);
// new_mean / new_var = running_mean / running_var updated by input's batch statistics, as
// batch_norm_out does in place in training mode (the inputs are left unchanged).
void batch_norm_update_stats_out(const TensorImpl& input, const TensorImpl& running_mean,
                                 const TensorImpl& running_var, double momentum,
                                 TensorImpl& new_mean, TensorImpl& new_var);

// ---- layer_norm: normalizes over the trailing dims given by normalized_shape ------------------
// weight / bias have normalized_shape (or are null). mean / rstd (optional outputs) have
// layer_norm_stats_shape(): input's leading dims followed by 1s (any shape with that many
// elements is accepted).
Dims layer_norm_stats_shape(std::span<const int64_t> input,
                            std::span<const int64_t> normalized_shape);
void layer_norm_out(const TensorImpl& input, std::span<const int64_t> normalized_shape,
                    const TensorImpl* weight, const TensorImpl* bias, double eps, TensorImpl& out,
                    TensorImpl* mean, TensorImpl* rstd);
void layer_norm_backward_out(const TensorImpl& grad_output, const TensorImpl& input,
                             std::span<const int64_t> normalized_shape, const TensorImpl& mean,
                             const TensorImpl& rstd, const TensorImpl* weight,
                             TensorImpl* grad_input, TensorImpl* grad_weight,
                             TensorImpl* grad_bias);

// The ops a traced step records (kiln.layer_norm_backward): mean and rstd recomputed from input
// with the forward kernel (per-call temporaries), then layer_norm_backward_out.
void layer_norm_backward_recompute_out(const TensorImpl& grad_output, const TensorImpl& input,
                                       std::span<const int64_t> normalized_shape,
                                       const TensorImpl* weight, double eps, TensorImpl* grad_input,
                                       TensorImpl* grad_weight, TensorImpl* grad_bias);

// ---- group_norm: input [N, C, *], C divisible by num_groups; weight / bias [C] or null ----------
// mean / rstd (optional outputs) have N * num_groups elements ([N, G]).
void group_norm_out(const TensorImpl& input, int64_t num_groups, const TensorImpl* weight,
                    const TensorImpl* bias, double eps, TensorImpl& out, TensorImpl* mean,
                    TensorImpl* rstd);
void group_norm_backward_out(const TensorImpl& grad_output, const TensorImpl& input,
                             int64_t num_groups, const TensorImpl& mean, const TensorImpl& rstd,
                             const TensorImpl* weight, TensorImpl* grad_input,
                             TensorImpl* grad_weight, TensorImpl* grad_bias);
// kiln.group_norm_backward: as layer_norm_backward_recompute_out, for group_norm.
void group_norm_backward_recompute_out(const TensorImpl& grad_output, const TensorImpl& input,
                                       int64_t num_groups, const TensorImpl* weight, double eps,
                                       TensorImpl* grad_input, TensorImpl* grad_weight,
                                       TensorImpl* grad_bias);

}  // namespace kiln::kernels
