// A line-by-line port of torch/optim/lbfgs.py (PyTorch 1.13), scalars in double.
#include "kiln/optim/lbfgs.h"

#include <algorithm>
#include <cmath>

#include "hyper.h"
#include "kiln/autograd.h"
#include "kiln/dispatch.h"
#include "kiln/ops.h"

namespace kiln::optim {

namespace {

double scalar(const Tensor& t) {
  return t.item_double();
}
double abs_max(const Tensor& t) {
  return scalar(kiln::max(kiln::abs(t)));
}
double dotd(const Tensor& a, const Tensor& b) {
  return scalar(kiln::dot(a, b));
}

// Minimizer of the cubic interpolating (x1, f1, g1) and (x2, f2, g2), clamped to the bounds.
double cubic_interpolate(double x1, double f1, double g1, double x2, double f2, double g2,
                         std::optional<std::pair<double, double>> bounds = std::nullopt) {
  double xmin_bound, xmax_bound;
  if (bounds) {
    xmin_bound = bounds->first;
    xmax_bound = bounds->second;
  } else if (x1 <= x2) {
    xmin_bound = x1;
    xmax_bound = x2;
  } else {
    xmin_bound = x2;
    xmax_bound = x1;
  }
  const double d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2);
  const double d2_square = d1 * d1 - g1 * g2;
  if (d2_square >= 0) {
    const double d2 = std::sqrt(d2_square);
    double min_pos;
    if (x1 <= x2) {
      min_pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2));
    } else {
      min_pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2));
    }
    // Python's min(max(min_pos, lo), hi), NaN propagating the same way.
    const double lo = xmin_bound > min_pos ? xmin_bound : min_pos;
    return xmax_bound < lo ? xmax_bound : lo;
  }
  return (xmin_bound + xmax_bound) / 2.;
}

struct WolfeResult {
  double f;
  Tensor g;
  double t;
  int64_t func_evals;
};

using ObjFunc = std::function<std::pair<double, Tensor>(double t)>;

WolfeResult strong_wolfe(const ObjFunc& obj_func, double t, const Tensor& d, double f,
                         const Tensor& g_in, double gtd, double c1 = 1e-4, double c2 = 0.9,
                         double tolerance_change = 1e-9, int64_t max_ls = 25) {
  const double d_norm = abs_max(d);
  Tensor g = g_in.clone();
  // evaluate objective and gradient using initial step
  auto [f_new, g_new] = obj_func(t);
  int64_t ls_func_evals = 1;
  double gtd_new = dotd(g_new, d);

  // bracket an interval containing a point satisfying the Wolfe criteria
  double t_prev = 0, f_prev = f, gtd_prev = gtd;
  Tensor g_prev = g;
  bool done = false;
  int64_t ls_iter = 0;
  std::vector<double> bracket, bracket_f, bracket_gtd;
  std::vector<Tensor> bracket_g;
  while (ls_iter < max_ls) {
    // check conditions
    if (f_new > (f + c1 * t * gtd) || (ls_iter > 1 && f_new >= f_prev)) {
      bracket = {t_prev, t};
      bracket_f = {f_prev, f_new};
      bracket_g = {g_prev, g_new.clone()};
      bracket_gtd = {gtd_prev, gtd_new};
      break;
    }
    if (std::abs(gtd_new) <= -c2 * gtd) {
      bracket = {t};
      bracket_f = {f_new};
      bracket_g = {g_new};
      done = true;
      break;
    }
    if (gtd_new >= 0) {
      bracket = {t_prev, t};
      bracket_f = {f_prev, f_new};
      bracket_g = {g_prev, g_new.clone()};
      bracket_gtd = {gtd_prev, gtd_new};
      break;
    }
    // interpolate
    const double min_step = t + 0.01 * (t - t_prev);
    const double max_step = t * 10;
    const double tmp = t;
    t = cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new,
                          std::make_pair(min_step, max_step));
    // next step
    t_prev = tmp;
    f_prev = f_new;
    g_prev = g_new.clone();
    gtd_prev = gtd_new;
    std::tie(f_new, g_new) = obj_func(t);
    ls_func_evals += 1;
    gtd_new = dotd(g_new, d);
    ls_iter += 1;
  }
  // reached max number of iterations?
  if (ls_iter == max_ls) {
    bracket = {0, t};
    bracket_f = {f, f_new};
    bracket_g = {g, g_new};
  }

  // zoom phase: we now have a point satisfying the criteria, or a bracket around it. Refine the
  // bracket until we find the exact point satisfying the criteria.
  bool insuf_progress = false;
  // find high and low points in bracket
  size_t low_pos = 0, high_pos = 1;
  if (!(bracket_f.front() <= bracket_f.back())) std::swap(low_pos, high_pos);
  while (!done && ls_iter < max_ls) {
    // line-search bracket is so small
    if (std::abs(bracket[1] - bracket[0]) * d_norm < tolerance_change) break;

    // compute new trial value
    t = cubic_interpolate(bracket[0], bracket_f[0], bracket_gtd[0], bracket[1], bracket_f[1],
                          bracket_gtd[1]);

    // test that we are making sufficient progress: if `t` is so close to the boundary, mark
    // insufficient progress, and if we made insufficient progress in the last step or `t` is at
    // one of the boundaries, move `t` to 0.1 * len(bracket) away from the nearest boundary.
    const double bmax = std::max(bracket[0], bracket[1]);
    const double bmin = std::min(bracket[0], bracket[1]);
    const double eps = 0.1 * (bmax - bmin);
    if (std::min(bmax - t, t - bmin) < eps) {
      // interpolation close to boundary
      if (insuf_progress || t >= bmax || t <= bmin) {
        // evaluate at 0.1 away from boundary
        if (std::abs(t - bmax) < std::abs(t - bmin)) {
          t = bmax - eps;
        } else {
          t = bmin + eps;
        }
        insuf_progress = false;
      } else {
        insuf_progress = true;
      }
    } else {
      insuf_progress = false;
    }

    // Evaluate new point
    std::tie(f_new, g_new) = obj_func(t);
    ls_func_evals += 1;
    gtd_new = dotd(g_new, d);
    ls_iter += 1;

    if (f_new > (f + c1 * t * gtd) || f_new >= bracket_f[low_pos]) {
      // Armijo condition not satisfied or not lower than lowest point
      bracket[high_pos] = t;
      bracket_f[high_pos] = f_new;
      bracket_g[high_pos] = g_new.clone();
      bracket_gtd[high_pos] = gtd_new;
      if (bracket_f[0] <= bracket_f[1]) {
        low_pos = 0;
        high_pos = 1;
      } else {
        low_pos = 1;
        high_pos = 0;
      }
    } else {
      if (std::abs(gtd_new) <= -c2 * gtd) {
        // Wolfe conditions satisfied
        done = true;
      } else if (gtd_new * (bracket[high_pos] - bracket[low_pos]) >= 0) {
        // old high becomes new low
        bracket[high_pos] = bracket[low_pos];
        bracket_f[high_pos] = bracket_f[low_pos];
        bracket_g[high_pos] = bracket_g[low_pos];
        bracket_gtd[high_pos] = bracket_gtd[low_pos];
      }
      // new point becomes new low
      bracket[low_pos] = t;
      bracket_f[low_pos] = f_new;
      bracket_g[low_pos] = g_new.clone();
      bracket_gtd[low_pos] = gtd_new;
    }
  }
  return {bracket_f[low_pos], bracket_g[low_pos], bracket[low_pos], ls_func_evals};
}

}  // namespace

OptionsMap LBFGSOptions::to_map() const {
  OptionsMap m{{"lr", lr_},
               {"max_iter", max_iter_},
               {"tolerance_grad", tolerance_grad_},
               {"tolerance_change", tolerance_change_},
               {"history_size", history_size_}};
  if (max_eval_) m["max_eval"] = *max_eval_;
  if (line_search_fn_) m["line_search_fn"] = *line_search_fn_;
  return m;
}

void LBFGSOptions::from_map(const OptionsMap& m) {
  const char* op = "LBFGSOptions";
  if (m.count("lr")) lr_ = get_double(m, "lr", op);
  if (m.count("max_iter")) max_iter_ = get_int(m, "max_iter", op);
  max_eval_ =
      m.count("max_eval") ? std::optional<int64_t>(get_int(m, "max_eval", op)) : std::nullopt;
  if (m.count("tolerance_grad")) tolerance_grad_ = get_double(m, "tolerance_grad", op);
  if (m.count("tolerance_change")) tolerance_change_ = get_double(m, "tolerance_change", op);
  if (m.count("history_size")) history_size_ = get_int(m, "history_size", op);
  line_search_fn_ = std::nullopt;
  if (auto it = m.find("line_search_fn"); it != m.end()) {
    auto* s = std::get_if<std::string>(&it->second);
    KILN_CHECK(s != nullptr, op, "expected 'line_search_fn' to be a string");
    line_search_fn_ = *s;
  }
}

void LBFGSOptions::validate() const {
  KILN_CHECK(lr_ >= 0, "LBFGS", "expected lr >= 0, got ", lr_);
  KILN_CHECK(max_iter_ >= 1, "LBFGS", "expected max_iter >= 1, got ", max_iter_);
  KILN_CHECK(history_size_ >= 1, "LBFGS", "expected history_size >= 1, got ", history_size_);
  KILN_CHECK(!line_search_fn_ || *line_search_fn_ == "strong_wolfe", "LBFGS",
             "only 'strong_wolfe' is supported as line_search_fn, got '",
             line_search_fn_.value_or(""), "'");
}

LBFGS::LBFGS(std::vector<ParamGroup> param_groups, const LBFGSOptions& defaults)
    : Optimizer(std::move(param_groups), defaults.clone()) {
  KILN_CHECK(param_groups_.size() == 1, "LBFGS",
             "doesn't support per-parameter options (parameter groups), got ", param_groups_.size(),
             " groups");
  const auto& params = param_groups_[0].params();
  KILN_CHECK(!params.empty(), "LBFGS", "expected at least one parameter");
  for (const auto& p : params) {
    KILN_CHECK(p.dtype() == params[0].dtype(), "LBFGS",
               "expected all parameters to have one dtype, got ", params[0].dtype(), " and ",
               p.dtype());
  }
}

int64_t LBFGS::numel() const {
  int64_t n = 0;
  for (const auto& p : param_groups_[0].params()) n += p.numel();
  return n;
}

Tensor LBFGS::gather_flat_grad() const {
  TensorList views;
  for (const auto& p : param_groups_[0].params()) {
    Tensor g = p.grad();
    views.push_back(g.defined() ? g.reshape({-1}) : zeros({p.numel()}, TensorOptions(p.dtype())));
  }
  return cat(views, 0);
}

void LBFGS::add_grad(double step_size, const Tensor& update) {
  int64_t offset = 0;
  for (auto& p : param_groups_[0].params()) {
    const int64_t n = p.numel();
    add_(p, update.narrow(0, offset, n).reshape(p.sizes()), step_size);
    offset += n;
  }
}

std::vector<Tensor> LBFGS::clone_params() const {
  std::vector<Tensor> out;
  for (const auto& p : param_groups_[0].params()) out.push_back(p.detach().clone());
  return out;
}

void LBFGS::set_params(const std::vector<Tensor>& values) {
  auto& params = param_groups_[0].params();
  for (size_t i = 0; i < params.size(); ++i) copy_(params[i], values[i]);
}

std::pair<double, Tensor> LBFGS::directional_evaluate(const LossClosure& closure,
                                                      const std::vector<Tensor>& x, double t,
                                                      const Tensor& d) {
  add_grad(t, d);
  const double loss = scalar(evaluate_closure(closure));
  Tensor flat_grad = gather_flat_grad();
  set_params(x);
  return {loss, flat_grad};
}

namespace {

// The curvature pairs (y, s) and their 1 / (y·s), newest last, in fixed-size tensors: rows
// [H - count, H) hold pairs (`valid` 1 there, 0 before), so one trace serves every history
// length and an update that may not happen is a select, not a branch.
struct History {
  Tensor dirs, stps;  // [H, n]
  Tensor ro, valid;   // [H]
};

// Eagerly: appends (y, s, 1 / ys), dropping the oldest row, moving the rows of the state in
// place (no [H, n] temporaries).
void push(History& h, const Tensor& y, const Tensor& s, const Tensor& ys) {
  const int64_t H = h.ro.size(0);
  for (Tensor* rows : {&h.dirs, &h.stps}) {
    for (int64_t k = 0; k + 1 < H; ++k) {
      Tensor row = rows->select(0, k);
      copy_(row, rows->select(0, k + 1));
    }
  }
  Tensor newest_dir = h.dirs.select(0, H - 1), newest_stp = h.stps.select(0, H - 1);
  copy_(newest_dir, y);
  copy_(newest_stp, s);
  h.ro = cat({h.ro.narrow(0, 1, H - 1), reciprocal(ys).unsqueeze(0)}, 0);
  h.valid = cat({h.valid.narrow(0, 1, H - 1), ones_like(ys).unsqueeze(0)}, 0);
}

// Under tracing: the same where `when` holds, as a select of the shifted rows.
History push_if(const History& h, const Tensor& when, const Tensor& y, const Tensor& s,
                const Tensor& ys) {
  const int64_t H = h.ro.size(0);
  auto shifted = [&](const Tensor& rows, const Tensor& row) {
    return where(when, cat({rows.narrow(0, 1, H - 1), row.unsqueeze(0)}, 0), rows);
  };
  return {shifted(h.dirs, y), shifted(h.stps, s), shifted(h.ro, reciprocal(ys)),
          shifted(h.valid, ones_like(ys))};
}

// The L-BFGS two-loop recursion over rows [first, H): the approximate inverse Hessian times -g.
// Invalid rows add exactly zero, so the result equals the recursion over the valid rows alone
// (eager starts at the first valid row; a trace, not knowing it, at 0).
Tensor two_loop(const History& h, const Tensor& flat_grad, const Tensor& H_diag, int64_t first) {
  const int64_t H = h.ro.size(0);
  std::vector<Tensor> al(static_cast<size_t>(H));
  Tensor q = neg(flat_grad);
  for (int64_t k = H; k-- > first;) {
    al[k] = dot(h.stps.select(0, k), q) * h.ro.select(0, k) * h.valid.select(0, k);
    q = q - h.dirs.select(0, k) * al[k];
  }
  Tensor r = q * H_diag;
  for (int64_t k = first; k < H; ++k) {
    const Tensor be = dot(h.dirs.select(0, k), r) * h.ro.select(0, k);
    r = r + h.stps.select(0, k) * ((al[k] - be) * h.valid.select(0, k));
  }
  return r;
}

}  // namespace

Tensor LBFGS::step(LossClosure closure) {
  KILN_CHECK(static_cast<bool>(closure), "LBFGS::step",
             "expected a closure that reevaluates the model and returns the loss");
  KILN_CHECK(param_groups_.size() == 1, "LBFGS::step", "expected one parameter group, got ",
             param_groups_.size());
  autograd::NoGradGuard no_grad;
  const auto& group = param_groups_[0].options_as<LBFGSOptions>();
  const int64_t max_iter = group.max_iter();
  const int64_t max_eval = group.effective_max_eval();
  const double tolerance_grad = group.tolerance_grad();
  const double tolerance_change = group.tolerance_change();
  const auto& line_search_fn = group.line_search_fn();
  const int64_t history_size = group.history_size();
  // Under tracing the step is one straight line: a single iteration (the closure evaluated once,
  // as each of eager's iterations does) whose data-dependent choices are selects.
  const bool traced = detail::tracing();
  refuse_trace_if(line_search_fn.has_value(), "LBFGS::step",
                  "the strong-Wolfe line search evaluates the closure a data-dependent number of "
                  "times; trace LBFGS without line_search_fn");
  refuse_trace_if(max_iter != 1, "LBFGS::step",
                  "with max_iter > 1 it re-evaluates the closure until a data-dependent stop; "
                  "trace a step of max_iter = 1 and call it max_iter times");
  const detail::Hyper lr = detail::hyper(
      this, "LBFGS.lr",
      detail::option_reader<LBFGSOptions>(this, 0, [](const auto& o) { return o.lr(); }));

  // LBFGS has only global state, registered as the first parameter's.
  const Tensor& first_param = param_groups_[0].params()[0];
  ParamState& state = state_of(first_param);
  auto get_int_or = [&](const char* k) {
    auto it = state.find(k);
    return it == state.end() ? int64_t{0} : get_int(state, k, "LBFGS::step");
  };
  int64_t func_evals = get_int_or("func_evals");
  int64_t state_n_iter = get_int_or("n_iter");
  auto save_counters = [&] {
    state["func_evals"] = func_evals;
    state["n_iter"] = state_n_iter;
  };

  // evaluate initial f(x) and df/dx
  Tensor orig_loss = evaluate_closure(closure);
  double loss = traced ? 0.0 : scalar(orig_loss);  // a number only where eager branches on it
  int64_t current_evals = 1;
  func_evals += 1;

  Tensor flat_grad = gather_flat_grad();
  const TensorOptions like(first_param.dtype());
  // optimal condition: nothing moves (under tracing, every update below is masked by it). As
  // PyTorch's `max <= tolerance` test, a NaN gradient is not optimal.
  const Tensor active =
      logical_not(le(kiln::max(kiln::abs(flat_grad)), full(Dims{}, tolerance_grad, like)));
  // The host counters follow eager even under tracing (read without recording).
  const bool active_now = [&] {
    dispatch::TraceGuard pause(nullptr);
    return active.item<bool>();
  }();
  if (!active_now && !traced) {
    save_counters();
    return orig_loss;
  }

  // State tensors, created on the first step and then updated in place (a traced step's in-out
  // values).
  const int64_t n = numel();
  auto tensor_state = [&](const char* key, Dims sizes, double fill) -> Tensor {
    auto it = state.find(key);
    if (it != state.end()) {
      if (const Tensor* t = std::get_if<Tensor>(&it->second); t && t->sizes() == sizes) return *t;
    }
    Tensor t = full(sizes, fill, like);
    state[key] = t;
    return t;
  };
  Tensor d_state = tensor_state("d", {n}, 0), t_state = tensor_state("t", {}, 0),
         H_diag_state = tensor_state("H_diag", {}, 1),
         prev_flat_grad_state = tensor_state("prev_flat_grad", {n}, 0);
  History saved{tensor_state("old_dirs", {history_size, n}, 0),
                tensor_state("old_stps", {history_size, n}, 0),
                tensor_state("ro", {history_size}, 0), tensor_state("valid", {history_size}, 0)};
  Tensor d = d_state, t = t_state, H_diag = H_diag_state, prev_flat_grad = prev_flat_grad_state;
  History h = saved;
  double prev_loss = state.count("prev_loss") ? get_double(state, "prev_loss", "LBFGS::step") : 0.0;

  // The first iteration's form differs: a host guard (a traced later step re-traces once).
  const void* self = this;
  detail::guard_host(self, "LBFGS.first_step", [this] {
    const ParamState& s = state_of(param_groups_[0].params()[0]);
    auto it = s.find("n_iter");
    return it == s.end() || std::get<int64_t>(it->second) == 0 ? 1.0 : 0.0;
  });

  int64_t n_iter = 0;
  // optimize for a max of max_iter iterations
  while (n_iter < max_iter) {
    // keep track of nb of iterations
    n_iter += 1;
    const bool first = state_n_iter == 0;
    if (active_now) state_n_iter += 1;

    // compute gradient descent direction
    if (first) {
      d = neg(flat_grad);
      h = {zeros_like(h.dirs), zeros_like(h.stps), zeros_like(h.ro), zeros_like(h.valid)};
      H_diag = ones(Dims{}, like);
    } else {
      // do lbfgs update (update memory): only where y·s > 1e-10
      Tensor y = sub(flat_grad, prev_flat_grad);
      Tensor s = mul(d, t);
      Tensor ys = dot(y, s);
      Tensor update = gt(ys, full(Dims{}, 1e-10, like));
      if (traced) {
        h = push_if(h, update, y, s, ys);
      } else if (update.item<bool>()) {
        push(h, y, s, ys);
      }
      // update scale of initial Hessian approximation
      H_diag = where(update, ys / dot(y, y), H_diag);
      // the approximate (L-BFGS) inverse Hessian multiplied by the gradient
      const int64_t first_row =
          traced ? 0 : history_size - static_cast<int64_t>(sum(h.valid).item<double>());
      d = two_loop(h, flat_grad, H_diag, first_row);
    }
    prev_flat_grad = flat_grad.clone();
    prev_loss = loss;

    // compute step length: reset initial guess for step size
    t = first ? minimum(reciprocal(sum(kiln::abs(flat_grad))), ones(Dims{}, like))
              : ones(Dims{}, like);
    // times lr (under tracing the float64 input, converted: t keeps the parameters' dtype)
    t = lr.traced.defined() ? mul(t, lr.traced.to(t.dtype())) : mul(t, lr.value);

    // directional derivative; below tolerance, no step
    const Tensor gtd = dot(flat_grad, d);  // g * d
    // (PyTorch breaks on `gtd > -tolerance`: a NaN moves on)
    const Tensor moves = logical_not(gt(gtd, full(Dims{}, -tolerance_change, like)));
    if (!traced && !moves.item<bool>()) break;

    // optional line search: user function
    int64_t ls_func_evals = 0;
    if (line_search_fn) {
      std::vector<Tensor> x_init = clone_params();
      ObjFunc obj_func = [&](double step) {
        return directional_evaluate(closure, x_init, step, d);
      };
      // The initial step in double, as PyTorch's (lr a Python float): t holds it rounded to the
      // parameters' dtype.
      const double t0 =
          first ? std::min(1., 1. / scalar(sum(kiln::abs(flat_grad)))) * lr.value : lr.value;
      WolfeResult r = strong_wolfe(obj_func, t0, d, loss, flat_grad, scalar(gtd));
      loss = r.f;
      flat_grad = r.g;
      t = full(Dims{}, r.t, like);
      ls_func_evals = r.func_evals;
      add_grad(r.t, d);
    } else {
      // no line search, simply move with fixed-step (masked under tracing)
      add_grad(traced ? t * logical_and(active, moves).to(t.dtype()) : t, d);
      if (n_iter != max_iter) {
        // re-evaluate function only if not in last iteration (in a stochastic setting there is
        // no use in re-evaluating it here)
        loss = scalar(evaluate_closure(closure));
        flat_grad = gather_flat_grad();
        ls_func_evals = 1;
      }
    }
    // update func eval
    current_evals += ls_func_evals;
    func_evals += ls_func_evals;

    // check conditions (eager only: a traced step is one iteration)
    if (n_iter == max_iter) break;
    if (current_evals >= max_eval) break;
    // optimal condition
    if (abs_max(flat_grad) <= tolerance_grad) break;
    // lack of progress
    if (abs_max(mul(d, t)) <= tolerance_change) break;
    if (std::abs(loss - prev_loss) < tolerance_change) break;
  }

  save_counters();
  // The new state, in place; under tracing nothing changes where the gradient was already
  // optimal (eager returned above).
  auto keep = [&](Tensor& dst, const Tensor& v) {
    if (!v.is_same(dst)) copy_(dst, traced ? where(active, v, dst) : v);
  };
  keep(d_state, d);
  keep(t_state, t);
  keep(H_diag_state, H_diag);
  keep(prev_flat_grad_state, prev_flat_grad);
  keep(saved.dirs, h.dirs);
  keep(saved.stps, h.stps);
  keep(saved.ro, h.ro);
  keep(saved.valid, h.valid);
  if (!traced) state["prev_loss"] = prev_loss;
  return orig_loss;
}

void LBFGS::add_grad(const Tensor& step_size, const Tensor& update) {
  int64_t offset = 0;
  for (auto& p : param_groups_[0].params()) {
    const int64_t numel = p.numel();
    add_(p, mul(update.narrow(0, offset, numel).reshape(p.sizes()), step_size));
    offset += numel;
  }
}

}  // namespace kiln::optim
