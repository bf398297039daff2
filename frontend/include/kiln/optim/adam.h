#pragma once
// Adam and AdamW, as torch.optim.Adam / torch.optim.AdamW (PyTorch 1.13):
//   g = grad (negated when maximize); t += 1
//   Adam:  g += weight_decay * p            AdamW: p *= 1 - lr * weight_decay
//   m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g²
//   amsgrad: v_max = max(v_max, v), used in place of v below
//   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)

#include <utility>

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

using Betas = std::pair<double, double>;

// Options shared by Adam and AdamW (they differ only in the default weight decay and how it is
// applied).
class AdamOptions : public OptimizerOptions {
 public:
  explicit AdamOptions(double lr = 1e-3) : lr_(lr) {}
  KILN_ARG(double, lr);
  KILN_ARG(Betas, betas) = {0.9, 0.999};
  KILN_ARG(double, eps) = 1e-8;
  KILN_ARG(double, weight_decay) = 0;
  KILN_ARG(bool, amsgrad) = false;
  KILN_ARG(bool, maximize) = false;

 public:
  std::unique_ptr<OptimizerOptions> clone() const override {
    return std::make_unique<AdamOptions>(*this);
  }
  double get_lr() const override { return lr_; }
  void set_lr(double lr) override { lr_ = lr; }
  bool has_momentum() const override { return true; }
  double get_momentum() const override { return betas_.first; }
  void set_momentum(double m) override { betas_.first = m; }
  OptionsMap to_map() const override;
  void from_map(const OptionsMap& map) override;
  void validate() const override;
};

class AdamWOptions : public AdamOptions {
 public:
  explicit AdamWOptions(double lr = 1e-3) : AdamOptions(lr) { weight_decay(1e-2); }
  std::unique_ptr<OptimizerOptions> clone() const override {
    return std::make_unique<AdamWOptions>(*this);
  }
  // The setters return AdamOptions&; these keep chains of AdamWOptions typed.
  AdamWOptions& lr(const double& v) {
    AdamOptions::lr(v);
    return *this;
  }
  AdamWOptions& betas(const Betas& v) {
    AdamOptions::betas(v);
    return *this;
  }
  AdamWOptions& eps(const double& v) {
    AdamOptions::eps(v);
    return *this;
  }
  AdamWOptions& weight_decay(const double& v) {
    AdamOptions::weight_decay(v);
    return *this;
  }
  AdamWOptions& amsgrad(const bool& v) {
    AdamOptions::amsgrad(v);
    return *this;
  }
  AdamWOptions& maximize(const bool& v) {
    AdamOptions::maximize(v);
    return *this;
  }
  using AdamOptions::amsgrad;
  using AdamOptions::betas;
  using AdamOptions::eps;
  using AdamOptions::lr;
  using AdamOptions::maximize;
  using AdamOptions::weight_decay;
};

// State per parameter: "step" (int), "exp_avg", "exp_avg_sq", and "max_exp_avg_sq" (amsgrad).
class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, const AdamOptions& defaults = AdamOptions())
      : Adam(std::vector<ParamGroup>{ParamGroup(std::move(params))}, defaults) {}
  Adam(std::vector<ParamGroup> param_groups, const AdamOptions& defaults = AdamOptions())
      : Optimizer(std::move(param_groups), defaults.clone()) {}
  Tensor step(LossClosure closure = nullptr) override;

 protected:
  Adam(std::vector<ParamGroup> param_groups, std::unique_ptr<OptimizerOptions> defaults)
      : Optimizer(std::move(param_groups), std::move(defaults)) {}
  Tensor adam_step(const LossClosure& closure, bool decoupled_weight_decay);
};

// Adam with decoupled weight decay (Loshchilov & Hutter).
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, const AdamWOptions& defaults = AdamWOptions())
      : AdamW(std::vector<ParamGroup>{ParamGroup(std::move(params))}, defaults) {}
  AdamW(std::vector<ParamGroup> param_groups, const AdamWOptions& defaults = AdamWOptions())
      : Adam(std::move(param_groups), defaults.clone()) {}
  Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace kiln::optim
