#pragma once
// kiln::optim::Optimizer — the base of every optimizer, shaped like torch::optim::Optimizer:
// parameter groups with their own options (per-layer learning rates), step()/step(closure),
// zero_grad(), and a state dict that is a plain structure of tensors and numbers.
//
// Parameters are plain std::vector<kiln::Tensor> (what nn::Module::parameters() returns). The
// optimizer keeps the tensors (handles share data), so updates are visible to the model.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "kiln/tensor.h"

// Option accessors in the style of TORCH_ARG: `SGDOptions(0.1).momentum(0.9)` sets,
// `options.momentum()` reads, and a non-const `options.momentum()` returns a reference.
#define KILN_ARG(T, name)           \
 public:                            \
  auto& name(const T& new_##name) { \
    this->name##_ = new_##name;     \
    return *this;                   \
  }                                 \
  const T& name() const noexcept {  \
    return this->name##_;           \
  }                                 \
  T& name() noexcept {              \
    return this->name##_;           \
  }                                 \
                                    \
 private:                           \
  T name##_

namespace kiln::optim {

// One value of an optimizer's state or options. Everything a state dict holds is one of these, so
// it converts directly to a serializable tree (numbers, strings, tensors, lists).
using StateValue =
    std::variant<bool, int64_t, double, std::string, std::vector<double>, Tensor, TensorList>;
// Per-parameter state ("momentum_buffer", "exp_avg", "step", ...) or a group's options
// ("lr", "momentum", "betas", ...), keyed by the PyTorch names.
using StateMap = std::map<std::string, StateValue>;
using ParamState = StateMap;
using OptionsMap = StateMap;

// Typed reads of a StateMap with clear errors (`what` names the caller).
double get_double(const StateMap& m, const std::string& key, const char* what);
int64_t get_int(const StateMap& m, const std::string& key, const char* what);
bool get_bool(const StateMap& m, const std::string& key, const char* what);
const Tensor& get_tensor(const StateMap& m, const std::string& key, const char* what);

// The options of one parameter group. Concrete classes: SGDOptions, AdamOptions, ...
class OptimizerOptions {
 public:
  virtual ~OptimizerOptions() = default;
  virtual std::unique_ptr<OptimizerOptions> clone() const = 0;
  virtual double get_lr() const = 0;
  virtual void set_lr(double lr) = 0;
  // The momentum a scheduler may cycle (OneCycleLR): SGD/RMSprop `momentum`, Adam/AdamW beta1.
  virtual bool has_momentum() const { return false; }
  virtual double get_momentum() const;
  virtual void set_momentum(double momentum);
  // Options by PyTorch name; from_map accepts a subset (missing keys keep their value).
  virtual OptionsMap to_map() const = 0;
  virtual void from_map(const OptionsMap& map) = 0;
  // Throws kiln::Error when an option is out of range (as PyTorch's constructors' ValueError).
  virtual void validate() const {}
};

// Parameters plus their options (null options = the optimizer's defaults, filled in when the
// group is added).
class ParamGroup {
 public:
  explicit ParamGroup(std::vector<Tensor> params) : params_(std::move(params)) {}
  ParamGroup(std::vector<Tensor> params, std::unique_ptr<OptimizerOptions> options)
      : params_(std::move(params)), options_(std::move(options)) {}
  template <typename Options>
  requires std::is_base_of_v<OptimizerOptions, Options> ParamGroup(std::vector<Tensor> params,
                                                                   const Options& options)
      : params_(std::move(params)), options_(options.clone()) {}
  ParamGroup(const ParamGroup& other)
      : params_(other.params_), options_(other.options_ ? other.options_->clone() : nullptr) {}
  ParamGroup& operator=(const ParamGroup& other) {
    if (this != &other) {
      params_ = other.params_;
      options_ = other.options_ ? other.options_->clone() : nullptr;
    }
    return *this;
  }
  ParamGroup(ParamGroup&&) noexcept = default;
  ParamGroup& operator=(ParamGroup&&) noexcept = default;

  std::vector<Tensor>& params() { return params_; }
  const std::vector<Tensor>& params() const { return params_; }
  bool has_options() const { return static_cast<bool>(options_); }
  OptimizerOptions& options();
  const OptimizerOptions& options() const;
  void set_options(std::unique_ptr<OptimizerOptions> options) { options_ = std::move(options); }
  // The options as their concrete type (throws if they are another optimizer's).
  template <typename Options>
  Options& options_as() {
    auto* o = dynamic_cast<Options*>(&options());
    if (!o) wrong_options_type();
    return *o;
  }
  template <typename Options>
  const Options& options_as() const {
    auto* o = dynamic_cast<const Options*>(&options());
    if (!o) wrong_options_type();
    return *o;
  }

 private:
  [[noreturn]] static void wrong_options_type();
  std::vector<Tensor> params_;
  std::unique_ptr<OptimizerOptions> options_;
};

// A snapshot of an optimizer, as PyTorch's: `state` is keyed by the parameter's index counted over
// all groups in order; each group lists its parameters' indices and its options. Tensors in it are
// copies, so the dict stays valid while the optimizer keeps stepping.
struct ParamGroupState {
  std::vector<int64_t> params;
  OptionsMap options;
};
struct OptimizerStateDict {
  std::map<int64_t, ParamState> state;
  std::vector<ParamGroupState> param_groups;
};

using LossClosure = std::function<Tensor()>;

class Optimizer {
 public:
  Optimizer(std::vector<ParamGroup> param_groups, std::unique_ptr<OptimizerOptions> defaults);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update. With a closure, the closure is called (with grad mode on) to recompute the loss
  // and the gradients, and its loss is returned; without one, an undefined Tensor is returned.
  // Parameters whose grad is undefined are skipped.
  virtual Tensor step(LossClosure closure = nullptr) = 0;

  // Adds a group; options missing from it are the optimizer's defaults. A tensor may belong to
  // one group only, and must be a leaf.
  void add_param_group(const ParamGroup& group);
  // Clears the gradients: undefined (set_to_none) or filled with zeros.
  void zero_grad(bool set_to_none = true);

  std::vector<ParamGroup>& param_groups() { return param_groups_; }
  const std::vector<ParamGroup>& param_groups() const { return param_groups_; }
  const OptimizerOptions& defaults() const { return *defaults_; }
  OptimizerOptions& defaults() { return *defaults_; }
  // All parameters of all groups, in order.
  std::vector<Tensor> parameters() const;
  // Number of parameters over all groups.
  int64_t size() const;

  // Per-parameter state, keyed by the parameter's TensorImpl.
  std::unordered_map<const TensorImpl*, ParamState>& state() { return state_; }
  const std::unordered_map<const TensorImpl*, ParamState>& state() const { return state_; }

  OptimizerStateDict state_dict() const;
  // Restores state and group options from a dict made by an optimizer of the same kind over
  // parameters of the same shapes, in the same group layout. Tensors are copied in.
  void load_state_dict(const OptimizerStateDict& dict);

 protected:
  // The state of `p`, created empty on first use.
  ParamState& state_of(const Tensor& p) { return state_[p.impl()]; }
  // Called by the subclasses' step() when a closure is given: runs it with grad mode on.
  static Tensor evaluate_closure(const LossClosure& closure);
  // Under tracing, refuses a step whose update the trace could not replay (LBFGS's line search,
  // SGD's first step with dampening): `why` says what and what to do instead. Hyper-parameters
  // reach a trace as host scalars and guards (src/optim/hyper.h).
  static void refuse_trace_if(bool refuse, const char* op, const char* why);
  // Whether every tensor in a parameter's state has that parameter's shape (checked on load).
  // LBFGS keeps flat vectors over all parameters instead.
  virtual bool state_shaped_like_params() const { return true; }

  std::vector<ParamGroup> param_groups_;
  std::unordered_map<const TensorImpl*, ParamState> state_;
  std::unique_ptr<OptimizerOptions> defaults_;
};

}  // namespace kiln::optim
