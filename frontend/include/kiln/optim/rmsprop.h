#pragma once
// RMSprop, as torch.optim.RMSprop (PyTorch 1.13):
//   g = grad (negated when maximize);  g += weight_decay * p
//   v = alpha * v + (1 - alpha) * g²
//   centered: ga = alpha * ga + (1 - alpha) * g;  avg = sqrt(v - ga²) + eps
//   else:     avg = sqrt(v) + eps
//   momentum > 0: b = momentum * b + g / avg;  p -= lr * b
//   else:         p -= lr * g / avg

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

class RMSpropOptions : public OptimizerOptions {
 public:
  explicit RMSpropOptions(double lr = 1e-2) : lr_(lr) {}
  KILN_ARG(double, lr);
  KILN_ARG(double, alpha) = 0.99;
  KILN_ARG(double, eps) = 1e-8;
  KILN_ARG(double, weight_decay) = 0;
  KILN_ARG(double, momentum) = 0;
  KILN_ARG(bool, centered) = false;
  KILN_ARG(bool, maximize) = false;

 public:
  std::unique_ptr<OptimizerOptions> clone() const override {
    return std::make_unique<RMSpropOptions>(*this);
  }
  double get_lr() const override { return lr_; }
  void set_lr(double lr) override { lr_ = lr; }
  bool has_momentum() const override { return true; }
  double get_momentum() const override { return momentum_; }
  void set_momentum(double m) override { momentum_ = m; }
  OptionsMap to_map() const override;
  void from_map(const OptionsMap& map) override;
  void validate() const override;
};

// State per parameter: "step" (int), "square_avg", "momentum_buffer" (momentum > 0), "grad_avg"
// (centered).
class RMSprop : public Optimizer {
 public:
  RMSprop(std::vector<Tensor> params, const RMSpropOptions& defaults = RMSpropOptions())
      : RMSprop(std::vector<ParamGroup>{ParamGroup(std::move(params))}, defaults) {}
  RMSprop(std::vector<ParamGroup> param_groups, const RMSpropOptions& defaults = RMSpropOptions())
      : Optimizer(std::move(param_groups), defaults.clone()) {}
  Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace kiln::optim
