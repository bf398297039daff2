#include "kiln/optim/rmsprop.h"

#include "kiln/autograd.h"
#include "kiln/ops.h"

namespace kiln::optim {

OptionsMap RMSpropOptions::to_map() const {
  return {{"lr", lr_},
          {"alpha", alpha_},
          {"eps", eps_},
          {"weight_decay", weight_decay_},
          {"momentum", momentum_},
          {"centered", centered_},
          {"maximize", maximize_}};
}

void RMSpropOptions::from_map(const OptionsMap& m) {
  const char* op = "RMSpropOptions";
  if (m.count("lr")) lr_ = get_double(m, "lr", op);
  if (m.count("alpha")) alpha_ = get_double(m, "alpha", op);
  if (m.count("eps")) eps_ = get_double(m, "eps", op);
  if (m.count("weight_decay")) weight_decay_ = get_double(m, "weight_decay", op);
  if (m.count("momentum")) momentum_ = get_double(m, "momentum", op);
  if (m.count("centered")) centered_ = get_bool(m, "centered", op);
  if (m.count("maximize")) maximize_ = get_bool(m, "maximize", op);
}

void RMSpropOptions::validate() const {
  KILN_CHECK(lr_ >= 0, "RMSprop", "expected lr >= 0, got ", lr_);
  KILN_CHECK(eps_ >= 0, "RMSprop", "expected eps >= 0, got ", eps_);
  KILN_CHECK(momentum_ >= 0, "RMSprop", "expected momentum >= 0, got ", momentum_);
  KILN_CHECK(weight_decay_ >= 0, "RMSprop", "expected weight_decay >= 0, got ", weight_decay_);
  KILN_CHECK(alpha_ >= 0, "RMSprop", "expected alpha >= 0, got ", alpha_);
}

Tensor RMSprop::step(LossClosure closure) {
  Tensor loss = evaluate_closure(closure);
  autograd::NoGradGuard no_grad;
  for (auto& group : param_groups_) {
    const auto& o = group.options_as<RMSpropOptions>();
    for (auto& p : group.params()) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      if (o.maximize()) grad = neg(grad);
      ParamState& st = state_of(p);
      if (st.empty()) {
        refuse_trace_if(
            true, "RMSprop::step",
            "optimizer state is created on the first step; run one eager step before tracing");
        st["step"] = int64_t{0};
        st["square_avg"] = zeros_like(p);
        if (o.momentum() > 0) st["momentum_buffer"] = zeros_like(p);
        if (o.centered()) st["grad_avg"] = zeros_like(p);
      }
      st["step"] = std::get<int64_t>(st["step"]) + 1;
      if (o.weight_decay() != 0) grad = add(grad, p, o.weight_decay());
      Tensor square_avg = std::get<Tensor>(st["square_avg"]);
      mul_(square_avg, o.alpha());
      add_(square_avg, mul(grad, grad), 1.0 - o.alpha());
      Tensor avg;
      if (o.centered()) {
        auto it = st.find("grad_avg");
        if (it == st.end()) it = st.emplace("grad_avg", zeros_like(p)).first;
        Tensor grad_avg = std::get<Tensor>(it->second);
        mul_(grad_avg, o.alpha());
        add_(grad_avg, grad, 1.0 - o.alpha());
        avg = sqrt(sub(square_avg, mul(grad_avg, grad_avg)));
      } else {
        avg = sqrt(square_avg);
      }
      add_(avg, o.eps());
      if (o.momentum() > 0) {
        auto it = st.find("momentum_buffer");
        if (it == st.end()) it = st.emplace("momentum_buffer", zeros_like(p)).first;
        Tensor buf = std::get<Tensor>(it->second);
        mul_(buf, o.momentum());
        add_(buf, div(grad, avg));
        add_(p, buf, -o.lr());
      } else {
        add_(p, div(grad, avg), -o.lr());
      }
    }
  }
  return loss;
}

}  // namespace kiln::optim
