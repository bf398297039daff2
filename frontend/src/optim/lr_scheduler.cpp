#include "kiln/optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace kiln::optim {

LRScheduler::LRScheduler(Optimizer& optimizer, std::vector<double> base_lrs)
    : optimizer_(optimizer), base_lrs_(std::move(base_lrs)) {
  if (base_lrs_.empty()) base_lrs_ = group_lrs();
  KILN_CHECK(base_lrs_.size() == optimizer_.param_groups().size(), "LRScheduler", "expected ",
             optimizer_.param_groups().size(), " base learning rates, got ", base_lrs_.size());
}

std::vector<double> LRScheduler::group_lrs() const {
  std::vector<double> lrs;
  for (const auto& g : optimizer_.param_groups()) lrs.push_back(g.options().get_lr());
  return lrs;
}

void LRScheduler::initial_step() {
  step_count_ = 0;
  step();
}

void LRScheduler::step() {
  step_count_ += 1;
  last_epoch_ += 1;
  std::vector<double> values = get_lr();
  auto& groups = optimizer_.param_groups();
  KILN_CHECK(values.size() == groups.size(), "LRScheduler::step", "expected ", groups.size(),
             " learning rates (one per parameter group), the schedule has ", values.size());
  for (size_t i = 0; i < groups.size(); ++i) groups[i].options().set_lr(values[i]);
  last_lr_ = group_lrs();
}

void LRScheduler::load_state_dict(const LRSchedulerState& state) {
  last_epoch_ = state.last_epoch;
  step_count_ = state.step_count;
  base_lrs_ = state.base_lrs;
  last_lr_ = state.last_lr;
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  KILN_CHECK(step_size > 0, "StepLR", "expected step_size > 0, got ", step_size);
  initial_step();
}

std::vector<double> StepLR::get_lr() {
  std::vector<double> lrs = group_lrs();
  if (last_epoch_ == 0 || last_epoch_ % step_size_ != 0) return lrs;
  for (auto& lr : lrs) lr *= gamma_;
  return lrs;
}

MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(optimizer), milestones_(std::move(milestones)), gamma_(gamma) {
  std::sort(milestones_.begin(), milestones_.end());
  initial_step();
}

std::vector<double> MultiStepLR::get_lr() {
  std::vector<double> lrs = group_lrs();
  const auto count = std::count(milestones_.begin(), milestones_.end(), last_epoch_);
  if (count == 0) return lrs;
  for (auto& lr : lrs) lr *= std::pow(gamma_, static_cast<double>(count));
  return lrs;
}

ExponentialLR::ExponentialLR(Optimizer& optimizer, double gamma)
    : LRScheduler(optimizer), gamma_(gamma) {
  initial_step();
}

std::vector<double> ExponentialLR::get_lr() {
  std::vector<double> lrs = group_lrs();
  if (last_epoch_ == 0) return lrs;
  for (auto& lr : lrs) lr *= gamma_;
  return lrs;
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min)
    : LRScheduler(optimizer), T_max_(T_max), eta_min_(eta_min) {
  KILN_CHECK(T_max > 0, "CosineAnnealingLR", "expected T_max > 0, got ", T_max);
  initial_step();
}

std::vector<double> CosineAnnealingLR::get_lr() {
  constexpr double pi = std::numbers::pi;
  std::vector<double> lrs = group_lrs();
  const double T = static_cast<double>(T_max_);
  const double e = static_cast<double>(last_epoch_);
  if (last_epoch_ == 0) return lrs;
  if (step_count_ == 1 && last_epoch_ > 0) {
    for (size_t i = 0; i < lrs.size(); ++i)
      lrs[i] = eta_min_ + (base_lrs_[i] - eta_min_) * (1 + std::cos(e * pi / T)) / 2;
  } else if ((last_epoch_ - 1 - T_max_) % (2 * T_max_) == 0) {
    for (size_t i = 0; i < lrs.size(); ++i)
      lrs[i] = lrs[i] + (base_lrs_[i] - eta_min_) * (1 - std::cos(pi / T)) / 2;
  } else {
    for (auto& lr : lrs)
      lr = (1 + std::cos(pi * e / T)) / (1 + std::cos(pi * (e - 1) / T)) * (lr - eta_min_) +
           eta_min_;
  }
  return lrs;
}

namespace {
std::vector<double> per_group(const std::vector<double>& v, size_t groups, const char* name) {
  if (v.size() == 1) return std::vector<double>(groups, v[0]);
  KILN_CHECK(v.size() == groups, "OneCycleLR", "expected ", groups, " values for ", name, ", got ",
             v.size());
  return v;
}

int64_t one_cycle_total_steps(const OneCycleLROptions& o) {
  if (o.total_steps() != 0) {
    KILN_CHECK(o.total_steps() > 0, "OneCycleLR", "expected positive integer total_steps, got ",
               o.total_steps());
    return o.total_steps();
  }
  KILN_CHECK(o.epochs() > 0 && o.steps_per_epoch() > 0, "OneCycleLR",
             "expected either total_steps or positive epochs and steps_per_epoch, got epochs ",
             o.epochs(), " and steps_per_epoch ", o.steps_per_epoch());
  return o.epochs() * o.steps_per_epoch();
}

std::vector<double> one_cycle_base_lrs(Optimizer& optimizer, const OneCycleLROptions& o) {
  auto max_lrs = per_group(o.max_lr(), optimizer.param_groups().size(), "max_lr");
  for (auto& lr : max_lrs) lr /= o.div_factor();
  return max_lrs;
}
}  // namespace

OneCycleLR::OneCycleLR(Optimizer& optimizer, const OneCycleLROptions& o)
    : LRScheduler(optimizer, one_cycle_base_lrs(optimizer, o)),
      total_steps_(one_cycle_total_steps(o)),
      anneal_strategy_(o.anneal_strategy()),
      cycle_momentum_(o.cycle_momentum()) {
  enum { kInitialLr, kMaxLr, kMinLr, kMaxMomentum, kBaseMomentum };
  const double total = static_cast<double>(total_steps_);
  KILN_CHECK(o.pct_start() >= 0 && o.pct_start() <= 1, "OneCycleLR",
             "expected pct_start between 0 and 1, got ", o.pct_start());
  if (o.three_phase()) {
    phases_ = {{o.pct_start() * total - 1, kInitialLr, kMaxLr, kMaxMomentum, kBaseMomentum},
               {2 * o.pct_start() * total - 2, kMaxLr, kInitialLr, kBaseMomentum, kMaxMomentum},
               {total - 1, kInitialLr, kMinLr, kMaxMomentum, kMaxMomentum}};
  } else {
    phases_ = {{o.pct_start() * total - 1, kInitialLr, kMaxLr, kMaxMomentum, kBaseMomentum},
               {total - 1, kMaxLr, kMinLr, kBaseMomentum, kMaxMomentum}};
  }
  auto& groups = optimizer.param_groups();
  const auto max_lrs = per_group(o.max_lr(), groups.size(), "max_lr");
  const auto max_m = per_group(o.max_momentum(), groups.size(), "max_momentum");
  const auto base_m = per_group(o.base_momentum(), groups.size(), "base_momentum");
  for (size_t i = 0; i < groups.size(); ++i) {
    GroupValues v{};
    v[kInitialLr] = max_lrs[i] / o.div_factor();
    v[kMaxLr] = max_lrs[i];
    v[kMinLr] = v[kInitialLr] / o.final_div_factor();
    v[kMaxMomentum] = max_m[i];
    v[kBaseMomentum] = base_m[i];
    groups_.push_back(v);
    if (cycle_momentum_) {
      KILN_CHECK(groups[i].options().has_momentum(), "OneCycleLR",
                 "optimizer must support momentum with `cycle_momentum` option enabled");
      groups[i].options().set_momentum(max_m[i]);
    }
  }
  initial_step();
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  if (anneal_strategy_ == AnnealStrategy::Cos) {
    const double cos_out = std::cos(std::numbers::pi * pct) + 1;
    return end + (start - end) / 2.0 * cos_out;
  }
  return (end - start) * pct + start;
}

std::vector<double> OneCycleLR::get_lr() {
  const int64_t step_num = last_epoch_;
  KILN_CHECK(step_num <= total_steps_, "OneCycleLR", "tried to step ", step_num + 1,
             " times; the specified number of total steps is ", total_steps_);
  auto& groups = optimizer_.param_groups();
  KILN_CHECK(groups.size() == groups_.size(), "OneCycleLR", "expected ", groups_.size(),
             " parameter groups, the optimizer has ", groups.size());
  std::vector<double> lrs;
  for (size_t g = 0; g < groups.size(); ++g) {
    const GroupValues& v = groups_[g];
    double start_step = 0, computed_lr = 0, computed_momentum = 0;
    for (size_t i = 0; i < phases_.size(); ++i) {
      const Phase& phase = phases_[i];
      if (static_cast<double>(step_num) <= phase.end_step || i == phases_.size() - 1) {
        const double pct =
            (static_cast<double>(step_num) - start_step) / (phase.end_step - start_step);
        computed_lr = anneal(v[phase.start_lr], v[phase.end_lr], pct);
        computed_momentum = anneal(v[phase.start_momentum], v[phase.end_momentum], pct);
        break;
      }
      start_step = phase.end_step;
    }
    lrs.push_back(computed_lr);
    if (cycle_momentum_) groups[g].options().set_momentum(computed_momentum);
  }
  return lrs;
}

}  // namespace kiln::optim
