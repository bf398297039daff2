#pragma once
// BatchNorm1d/2d (running_mean, running_var, num_batches_tracked buffers), LayerNorm, GroupNorm.

#include <optional>

#include "kiln/nn/module.h"

namespace kiln::nn {

// Shared by BatchNorm1d and BatchNorm2d. Training: normalizes with batch statistics and updates
// the running ones (momentum; std::nullopt = cumulative average over num_batches_tracked).
// Eval (with running stats tracked): normalizes with the running statistics.
class BatchNormBase : public Module {
 public:
  BatchNormBase(const char* type, int64_t num_features, double eps, std::optional<double> momentum,
                bool affine, bool track_running_stats);
  Tensor forward(const Tensor& input) override;
  void reset_running_stats();
  void reset_parameters();
  std::string extra_repr() const override;

  int64_t num_features;
  double eps;
  std::optional<double> momentum;
  bool affine, track_running_stats;
  Tensor& weight;               // [C] ones (undefined without affine)
  Tensor& bias;                 // [C] zeros
  Tensor& running_mean;         // [C] zeros (undefined without track_running_stats)
  Tensor& running_var;          // [C] ones
  Tensor& num_batches_tracked;  // int64 scalar

 protected:
  virtual void check_input_dim(const Tensor& input) const = 0;
  // num_batches_tracked: checkpoints from before PyTorch 0.4.1 (and converters that drop it) lack
  // it; PyTorch's BatchNorm keeps its current value then.
  bool omittable_state(const std::string& name) const override {
    return name == "num_batches_tracked";
  }
};

// (N, C) or (N, C, L).
class BatchNorm1d : public BatchNormBase {
 public:
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5,
                       std::optional<double> momentum = 0.1, bool affine = true,
                       bool track_running_stats = true)
      : BatchNormBase("BatchNorm1d", num_features, eps, momentum, affine, track_running_stats) {}

 protected:
  void check_input_dim(const Tensor& input) const override;
};

// (N, C, H, W).
class BatchNorm2d : public BatchNormBase {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5,
                       std::optional<double> momentum = 0.1, bool affine = true,
                       bool track_running_stats = true)
      : BatchNormBase("BatchNorm2d", num_features, eps, momentum, affine, track_running_stats) {}

 protected:
  void check_input_dim(const Tensor& input) const override;
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(Dims normalized_shape, double eps = 1e-5, bool elementwise_affine = true,
                     bool bias = true);
  explicit LayerNorm(int64_t normalized_size, double eps = 1e-5, bool elementwise_affine = true,
                     bool bias = true)
      : LayerNorm(Dims{normalized_size}, eps, elementwise_affine, bias) {}
  Tensor forward(const Tensor& input) override;
  void reset_parameters();
  std::string extra_repr() const override;

  Dims normalized_shape;
  double eps;
  bool elementwise_affine;
  Tensor& weight;  // ones(normalized_shape)
  Tensor& bias;    // zeros(normalized_shape)
};

class GroupNorm : public Module {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true);
  Tensor forward(const Tensor& input) override;
  void reset_parameters();
  std::string extra_repr() const override;

  int64_t num_groups, num_channels;
  double eps;
  bool affine;
  Tensor& weight;  // [C] ones
  Tensor& bias;    // [C] zeros
};

}  // namespace kiln::nn
