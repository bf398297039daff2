#include "kiln/nn/normalization.h"

#include <sstream>

#include "kiln/autograd.h"
#include "kiln/nn/init.h"
#include "kiln/nn_ops.h"
#include "kiln/ops.h"

namespace kiln::nn {

BatchNormBase::BatchNormBase(const char* type, int64_t c, double eps_, std::optional<double> mom,
                             bool affine_, bool track)
    : Module(type),
      num_features(c),
      eps(eps_),
      momentum(mom),
      affine(affine_),
      track_running_stats(track),
      weight(register_parameter("weight", affine_ ? kiln::empty({c}) : Tensor())),
      bias(register_parameter("bias", affine_ ? kiln::empty({c}) : Tensor())),
      running_mean(register_buffer("running_mean", track ? kiln::zeros({c}) : Tensor())),
      running_var(register_buffer("running_var", track ? kiln::ones({c}) : Tensor())),
      num_batches_tracked(
          register_buffer("num_batches_tracked",
                          track ? kiln::zeros(Dims{}, TensorOptions(DType::Int64)) : Tensor())) {
  KILN_CHECK(c > 0, type, "expected num_features > 0, got ", c);
  reset_parameters();
}

void BatchNormBase::reset_running_stats() {
  if (!track_running_stats) return;
  init::zeros_(running_mean);
  init::ones_(running_var);
  init::zeros_(num_batches_tracked);
}

void BatchNormBase::reset_parameters() {
  reset_running_stats();
  if (affine) {
    init::ones_(weight);
    init::zeros_(bias);
  }
}

Tensor BatchNormBase::forward(const Tensor& input) {
  check_input_dim(input);
  KILN_CHECK(input.size(1) == num_features, type_name(), "expected ", num_features,
             " channels (dim 1), got input ", input.sizes());
  double factor = momentum.value_or(0.0);
  if (is_training() && track_running_stats) {
    autograd::NoGradGuard no_grad;
    // A tensor op (not a read-back), so a traced training step counts its batches too.
    add_(num_batches_tracked, ones_like(num_batches_tracked));
    if (!momentum) factor = 1.0 / num_batches_tracked.item<double>();
  }
  const bool use_batch_stats = is_training() || !running_mean.defined();
  // Running statistics are updated only when training with tracking on.
  const bool update = is_training() && track_running_stats;
  return kiln::batch_norm(input, update || !is_training() ? running_mean : Tensor(),
                          update || !is_training() ? running_var : Tensor(), weight, bias,
                          use_batch_stats, factor, eps);
}

std::string BatchNormBase::extra_repr() const {
  std::ostringstream os;
  os << num_features << ", eps=" << eps << ", momentum=";
  if (momentum)
    os << *momentum;
  else
    os << "None";
  os << ", affine=" << (affine ? "True" : "False")
     << ", track_running_stats=" << (track_running_stats ? "True" : "False");
  return os.str();
}

void BatchNorm1d::check_input_dim(const Tensor& input) const {
  KILN_CHECK(input.dim() == 2 || input.dim() == 3, "BatchNorm1d",
             "expected 2D or 3D input (N, C) / (N, C, L), got ", input.sizes());
}

void BatchNorm2d::check_input_dim(const Tensor& input) const {
  KILN_CHECK(input.dim() == 4, "BatchNorm2d", "expected 4D input (N, C, H, W), got ",
             input.sizes());
}

LayerNorm::LayerNorm(Dims shape, double eps_, bool affine, bool with_bias)
    : Module("LayerNorm"),
      normalized_shape(shape),
      eps(eps_),
      elementwise_affine(affine),
      weight(register_parameter("weight", affine ? kiln::empty(shape) : Tensor())),
      bias(register_parameter("bias", affine && with_bias ? kiln::empty(shape) : Tensor())) {
  reset_parameters();
}

void LayerNorm::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor LayerNorm::forward(const Tensor& input) {
  return kiln::layer_norm(input, normalized_shape, weight, bias, eps);
}

std::string LayerNorm::extra_repr() const {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < normalized_shape.size(); ++i) os << normalized_shape[i] << ",";
  os << "), eps=" << eps << ", elementwise_affine=" << (elementwise_affine ? "True" : "False");
  return os.str();
}

GroupNorm::GroupNorm(int64_t groups, int64_t channels, double eps_, bool affine_)
    : Module("GroupNorm"),
      num_groups(groups),
      num_channels(channels),
      eps(eps_),
      affine(affine_),
      weight(register_parameter("weight", affine_ ? kiln::empty({channels}) : Tensor())),
      bias(register_parameter("bias", affine_ ? kiln::empty({channels}) : Tensor())) {
  KILN_CHECK(groups > 0 && channels % groups == 0, "GroupNorm",
             "num_channels must be divisible by num_groups, got num_groups=", groups,
             " num_channels=", channels);
  reset_parameters();
}

void GroupNorm::reset_parameters() {
  if (affine) {
    init::ones_(weight);
    init::zeros_(bias);
  }
}

Tensor GroupNorm::forward(const Tensor& input) {
  return kiln::group_norm(input, num_groups, weight, bias, eps);
}

std::string GroupNorm::extra_repr() const {
  std::ostringstream os;
  os << num_groups << ", " << num_channels << ", eps=" << eps
     << ", affine=" << (affine ? "True" : "False");
  return os.str();
}

}  // namespace kiln::nn
