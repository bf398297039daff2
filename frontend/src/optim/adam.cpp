#include "kiln/optim/adam.h"

#include <cmath>

#include "hyper.h"
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
  using namespace detail;
  Tensor loss = evaluate_closure(closure);
  autograd::NoGradGuard no_grad;
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    auto& group = param_groups_[g];
    const auto& o = group.options_as<AdamOptions>();
    const std::string name = (decoupled ? "AdamW.group" : "Adam.group") + std::to_string(g) + ".";
    auto option = [&](double (*field)(const AdamOptions&)) {
      return option_reader<AdamOptions>(this, g, field);
    };
    // The form of the update: a trace checks these at every call.
    guard_host(this, name + "maximize",
               option([](const AdamOptions& x) { return 1.0 * x.maximize(); }));
    guard_host(this, name + "amsgrad",
               option([](const AdamOptions& x) { return 1.0 * x.amsgrad(); }));
    if (!decoupled)
      guard_host(this, name + "weight_decay != 0",
                 option([](const AdamOptions& x) { return 1.0 * (x.weight_decay() != 0); }));
    const Hyper lr = hyper(this, name + "lr", option([](const AdamOptions& x) { return x.lr(); }));
    const Hyper beta1 =
        hyper(this, name + "beta1", option([](const AdamOptions& x) { return x.betas().first; }));
    const Hyper beta2 =
        hyper(this, name + "beta2", option([](const AdamOptions& x) { return x.betas().second; }));
    const Hyper eps =
        hyper(this, name + "eps", option([](const AdamOptions& x) { return x.eps(); }));
    Hyper weight_decay;
    if (decoupled || o.weight_decay() != 0)
      weight_decay = hyper(this, name + "weight_decay",
                           option([](const AdamOptions& x) { return x.weight_decay(); }));
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
      const Hyper step = advance_step(st, "step");
      if (decoupled) {
        scale_(p, one_minus(lr * weight_decay));
      } else if (o.weight_decay() != 0) {
        grad = plus_scaled(grad, p, weight_decay);
      }
      Tensor exp_avg = std::get<Tensor>(st["exp_avg"]);
      Tensor exp_avg_sq = std::get<Tensor>(st["exp_avg_sq"]);
      scale_(exp_avg, beta1);
      axpy_(exp_avg, grad, one_minus(beta1));
      scale_(exp_avg_sq, beta2);
      axpy_(exp_avg_sq, mul(grad, grad), one_minus(beta2));

      const Hyper step_size = lr / one_minus(pow(beta1, step));
      const Hyper bias_correction2_sqrt = sqrt(one_minus(pow(beta2, step)));
      Tensor second = exp_avg_sq;
      if (o.amsgrad()) {
        auto it = st.find("max_exp_avg_sq");
        if (it == st.end()) it = st.emplace("max_exp_avg_sq", zeros_like(p)).first;
        Tensor& max_sq = std::get<Tensor>(it->second);
        copy_(max_sq, maximum(max_sq, exp_avg_sq));
        second = max_sq;
      }
      Tensor denom = divided(sqrt(second), bias_correction2_sqrt);
      shift_(denom, eps);
      axpy_(p, div(exp_avg, denom), -step_size);
    }
  }
  return loss;
}

}  // namespace kiln::optim
