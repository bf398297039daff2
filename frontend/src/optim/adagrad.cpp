#include "kiln/optim/adagrad.h"

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
    refuse_trace_if(o.lr_decay() != 0, "Adagrad::step",
                    "lr_decay uses a host-side step count the trace would freeze");
    for (auto& p : group.params()) {
      ParamState& st = state_of(p);
      if (!st.empty()) continue;
      st["step"] = int64_t{0};
      st["sum"] = full_like(p, o.initial_accumulator_value());
    }
  }
}

Tensor Adagrad::step(LossClosure closure) {
  Tensor loss = evaluate_closure(closure);
  autograd::NoGradGuard no_grad;
  init_state();  // groups added after construction
  for (auto& group : param_groups_) {
    const auto& o = group.options_as<AdagradOptions>();
    for (auto& p : group.params()) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      ParamState& st = state_of(p);
      const int64_t step = std::get<int64_t>(st["step"]) + 1;
      st["step"] = step;
      if (o.maximize()) grad = neg(grad);
      if (o.weight_decay() != 0) grad = add(grad, p, o.weight_decay());
      const double clr = o.lr() / (1.0 + static_cast<double>(step - 1) * o.lr_decay());
      Tensor sum = std::get<Tensor>(st["sum"]);
      add_(sum, mul(grad, grad));
      Tensor std_ = sqrt(sum);
      add_(std_, o.eps());
      add_(p, div(grad, std_), -clr);
    }
  }
  return loss;
}

}  // namespace kiln::optim
