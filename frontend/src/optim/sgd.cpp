#include "kiln/optim/sgd.h"

#include "hyper.h"
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
  using namespace detail;
  Tensor loss = evaluate_closure(closure);
  autograd::NoGradGuard no_grad;
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    auto& group = param_groups_[g];
    const auto& o = group.options_as<SGDOptions>();
    const std::string name = "SGD.group" + std::to_string(g) + ".";
    auto option = [&](double (*field)(const SGDOptions&)) {
      return option_reader<SGDOptions>(this, g, field);
    };
    // The form of the update: a trace checks these at every call.
    guard_host(this, name + "maximize",
               option([](const SGDOptions& x) { return 1.0 * x.maximize(); }));
    guard_host(this, name + "nesterov",
               option([](const SGDOptions& x) { return 1.0 * x.nesterov(); }));
    guard_host(this, name + "momentum != 0",
               option([](const SGDOptions& x) { return 1.0 * (x.momentum() != 0); }));
    guard_host(this, name + "weight_decay != 0",
               option([](const SGDOptions& x) { return 1.0 * (x.weight_decay() != 0); }));
    const Hyper lr = hyper(this, name + "lr", option([](const SGDOptions& x) { return x.lr(); }));
    Hyper momentum, dampening, weight_decay;
    if (o.momentum() != 0) {
      momentum =
          hyper(this, name + "momentum", option([](const SGDOptions& x) { return x.momentum(); }));
      dampening = hyper(this, name + "dampening",
                        option([](const SGDOptions& x) { return x.dampening(); }));
    }
    if (o.weight_decay() != 0)
      weight_decay = hyper(this, name + "weight_decay",
                           option([](const SGDOptions& x) { return x.weight_decay(); }));
    for (auto& p : group.params()) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      Tensor d_p = o.maximize() ? neg(grad) : grad;
      if (o.weight_decay() != 0) d_p = plus_scaled(d_p, p, weight_decay);
      if (o.momentum() != 0) {
        ParamState& st = state_of(p);
        auto it = st.find("momentum_buffer");
        Tensor buf;
        if (it != st.end()) {
          buf = std::get<Tensor>(it->second);
          scale_(buf, momentum);
          axpy_(buf, d_p, one_minus(dampening));
        } else if (tracing()) {
          // The first step's buffer is d_p. A trace starts from a zero buffer (in-out state from
          // then on) and applies the general update, which gives exactly d_p when dampening is 0.
          // With dampening the first step differs from later ones: it adds d_p undamped, and a
          // host guard confines the trace to first steps (jit::compile(fn) re-traces after it).
          if (o.dampening() != 0) {
            const TensorImpl* key = p.impl();
            guard_host(this, name + "first momentum step", [this, key] {
              auto s = state().find(key);
              return s == state().end() || !s->second.count("momentum_buffer") ? 1.0 : 0.0;
            });
          }
          buf = zeros_like(p);
          st.emplace("momentum_buffer", buf);
          if (o.dampening() != 0) {
            axpy_(buf, d_p, constant(1.0));
          } else {
            scale_(buf, momentum);
            axpy_(buf, d_p, one_minus(dampening));
          }
        } else {
          buf = d_p.detach().clone();
          st.emplace("momentum_buffer", buf);
        }
        d_p = o.nesterov() ? plus_scaled(d_p, buf, momentum) : buf;
      }
      axpy_(p, d_p, -lr);
    }
  }
  return loss;
}

}  // namespace kiln::optim
