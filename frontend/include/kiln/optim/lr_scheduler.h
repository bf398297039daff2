#pragma once
// Learning-rate schedulers, as torch.optim.lr_scheduler (PyTorch 1.13). Construction sets the
// epoch-0 learning rate of every parameter group; each step() advances one epoch (or one batch,
// for OneCycleLR) and writes the new rates into the optimizer's groups. The update rules are
// PyTorch's chainable forms (they read the group's current lr), so schedulers compose as there.

#include <array>
#include <cstdint>
#include <vector>

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

// Serializable scheduler state (numbers only).
struct LRSchedulerState {
  int64_t last_epoch = -1;
  int64_t step_count = 0;
  std::vector<double> base_lrs;
  std::vector<double> last_lr;
};

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // Advances one epoch and sets every group's lr.
  void step();
  // The learning rates set by the last step (or by construction), one per group.
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  int64_t last_epoch() const { return last_epoch_; }
  Optimizer& optimizer() { return optimizer_; }

  LRSchedulerState state_dict() const { return {last_epoch_, step_count_, base_lrs_, last_lr_}; }
  void load_state_dict(const LRSchedulerState& state);

 protected:
  // base_lrs empty: the groups' current learning rates.
  explicit LRScheduler(Optimizer& optimizer, std::vector<double> base_lrs = {});
  // Called at the end of every subclass constructor (step() needs the subclass's get_lr).
  void initial_step();
  // The new learning rates, one per group, for last_epoch_ (already advanced).
  virtual std::vector<double> get_lr() = 0;
  // The groups' current learning rates.
  std::vector<double> group_lrs() const;

  Optimizer& optimizer_;
  int64_t last_epoch_ = -1;
  int64_t step_count_ = 0;
  std::vector<double> base_lrs_;
  std::vector<double> last_lr_;
};

// lr = base_lr * gamma^(epoch / step_size)
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);

 protected:
  std::vector<double> get_lr() override;

 private:
  int64_t step_size_;
  double gamma_;
};

// lr = base_lr * gamma^(number of milestones <= epoch); a repeated milestone counts twice.
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1);

 protected:
  std::vector<double> get_lr() override;

 private:
  std::vector<int64_t> milestones_;  // sorted
  double gamma_;
};

// lr = base_lr * gamma^epoch
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& optimizer, double gamma);

 protected:
  std::vector<double> get_lr() override;

 private:
  double gamma_;
};

// lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2 (computed recursively, as
// PyTorch; past T_max it rises again with period 2 * T_max).
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0);

 protected:
  std::vector<double> get_lr() override;

 private:
  int64_t T_max_;
  double eta_min_;
};

enum class AnnealStrategy { Cos, Linear };

struct OneCycleLROptions {
  // One value for all groups, or one per group.
  KILN_ARG(std::vector<double>, max_lr);
  // Either total_steps, or epochs and steps_per_epoch.
  KILN_ARG(int64_t, total_steps) = 0;
  KILN_ARG(int64_t, epochs) = 0;
  KILN_ARG(int64_t, steps_per_epoch) = 0;
  KILN_ARG(double, pct_start) = 0.3;
  KILN_ARG(AnnealStrategy, anneal_strategy) = AnnealStrategy::Cos;
  KILN_ARG(bool, cycle_momentum) = true;
  KILN_ARG(std::vector<double>, base_momentum) = {0.85};
  KILN_ARG(std::vector<double>, max_momentum) = {0.95};
  KILN_ARG(double, div_factor) = 25.;
  KILN_ARG(double, final_div_factor) = 1e4;
  KILN_ARG(bool, three_phase) = false;

 public:
  OneCycleLROptions(std::vector<double> max_lr, int64_t total_steps)
      : max_lr_(std::move(max_lr)), total_steps_(total_steps) {}
  OneCycleLROptions(double max_lr, int64_t total_steps)
      : max_lr_({max_lr}), total_steps_(total_steps) {}
};

// The 1cycle policy: lr warms from max_lr / div_factor to max_lr over pct_start of the steps, then
// anneals to max_lr / div_factor / final_div_factor (three_phase: back down to the initial lr
// symmetrically first, then to the minimum). With cycle_momentum, the momentum (SGD/RMSprop) or
// beta1 (Adam/AdamW) cycles inversely between max_momentum and base_momentum. Step once per batch.
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& optimizer, const OneCycleLROptions& options);
  int64_t total_steps() const { return total_steps_; }

 protected:
  std::vector<double> get_lr() override;

 private:
  struct Phase {
    double end_step;
    int start_lr, end_lr, start_momentum, end_momentum;  // indices into GroupValues
  };
  // initial_lr, max_lr, min_lr, max_momentum, base_momentum
  using GroupValues = std::array<double, 5>;
  double anneal(double start, double end, double pct) const;

  int64_t total_steps_;
  AnnealStrategy anneal_strategy_;
  bool cycle_momentum_;
  std::vector<Phase> phases_;
  std::vector<GroupValues> groups_;
};

}  // namespace kiln::optim
