#include "kiln/optim/adam.h"

#include <cmath>

#include "kiln/autograd.h"
#include "kiln/ops.h"

namespace kiln::optim {

OptionsMap AdamOptions::to_map() const {
  return {{"lr", lr_},           {"betas", std::vector<double>{betas_.first, betas_.second}},
          {"eps", eps_},         {"weight_decay", weight_decay_},
          {"amsgrad", amsgrad_}, {"maximize", maximize_}};
}

void AdamOptions::from_map(const OptionsMap& m) {
  const char* op = "AdamOptions";
  if (m.count("lr")) lr_ = get_double(m, "lr", op);
  if (auto it = m.find("betas"); it != m.end()) {
    auto* b = std::get_if<std::vector<double>>(&it->second);
    KILN_CHECK(b && b->size() == 2, op, "expected 'betas' to be a list of 2 numbers");
    betas_ = {(*b)[0], (*b)[1]};
  }
  if (m.count("eps")) eps_ = get_double(m, "eps", op);
  if (m.count("weight_decay")) weight_decay_ = get_double(m, "weight_decay", op);
  if (m.count("amsgrad")) amsgrad_ = get_bool(m, "amsgrad", op);
  if (m.count("maximize")) maximize_ = get_bool(m, "maximize", op);
}

void AdamOptions::validate() const {
  KILN_CHECK(lr_ >= 0, "Adam", "expected lr >= 0, got ", lr_);
  KILN_CHECK(eps_ >= 0, "Adam", "expected eps >= 0, got ", eps_);
  KILN_CHECK(betas_.first >= 0 && betas_.first < 1, "Adam", "expected 0 <= betas[0] < 1, got ",
             betas_.first);
  KILN_CHECK(betas_.second >= 0 && betas_.second < 1, "Adam", "expected 0 <= betas[1] < 1, got ",
             betas_.second);
  KILN_CHECK(weight_decay_ >= 0, "Adam", "expected weight_decay >= 0, got ", weight_decay_);
}

Tensor Adam::step(LossClosure closure) {
  return adam_step(closure, false);
}
Tensor AdamW::step(LossClosure closure) {
  return adam_step(closure, true);
}

Tensor Adam::adam_step(const LossClosure& closure, bool decoupled) {
  refuse_trace_if(true, decoupled ? "AdamW::step" : "Adam::step",
                  "the bias correction uses a host-side step count the trace would freeze; "
                  "trace SGD or RMSprop steps");
  Tensor loss = evaluate_closure(closure);
  autograd::NoGradGuard no_grad;
  for (auto& group : param_groups_) {
    const auto& o = group.options_as<AdamOptions>();
    const double lr = o.lr(), beta1 = o.betas().first, beta2 = o.betas().second;
    for (auto& p : group.params()) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      if (o.maximize()) grad = neg(grad);
      ParamState& st = state_of(p);
      if (st.empty()) {
        st["step"] = int64_t{0};
        st["exp_avg"] = zeros_like(p);
        st["exp_avg_sq"] = zeros_like(p);
        if (o.amsgrad()) st["max_exp_avg_sq"] = zeros_like(p);
      }
      const int64_t step = std::get<int64_t>(st["step"]) + 1;
      st["step"] = step;
      if (decoupled) {
        mul_(p, 1.0 - lr * o.weight_decay());
      } else if (o.weight_decay() != 0) {
        grad = add(grad, p, o.weight_decay());
      }
      Tensor exp_avg = std::get<Tensor>(st["exp_avg"]);
      Tensor exp_avg_sq = std::get<Tensor>(st["exp_avg_sq"]);
      mul_(exp_avg, beta1);
      add_(exp_avg, grad, 1.0 - beta1);
      mul_(exp_avg_sq, beta2);
      add_(exp_avg_sq, mul(grad, grad), 1.0 - beta2);

      const double bias_correction1 = 1.0 - std::pow(beta1, static_cast<double>(step));
      const double bias_correction2 = 1.0 - std::pow(beta2, static_cast<double>(step));
      const double step_size = lr / bias_correction1;
      const double bias_correction2_sqrt = std::sqrt(bias_correction2);
      Tensor second = exp_avg_sq;
      if (o.amsgrad()) {
        auto it = st.find("max_exp_avg_sq");
        if (it == st.end()) it = st.emplace("max_exp_avg_sq", zeros_like(p)).first;
        Tensor& max_sq = std::get<Tensor>(it->second);
        copy_(max_sq, maximum(max_sq, exp_avg_sq));
        second = max_sq;
      }
      Tensor denom = div(sqrt(second), bias_correction2_sqrt);
      add_(denom, o.eps());
      add_(p, div(exp_avg, denom), -step_size);
    }
  }
  return loss;
}

}  // namespace kiln::optim
