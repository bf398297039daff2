#pragma once
// Stochastic gradient descent with momentum, as torch.optim.SGD (PyTorch 1.13):
//   g = grad (negated when maximize);  g += weight_decay * p
//   momentum != 0:  b = g (first step) | b = momentum * b + (1 - dampening) * g
//                   g = nesterov ? g + momentum * b : b
//   p -= lr * g

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

class SGDOptions : public OptimizerOptions {
 public:
  // lr is required, as in PyTorch.
  explicit SGDOptions(double lr) : lr_(lr) {}
  KILN_ARG(double, lr);
  KILN_ARG(double, momentum) = 0;
  KILN_ARG(double, dampening) = 0;
  KILN_ARG(double, weight_decay) = 0;
  KILN_ARG(bool, nesterov) = false;
  KILN_ARG(bool, maximize) = false;

 public:
  std::unique_ptr<OptimizerOptions> clone() const override {
    return std::make_unique<SGDOptions>(*this);
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

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, const SGDOptions& defaults)
      : SGD(std::vector<ParamGroup>{ParamGroup(std::move(params))}, defaults) {}
  SGD(std::vector<ParamGroup> param_groups, const SGDOptions& defaults)
      : Optimizer(std::move(param_groups), defaults.clone()) {}
  // State per parameter: "momentum_buffer" (when momentum != 0).
  Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace kiln::optim
