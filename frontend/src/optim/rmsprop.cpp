#include "kiln/optim/rmsprop.h"

#include "hyper.h"
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
  using namespace detail;
  Tensor loss = evaluate_closure(closure);
  autograd::NoGradGuard no_grad;
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    auto& group = param_groups_[g];
    const auto& o = group.options_as<RMSpropOptions>();
    const std::string name = "RMSprop.group" + std::to_string(g) + ".";
    auto option = [&](double (*field)(const RMSpropOptions&)) {
      return option_reader<RMSpropOptions>(this, g, field);
    };
    // The form of the update: a trace checks these at every call.
    guard_host(this, name + "maximize",
               option([](const RMSpropOptions& x) { return 1.0 * x.maximize(); }));
    guard_host(this, name + "centered",
               option([](const RMSpropOptions& x) { return 1.0 * x.centered(); }));
    guard_host(this, name + "momentum > 0",
               option([](const RMSpropOptions& x) { return 1.0 * (x.momentum() > 0); }));
    guard_host(this, name + "weight_decay != 0",
               option([](const RMSpropOptions& x) { return 1.0 * (x.weight_decay() != 0); }));
    const Hyper lr =
        hyper(this, name + "lr", option([](const RMSpropOptions& x) { return x.lr(); }));
    const Hyper alpha =
        hyper(this, name + "alpha", option([](const RMSpropOptions& x) { return x.alpha(); }));
    const Hyper eps =
        hyper(this, name + "eps", option([](const RMSpropOptions& x) { return x.eps(); }));
    Hyper momentum, weight_decay;
    if (o.momentum() > 0)
      momentum = hyper(this, name + "momentum",
                       option([](const RMSpropOptions& x) { return x.momentum(); }));
    if (o.weight_decay() != 0)
      weight_decay = hyper(this, name + "weight_decay",
                           option([](const RMSpropOptions& x) { return x.weight_decay(); }));
    for (auto& p : group.params()) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      if (o.maximize()) grad = neg(grad);
      ParamState& st = state_of(p);
      if (st.empty()) {
        st["step"] = int64_t{0};
        st["square_avg"] = zeros_like(p);
        if (o.momentum() > 0) st["momentum_buffer"] = zeros_like(p);
        if (o.centered()) st["grad_avg"] = zeros_like(p);
      }
      advance_step(st, "step");
      if (o.weight_decay() != 0) grad = plus_scaled(grad, p, weight_decay);
      Tensor square_avg = std::get<Tensor>(st["square_avg"]);
      scale_(square_avg, alpha);
      axpy_(square_avg, mul(grad, grad), one_minus(alpha));
      Tensor avg;
      if (o.centered()) {
        auto it = st.find("grad_avg");
        if (it == st.end()) it = st.emplace("grad_avg", zeros_like(p)).first;
        Tensor grad_avg = std::get<Tensor>(it->second);
        scale_(grad_avg, alpha);
        axpy_(grad_avg, grad, one_minus(alpha));
        avg = sqrt(sub(square_avg, mul(grad_avg, grad_avg)));
      } else {
        avg = sqrt(square_avg);
      }
      shift_(avg, eps);
      if (o.momentum() > 0) {
        auto it = st.find("momentum_buffer");
        if (it == st.end()) it = st.emplace("momentum_buffer", zeros_like(p)).first;
        Tensor buf = std::get<Tensor>(it->second);
        scale_(buf, momentum);
        add_(buf, div(grad, avg));
        axpy_(p, buf, -lr);
      } else {
        axpy_(p, div(grad, avg), -lr);
      }
    }
  }
  return loss;
}

}  // namespace kiln::optim
