#pragma once
// L-BFGS, as torch.optim.LBFGS (PyTorch 1.13), a port of its algorithm including the strong-Wolfe
// line search (cubic interpolation, bracketing and zoom). step(closure) is required: the closure
// clears the gradients, recomputes the loss, calls backward() and returns the loss; it is called
// several times per step. One parameter group only.

#include <optional>
#include <string>

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

class LBFGSOptions : public OptimizerOptions {
 public:
  explicit LBFGSOptions(double lr = 1) : lr_(lr) {}
  KILN_ARG(double, lr);
  KILN_ARG(int64_t, max_iter) = 20;
  // Unset: max_iter * 5 / 4.
  KILN_ARG(std::optional<int64_t>, max_eval) = std::nullopt;
  KILN_ARG(double, tolerance_grad) = 1e-7;
  KILN_ARG(double, tolerance_change) = 1e-9;
  KILN_ARG(int64_t, history_size) = 100;
  // Unset: fixed steps of lr; "strong_wolfe": line search.
  KILN_ARG(std::optional<std::string>, line_search_fn) = std::nullopt;

 public:
  std::unique_ptr<OptimizerOptions> clone() const override {
    return std::make_unique<LBFGSOptions>(*this);
  }
  double get_lr() const override { return lr_; }
  void set_lr(double lr) override { lr_ = lr; }
  int64_t effective_max_eval() const { return max_eval_ ? *max_eval_ : max_iter_ * 5 / 4; }
  // max_eval and line_search_fn, when unset, are absent from the map.
  OptionsMap to_map() const override;
  void from_map(const OptionsMap& map) override;
  void validate() const override;
};

// State (kept on the first parameter, as in PyTorch): "func_evals", "n_iter" (ints), "d",
// "prev_flat_grad" (flat tensors over all parameters), "t", "H_diag" (0-dim tensors),
// "prev_loss" (a number), "old_dirs", "old_stps" ([history_size, n] tensors, newest row last),
// "ro" and "valid" ([history_size]: 1 / y·s of each row, and whether the row holds a pair).
//
// A step traces (jit::trace, compile, save) with max_iter = 1 and no line search: one iteration,
// its data-dependent choices (history update, no step below tolerance) as selects, lr a run-time
// input. The first step's form differs (a host guard: jit::compile(fn) re-traces once).
// "n_iter" and "func_evals" count eager steps only.
class LBFGS : public Optimizer {
 public:
  LBFGS(std::vector<Tensor> params, const LBFGSOptions& defaults = LBFGSOptions())
      : LBFGS(std::vector<ParamGroup>{ParamGroup(std::move(params))}, defaults) {}
  LBFGS(std::vector<ParamGroup> param_groups, const LBFGSOptions& defaults = LBFGSOptions());
  // Returns the closure's first loss (before this step's updates), as PyTorch.
  Tensor step(LossClosure closure) override;

 protected:
  bool state_shaped_like_params() const override { return false; }

 private:
  int64_t numel() const;
  Tensor gather_flat_grad() const;
  void add_grad(double step_size, const Tensor& update);
  void add_grad(const Tensor& step_size, const Tensor& update);  // a 0-dim step
  std::vector<Tensor> clone_params() const;
  void set_params(const std::vector<Tensor>& values);
  // Loss and flat gradient at x + t * d; parameters are restored to x afterwards.
  std::pair<double, Tensor> directional_evaluate(const LossClosure& closure,
                                                 const std::vector<Tensor>& x, double t,
                                                 const Tensor& d);
};

}  // namespace kiln::optim
