#pragma once
// Adagrad, as torch.optim.Adagrad (PyTorch 1.13):
//   g = grad (negated when maximize);  t += 1;  g += weight_decay * p
//   clr = lr / (1 + (t - 1) * lr_decay)
//   s += g²  (s starts at initial_accumulator_value)
//   p -= clr * g / (sqrt(s) + eps)

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

class AdagradOptions : public OptimizerOptions {
 public:
  explicit AdagradOptions(double lr = 1e-2) : lr_(lr) {}
  KILN_ARG(double, lr);
  KILN_ARG(double, lr_decay) = 0;
  KILN_ARG(double, weight_decay) = 0;
  KILN_ARG(double, initial_accumulator_value) = 0;
  KILN_ARG(double, eps) = 1e-10;
  KILN_ARG(bool, maximize) = false;

 public:
  std::unique_ptr<OptimizerOptions> clone() const override {
    return std::make_unique<AdagradOptions>(*this);
  }
  double get_lr() const override { return lr_; }
  void set_lr(double lr) override { lr_ = lr; }
  OptionsMap to_map() const override;
  void from_map(const OptionsMap& map) override;
  void validate() const override;
};

// State per parameter: "step" (int) and "sum". As in PyTorch the state is created when the
// optimizer is constructed (or a group added), so "sum" starts at initial_accumulator_value.
class Adagrad : public Optimizer {
 public:
  Adagrad(std::vector<Tensor> params, const AdagradOptions& defaults = AdagradOptions())
      : Adagrad(std::vector<ParamGroup>{ParamGroup(std::move(params))}, defaults) {}
  Adagrad(std::vector<ParamGroup> param_groups, const AdagradOptions& defaults = AdagradOptions());
  Tensor step(LossClosure closure = nullptr) override;

 private:
  void init_state();
};

}  // namespace kiln::optim
