#pragma once
// Loss functions (PyTorch semantics and names) with reduction none / mean / sum, each with its
// backward (gradient with respect to the input; the target is treated as a constant).
//
// DTypes: input float32 / float64 (float16 / bfloat16 computed in float32); class targets of any
// integer dtype; regression targets the input's dtype. Sums are accumulated in double.
// Output: reduction None -> the per-element shape; Mean / Sum -> a 0-dim tensor (any 1-element
// tensor is accepted). grad_output has the output's shape.

#include <cstdint>
#include <span>

#include "kiln/runtime/tensor.h"

namespace kiln::kernels {

enum class LossReduction : uint8_t { None, Mean, Sum };

// ---- cross_entropy from logits with class indices --------------------------------------------
// input [N, C], [N, C, d1, ...] or [C]; target [N], [N, d1, ...] or [] (class indices).
// loss_i = (1-ε)·(-w[t_i]·logp_i[t_i]) + ε/C·(-Σ_c w[c]·logp_i[c]), computed through a stable
// log-softmax; samples whose target is ignore_index contribute 0. Mean divides by Σ w[t_i] over
// the non-ignored samples (NaN when there are none, as PyTorch).
struct CrossEntropyOptions {
  const TensorImpl* weight = nullptr;  // [C] class weights, optional
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;  // in [0, 1]
  LossReduction reduction = LossReduction::Mean;
};
Dims cross_entropy_output_shape(std::span<const int64_t> input, std::span<const int64_t> target,
                                LossReduction reduction);
void cross_entropy_out(const TensorImpl& input, const TensorImpl& target,
                       const CrossEntropyOptions& opt, TensorImpl& out);
void cross_entropy_backward_out(const TensorImpl& grad_output, const TensorImpl& input,
                                const TensorImpl& target, const CrossEntropyOptions& opt,
                                TensorImpl& grad_input);

// ---- nll_loss: input holds log-probabilities, same shapes as cross_entropy ---------------------
// (label_smoothing is ignored.)
void nll_loss_out(const TensorImpl& input, const TensorImpl& target, const CrossEntropyOptions& opt,
                  TensorImpl& out);
void nll_loss_backward_out(const TensorImpl& grad_output, const TensorImpl& input,
                           const TensorImpl& target, const CrossEntropyOptions& opt,
                           TensorImpl& grad_input);

// ---- elementwise losses: input and target of the same shape ------------------------------------
Dims pointwise_loss_output_shape(std::span<const int64_t> input, LossReduction reduction);

// (x - y)²
void mse_loss_out(const TensorImpl& input, const TensorImpl& target, LossReduction reduction,
                  TensorImpl& out);
void mse_loss_backward_out(const TensorImpl& grad_output, const TensorImpl& input,
                           const TensorImpl& target, LossReduction reduction,
                           TensorImpl& grad_input);

// 0.5·d²/β if |d| < β else |d| - 0.5·β  (β == 0: |d|), d = x - y; β >= 0.
void smooth_l1_loss_out(const TensorImpl& input, const TensorImpl& target, LossReduction reduction,
                        double beta, TensorImpl& out);
void smooth_l1_loss_backward_out(const TensorImpl& grad_output, const TensorImpl& input,
                                 const TensorImpl& target, LossReduction reduction, double beta,
                                 TensorImpl& grad_input);

// w·[(1-y)·x + (1 + (pw-1)·y)·log(1 + e^{-x})], computed stably; weight broadcasts to the input,
// pos_weight broadcasts to the input (typically [C] over the last dim). Either may be null.
void binary_cross_entropy_with_logits_out(const TensorImpl& input, const TensorImpl& target,
                                          const TensorImpl* weight, const TensorImpl* pos_weight,
                                          LossReduction reduction, TensorImpl& out);
void binary_cross_entropy_with_logits_backward_out(const TensorImpl& grad_output,
                                                   const TensorImpl& input,
                                                   const TensorImpl& target,
                                                   const TensorImpl* weight,
                                                   const TensorImpl* pos_weight,
                                                   LossReduction reduction, TensorImpl& grad_input);

}  // namespace kiln::kernels
