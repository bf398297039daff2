#include "kiln/optim/sgd.h"

#include "kiln/autograd.h"
#include "kiln/ops.h"

namespace kiln::optim {

OptionsMap SGDOptions::to_map() const {
  return {{"lr", lr_},
          {"momentum", momentum_},
          {"dampening", dampening_},
          {"weight_decay", weight_decay_},
          {"nesterov", nesterov_},
          {"maximize", maximize_}};
}

void SGDOptions::from_map(const OptionsMap& m) {
  const char* op = "SGDOptions";
  if (m.count("lr")) lr_ = get_double(m, "lr", op);
  if (m.count("momentum")) momentum_ = get_double(m, "momentum", op);
  if (m.count("dampening")) dampening_ = get_double(m, "dampening", op);
  if (m.count("weight_decay")) weight_decay_ = get_double(m, "weight_decay", op);
  if (m.count("nesterov")) nesterov_ = get_bool(m, "nesterov", op);
  if (m.count("maximize")) maximize_ = get_bool(m, "maximize", op);
}

void SGDOptions::validate() const {
  KILN_CHECK(lr_ >= 0, "SGD", "expected lr >= 0, got ", lr_);
  KILN_CHECK(momentum_ >= 0, "SGD", "expected momentum >= 0, got ", momentum_);
  KILN_CHECK(weight_decay_ >= 0, "SGD", "expected weight_decay >= 0, got ", weight_decay_);
  KILN_CHECK(!nesterov_ || (momentum_ > 0 && dampening_ == 0), "SGD",
             "Nesterov momentum requires a momentum and zero dampening, got momentum ", momentum_,
             " and dampening ", dampening_);
}

Tensor SGD::step(LossClosure closure) {
  Tensor loss = evaluate_closure(closure);
  autograd::NoGradGuard no_grad;
  for (auto& group : param_groups_) {
    const auto& o = group.options_as<SGDOptions>();
    for (auto& p : group.params()) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      Tensor d_p = o.maximize() ? neg(grad) : grad;
      if (o.weight_decay() != 0) d_p = add(d_p, p, o.weight_decay());
      if (o.momentum() != 0) {
        ParamState& st = state_of(p);
        auto it = st.find("momentum_buffer");
        Tensor buf;
        if (it == st.end()) {
          refuse_trace_if(
              true, "SGD::step",
              "optimizer state is created on the first step; run one eager step before tracing");
          buf = d_p.detach().clone();
          st.emplace("momentum_buffer", buf);
        } else {
          buf = std::get<Tensor>(it->second);
          mul_(buf, o.momentum());
          add_(buf, d_p, 1.0 - o.dampening());
        }
        d_p = o.nesterov() ? add(d_p, buf, o.momentum()) : buf;
      }
      add_(p, d_p, -o.lr());
    }
  }
  return loss;
}

}  // namespace kiln::optim
