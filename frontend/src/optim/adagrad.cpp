#include "kiln/optim/adagrad.h"

#include "hyper.h"
#include "kiln/autograd.h"
#include "kiln/ops.h"

namespace kiln::optim {

OptionsMap AdagradOptions::to_map() const {
  return {{"lr", lr_},
          {"lr_decay", lr_decay_},
          {"weight_decay", weight_decay_},
          {"initial_accumulator_value", initial_accumulator_value_},
          {"eps", eps_},
          {"maximize", maximize_}};
}

void AdagradOptions::from_map(const OptionsMap& m) {
  const char* op = "AdagradOptions";
  if (m.count("lr")) lr_ = get_double(m, "lr", op);
  if (m.count("lr_decay")) lr_decay_ = get_double(m, "lr_decay", op);
  if (m.count("weight_decay")) weight_decay_ = get_double(m, "weight_decay", op);
  if (m.count("initial_accumulator_value"))
    initial_accumulator_value_ = get_double(m, "initial_accumulator_value", op);
  if (m.count("eps")) eps_ = get_double(m, "eps", op);
  if (m.count("maximize")) maximize_ = get_bool(m, "maximize", op);
}

void AdagradOptions::validate() const {
  KILN_CHECK(lr_ >= 0, "Adagrad", "expected lr >= 0, got ", lr_);
  KILN_CHECK(lr_decay_ >= 0, "Adagrad", "expected lr_decay >= 0, got ", lr_decay_);
  KILN_CHECK(weight_decay_ >= 0, "Adagrad", "expected weight_decay >= 0, got ", weight_decay_);
  KILN_CHECK(initial_accumulator_value_ >= 0, "Adagrad",
             "expected initial_accumulator_value >= 0, got ", initial_accumulator_value_);
  KILN_CHECK(eps_ >= 0, "Adagrad", "expected eps >= 0, got ", eps_);
}

Adagrad::Adagrad(std::vector<ParamGroup> param_groups, const AdagradOptions& defaults)
    : Optimizer(std::move(param_groups), defaults.clone()) {
  init_state();
}

void Adagrad::init_state() {
  autograd::NoGradGuard no_grad;
  for (auto& group : param_groups_) {
    const auto& o = group.options_as<AdagradOptions>();
    for (auto& p : group.params()) {
      ParamState& st = state_of(p);
      if (!st.empty()) continue;
      st["step"] = int64_t{0};
      st["sum"] = full_like(p, o.initial_accumulator_value());
    }
  }
}

Tensor Adagrad::step(LossClosure closure) {
  using namespace detail;
  Tensor loss = evaluate_closure(closure);
  autograd::NoGradGuard no_grad;
  init_state();  // groups added after construction
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    auto& group = param_groups_[g];
    const auto& o = group.options_as<AdagradOptions>();
    const std::string name = "Adagrad.group" + std::to_string(g) + ".";
    auto option = [&](double (*field)(const AdagradOptions&)) {
      return option_reader<AdagradOptions>(this, g, field);
    };
    // The form of the update: a trace checks these at every call.
    guard_host(this, name + "maximize",
               option([](const AdagradOptions& x) { return 1.0 * x.maximize(); }));
    guard_host(this, name + "weight_decay != 0",
               option([](const AdagradOptions& x) { return 1.0 * (x.weight_decay() != 0); }));
    const Hyper lr =
        hyper(this, name + "lr", option([](const AdagradOptions& x) { return x.lr(); }));
    const Hyper lr_decay = hyper(this, name + "lr_decay",
                                 option([](const AdagradOptions& x) { return x.lr_decay(); }));
    const Hyper eps =
        hyper(this, name + "eps", option([](const AdagradOptions& x) { return x.eps(); }));
    Hyper weight_decay;
    if (o.weight_decay() != 0)
      weight_decay = hyper(this, name + "weight_decay",
                           option([](const AdagradOptions& x) { return x.weight_decay(); }));
    for (auto& p : group.params()) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      ParamState& st = state_of(p);
      const Hyper step = advance_step(st, "step");
      if (o.maximize()) grad = neg(grad);
      if (o.weight_decay() != 0) grad = plus_scaled(grad, p, weight_decay);
      const Hyper clr = lr / (constant(1.0) + (step - constant(1.0)) * lr_decay);
      Tensor sum = std::get<Tensor>(st["sum"]);
      add_(sum, mul(grad, grad));
      Tensor std_ = sqrt(sum);
      shift_(std_, eps);
      axpy_(p, div(grad, std_), -clr);
    }
  }
  return loss;
}

}  // namespace kiln::optim
