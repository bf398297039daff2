#include "kiln/optim/optimizer.h"

#include <typeinfo>
#include <unordered_set>

#include "kiln/autograd.h"
#include "kiln/dispatch.h"
#include "kiln/ops.h"

namespace kiln::optim {

namespace {
const StateValue& lookup(const StateMap& m, const std::string& key, const char* what) {
  auto it = m.find(key);
  KILN_CHECK(it != m.end(), what, "expected an entry '", key, "', found none");
  return it->second;
}

StateValue copy_value(const StateValue& v) {
  if (auto* t = std::get_if<Tensor>(&v)) return t->defined() ? t->detach().clone() : Tensor();
  if (auto* l = std::get_if<TensorList>(&v)) {
    TensorList out;
    out.reserve(l->size());
    for (const auto& t : *l) out.push_back(t.defined() ? t.detach().clone() : Tensor());
    return out;
  }
  return v;
}
}  // namespace

double get_double(const StateMap& m, const std::string& key, const char* what) {
  const auto& v = lookup(m, key, what);
  if (auto* d = std::get_if<double>(&v)) return *d;
  if (auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  if (auto* t = std::get_if<Tensor>(&v); t && t->defined() && t->numel() == 1)
    return t->item_double();
  fail(what, "expected '", key, "' to be a number");
}

int64_t get_int(const StateMap& m, const std::string& key, const char* what) {
  const auto& v = lookup(m, key, what);
  if (auto* i = std::get_if<int64_t>(&v)) return *i;
  if (auto* d = std::get_if<double>(&v)) {
    KILN_CHECK(*d == static_cast<double>(static_cast<int64_t>(*d)), what, "expected '", key,
               "' to be an integer, got ", *d);
    return static_cast<int64_t>(*d);
  }
  if (auto* t = std::get_if<Tensor>(&v); t && t->defined() && t->numel() == 1)
    return static_cast<int64_t>(t->item_double());
  fail(what, "expected '", key, "' to be an integer");
}

bool get_bool(const StateMap& m, const std::string& key, const char* what) {
  const auto& v = lookup(m, key, what);
  if (auto* b = std::get_if<bool>(&v)) return *b;
  if (auto* i = std::get_if<int64_t>(&v)) return *i != 0;
  fail(what, "expected '", key, "' to be a bool");
}

const Tensor& get_tensor(const StateMap& m, const std::string& key, const char* what) {
  const auto& v = lookup(m, key, what);
  auto* t = std::get_if<Tensor>(&v);
  KILN_CHECK(t != nullptr, what, "expected '", key, "' to be a tensor");
  return *t;
}

double OptimizerOptions::get_momentum() const {
  fail("optim", "these optimizer options have no momentum");
}
void OptimizerOptions::set_momentum(double) {
  fail("optim", "these optimizer options have no momentum");
}

OptimizerOptions& ParamGroup::options() {
  KILN_CHECK(options_ != nullptr, "ParamGroup", "expected options, the group has none");
  return *options_;
}
const OptimizerOptions& ParamGroup::options() const {
  KILN_CHECK(options_ != nullptr, "ParamGroup", "expected options, the group has none");
  return *options_;
}
void ParamGroup::wrong_options_type() {
  fail("ParamGroup", "expected options of this optimizer's kind, got another optimizer's options");
}

Optimizer::Optimizer(std::vector<ParamGroup> param_groups,
                     std::unique_ptr<OptimizerOptions> defaults)
    : defaults_(std::move(defaults)) {
  KILN_CHECK(defaults_ != nullptr, "Optimizer", "expected default options");
  defaults_->validate();
  KILN_CHECK(!param_groups.empty(), "Optimizer", "expected at least one parameter group, got none");
  for (const auto& g : param_groups) add_param_group(g);
}

void Optimizer::add_param_group(const ParamGroup& group) {
  std::unordered_set<const TensorImpl*> seen;
  for (const auto& g : param_groups_)
    for (const auto& p : g.params()) seen.insert(p.impl());
  for (size_t i = 0; i < group.params().size(); ++i) {
    const Tensor& p = group.params()[i];
    KILN_CHECK(p.defined(), "Optimizer", "expected defined parameters, parameter ", i,
               " is undefined");
    KILN_CHECK(p.is_leaf(), "Optimizer", "can't optimize a non-leaf tensor (parameter ", i, ")");
    KILN_CHECK(seen.insert(p.impl()).second, "Optimizer",
               "some parameters appear in more than one parameter group (parameter ", i, ")");
  }
  ParamGroup g(group.params());
  if (group.has_options()) {
    const OptimizerOptions& o = group.options();
    KILN_CHECK(typeid(o) == typeid(*defaults_), "Optimizer", "expected group options of type ",
               typeid(*defaults_).name(), ", got ", typeid(o).name());
    o.validate();
    g.set_options(o.clone());
  } else {
    g.set_options(defaults_->clone());
  }
  param_groups_.push_back(std::move(g));
}

void Optimizer::zero_grad(bool set_to_none) {
  autograd::NoGradGuard no_grad;
  for (auto& g : param_groups_) {
    for (auto& p : g.params()) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      if (set_to_none) {
        p.set_grad(Tensor());
      } else {
        // A gradient with history (create_graph) is replaced by a detached zero tensor.
        if (grad.grad_fn()) {
          p.set_grad(zeros_like(grad));
        } else {
          zero_(grad);
        }
      }
    }
  }
}

std::vector<Tensor> Optimizer::parameters() const {
  std::vector<Tensor> out;
  for (const auto& g : param_groups_) out.insert(out.end(), g.params().begin(), g.params().end());
  return out;
}

int64_t Optimizer::size() const {
  int64_t n = 0;
  for (const auto& g : param_groups_) n += static_cast<int64_t>(g.params().size());
  return n;
}

Tensor Optimizer::evaluate_closure(const LossClosure& closure) {
  if (!closure) return Tensor();
  autograd::EnableGradGuard grad_on;
  return closure();
}

OptimizerStateDict Optimizer::state_dict() const {
  autograd::NoGradGuard no_grad;
  OptimizerStateDict dict;
  int64_t index = 0;
  for (const auto& g : param_groups_) {
    ParamGroupState gs;
    gs.options = g.options().to_map();
    for (const auto& p : g.params()) {
      auto it = state_.find(p.impl());
      if (it != state_.end()) {
        ParamState copy;
        for (const auto& [k, v] : it->second) copy.emplace(k, copy_value(v));
        dict.state.emplace(index, std::move(copy));
      }
      gs.params.push_back(index++);
    }
    dict.param_groups.push_back(std::move(gs));
  }
  return dict;
}

void Optimizer::load_state_dict(const OptimizerStateDict& dict) {
  const char* op = "Optimizer::load_state_dict";
  KILN_CHECK(dict.param_groups.size() == param_groups_.size(), op, "expected ",
             param_groups_.size(), " parameter groups, the state dict has ",
             dict.param_groups.size());
  std::map<int64_t, Tensor> by_index;
  std::vector<std::unique_ptr<OptimizerOptions>> new_options;
  for (size_t gi = 0; gi < param_groups_.size(); ++gi) {
    const auto& saved = dict.param_groups[gi];
    const auto& group = param_groups_[gi];
    KILN_CHECK(saved.params.size() == group.params().size(), op, "parameter group ", gi, " has ",
               group.params().size(), " parameters, the state dict's has ", saved.params.size());
    for (size_t i = 0; i < saved.params.size(); ++i) {
      KILN_CHECK(by_index.emplace(saved.params[i], group.params()[i]).second, op,
                 "parameter index ", saved.params[i], " appears twice in the state dict");
    }
    auto o = group.options().clone();
    o->from_map(saved.options);
    o->validate();
    new_options.push_back(std::move(o));
  }
  std::unordered_map<const TensorImpl*, ParamState> new_state;
  autograd::NoGradGuard no_grad;
  for (const auto& [index, st] : dict.state) {
    auto it = by_index.find(index);
    KILN_CHECK(it != by_index.end(), op, "state for parameter index ", index,
               " which no parameter group lists");
    const Tensor& p = it->second;
    ParamState copy;
    for (const auto& [k, v] : st) {
      StateValue c = copy_value(v);
      if (auto* t = std::get_if<Tensor>(&c);
          t && t->defined() && state_shaped_like_params() && t->dim() > 0) {
        KILN_CHECK(t->sizes() == p.sizes(), op, "state '", k, "' of parameter ", index,
                   " has shape ", t->sizes(), ", the parameter has ", p.sizes());
      }
      copy.emplace(k, std::move(c));
    }
    new_state.emplace(p.impl(), std::move(copy));
  }
  for (size_t gi = 0; gi < param_groups_.size(); ++gi)
    param_groups_[gi].set_options(std::move(new_options[gi]));
  state_ = std::move(new_state);
}

void Optimizer::refuse_trace_if(bool refuse, const char* op, const char* why) {
  KILN_CHECK(!(refuse && dispatch::tracer()), op, "this step cannot be traced: ", why);
}

}  // namespace kiln::optim
