#include "kiln/nn/loss.h"

namespace kiln::nn {

TensorList Loss::forward_list(const TensorList& inputs) {
  KILN_CHECK(inputs.size() == 2, type_name(), "expected (input, target), got ", inputs.size(),
             " inputs");
  return {forward(inputs[0], inputs[1])};
}

CrossEntropyLoss::CrossEntropyLoss(const Tensor& w, int64_t ignore, Reduction r, double smoothing)
    : Loss("CrossEntropyLoss", r),
      weight(register_buffer("weight", w)),
      ignore_index(ignore),
      label_smoothing(smoothing) {
  KILN_CHECK(smoothing >= 0.0 && smoothing <= 1.0, "CrossEntropyLoss",
             "label_smoothing must be in [0, 1], got ", smoothing);
}

Tensor CrossEntropyLoss::forward(const Tensor& input, const Tensor& target) {
  return kiln::cross_entropy(input, target, weight, ignore_index, reduction, label_smoothing);
}

NLLLoss::NLLLoss(const Tensor& w, int64_t ignore, Reduction r)
    : Loss("NLLLoss", r), weight(register_buffer("weight", w)), ignore_index(ignore) {}

Tensor NLLLoss::forward(const Tensor& input, const Tensor& target) {
  return kiln::nll_loss(input, target, weight, ignore_index, reduction);
}

Tensor MSELoss::forward(const Tensor& input, const Tensor& target) {
  return kiln::mse_loss(input, target, reduction);
}

BCEWithLogitsLoss::BCEWithLogitsLoss(const Tensor& w, Reduction r, const Tensor& pw)
    : Loss("BCEWithLogitsLoss", r),
      weight(register_buffer("weight", w)),
      pos_weight(register_buffer("pos_weight", pw)) {}

Tensor BCEWithLogitsLoss::forward(const Tensor& input, const Tensor& target) {
  return kiln::binary_cross_entropy_with_logits(input, target, weight, pos_weight, reduction);
}

Tensor SmoothL1Loss::forward(const Tensor& input, const Tensor& target) {
  return kiln::smooth_l1_loss(input, target, reduction, beta);
}

}  // namespace kiln::nn
