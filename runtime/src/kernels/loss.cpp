// Losses: cross_entropy / nll_loss (class indices) and the pointwise mse / smooth_l1 /
// binary_cross_entropy_with_logits, forward and backward.
//
// Per-sample (or per-element) values are computed in parallel; reductions sum fixed chunks in
// double and then add the chunk sums in order, so results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kiln/runtime/cuda/eager.h"
#include "kiln/runtime/cuda/nn.h"
#include "kiln/runtime/kernels/loss.h"
#include "kiln/runtime/thread_pool.h"
#include "nn_common.h"

namespace kiln::kernels {
namespace {

using namespace nn_detail;

constexpr int64_t kChunk = 8192;

// Σ_i f(i) over [0, n) in double, deterministic (fixed chunks, summed in order).
template <typename F>
double chunked_sum(int64_t n, F&& f) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> part(static_cast<size_t>(chunks), 0.0);
  parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double s = 0;
      for (int64_t i = c * kChunk, e = std::min(n, (c + 1) * kChunk); i < e; ++i) s += f(i);
      part[c] = s;
    }
  });
  double total = 0;
  for (double v : part) total += v;
  return total;
}

template <typename F>
void parallel_elems(int64_t n, F&& f) {
  parallel_for(0, n, kChunk, [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) f(i);
  });
}

void check_reduced_out(std::string_view op, const TensorImpl& out, LossReduction r,
                       std::span<const int64_t> elem_shape, std::string_view what) {
  if (r == LossReduction::None) {
    check_shape(op, out, elem_shape, what);
  } else {
    KILN_CHECK(out.numel() == 1, op, "expected ", what, " with 1 element (reduction ",
               r == LossReduction::Mean ? "mean" : "sum", "), got ", dims_str(out.sizes()));
  }
}

// Reads the one value of a 1-element tensor.
double scalar_value(const TensorImpl& t) {
  return read_param(&t)[0];
}

void write_scalar(TensorImpl& out, double v) {
  const std::vector<double> one{v};
  auto d = from_blob(const_cast<double*>(one.data()), out.sizes(), DType::Float64,
                     contiguous_strides(out.sizes()));
  copy_(out, *d);
}

// =============================================================================================
// Class-index losses

struct ClassGeom {
  int64_t N = 1, C = 0, S = 1;  // logits element (n, c, s) at (n*C + c)*S + s
  Dims sample_shape;            // target's shape
  int64_t samples() const { return N * S; }
};

ClassGeom class_geom(std::string_view op, std::span<const int64_t> in,
                     std::span<const int64_t> tg) {
  ClassGeom g;
  KILN_CHECK(!in.empty(), op,
             "expected input of at least 1 dim ([C], [N, C] or [N, C, d...]), got ", dims_str(in));
  if (in.size() == 1) {
    g.C = in[0];
    KILN_CHECK(tg.empty(), op, "expected a 0-dim target for input ", dims_str(in), ", got ",
               dims_str(tg));
  } else {
    g.N = in[0];
    g.C = in[1];
    Dims want{in[0]};
    for (size_t d = 2; d < in.size(); ++d) {
      want.push_back(in[d]);
      g.S *= in[d];
    }
    KILN_CHECK(Dims(tg) == want, op, "expected target of shape ", dims_str(want), " for input ",
               dims_str(in), ", got ", dims_str(tg));
  }
  g.sample_shape = Dims(tg);
  KILN_CHECK(g.C > 0 || g.samples() == 0, op, "expected at least one class, got input ",
             dims_str(in));
  return g;
}

struct ClassArgs {
  ClassGeom g;
  TensorImplPtr target;   // int64, contiguous
  std::vector<double> w;  // class weights (empty = all 1)
  double wsum = 0;        // Σ_c w[c]
};

ClassArgs class_args(std::string_view op, const TensorImpl& input, const TensorImpl& target,
                     const CrossEntropyOptions& opt) {
  ClassArgs a;
  a.g = class_geom(op, input.sizes(), target.sizes());
  check_floating(op, input, "input");
  KILN_CHECK(is_integral(target.dtype(), false), op,
             "expected target of an integer dtype (class indices), got ",
             dtype_name(target.dtype()));
  KILN_CHECK(opt.label_smoothing >= 0.0 && opt.label_smoothing <= 1.0, op,
             "expected label_smoothing in [0, 1], got ", opt.label_smoothing);
  if (opt.weight) {
    check_floating(op, *opt.weight, "weight");
    check_shape(op, *opt.weight, Dims{a.g.C}, "weight");
    a.w = read_param(opt.weight);
    for (double v : a.w) a.wsum += v;
  } else {
    a.wsum = static_cast<double>(a.g.C);
  }
  a.target =
      target.dtype() == DType::Int64 ? views::contiguous(target) : to_dtype(&target, DType::Int64);
  const int64_t* t = a.target->data_ptr<int64_t>();
  for (int64_t i = 0; i < a.target->numel(); ++i) {
    KILN_CHECK(t[i] == opt.ignore_index || (t[i] >= 0 && t[i] < a.g.C), op,
               "expected target class indices in [0, ", a.g.C, ") or ignore_index (",
               opt.ignore_index, "), got ", t[i], " (out of range)");
  }
  return a;
}

// Per-sample loss and, when `grad_scale` is given, its gradient row. logits=true: input holds
// logits (cross_entropy); false: log-probabilities (nll_loss).
template <typename T>
struct ClassKernel {
  const ClassArgs& a;
  const CrossEntropyOptions& opt;
  bool logits;
  const T* x;

  double weight_of(int64_t c) const { return a.w.empty() ? 1.0 : a.w[c]; }

  // Returns the loss of sample i (0 if ignored); sets lse for reuse.
  double loss(int64_t i, double& lse) const {
    const int64_t t = a.target->data_ptr<int64_t>()[i];
    if (t == opt.ignore_index) return 0.0;
    const int64_t n = i / a.g.S, s = i % a.g.S, C = a.g.C, S = a.g.S;
    const T* row = x + n * C * S + s;
    if (!logits) {
      lse = 0.0;
      return -weight_of(t) * static_cast<double>(row[t * S]);
    }
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t c = 0; c < C; ++c) m = std::max(m, static_cast<double>(row[c * S]));
    double se = 0;
    if (std::isinf(m)) {
      lse = m;  // all -inf (or a +inf): log-softmax is NaN/inf as in PyTorch
    } else {
      for (int64_t c = 0; c < C; ++c) se += std::exp(static_cast<double>(row[c * S]) - m);
      lse = m + std::log(se);
    }
    const double eps = opt.label_smoothing;
    double l = -weight_of(t) * (static_cast<double>(row[t * S]) - lse);
    if (eps > 0) {
      double smooth = 0;
      for (int64_t c = 0; c < C; ++c)
        smooth += weight_of(c) * (lse - static_cast<double>(row[c * S]));
      l = (1 - eps) * l + eps / static_cast<double>(C) * smooth;
    }
    return l;
  }

  void grad(int64_t i, double scale, T* gx) const {
    const int64_t n = i / a.g.S, s = i % a.g.S, C = a.g.C, S = a.g.S;
    T* grow = gx + n * C * S + s;
    const int64_t t = a.target->data_ptr<int64_t>()[i];
    if (t == opt.ignore_index) {
      for (int64_t c = 0; c < C; ++c) grow[c * S] = T(0);
      return;
    }
    const double wt = weight_of(t);
    if (!logits) {
      for (int64_t c = 0; c < C; ++c) grow[c * S] = T(0);
      grow[t * S] = static_cast<T>(-wt * scale);
      return;
    }
    double lse = 0;
    loss(i, lse);
    const T* row = x + n * C * S + s;
    const double eps = opt.label_smoothing, k1 = (1 - eps) * wt, k2 = eps / static_cast<double>(C);
    for (int64_t c = 0; c < C; ++c) {
      const double p = std::exp(static_cast<double>(row[c * S]) - lse);
      double gv = k1 * (p - (c == t ? 1.0 : 0.0));
      if (eps > 0) gv += k2 * (p * a.wsum - weight_of(c));
      grow[c * S] = static_cast<T>(gv * scale);
    }
  }

  // Σ w[t_i] over the non-ignored samples (mean's denominator).
  double denominator() const {
    const int64_t* tg = a.target->data_ptr<int64_t>();
    double d = 0;
    for (int64_t i = 0; i < a.g.samples(); ++i)
      if (tg[i] != opt.ignore_index) d += weight_of(tg[i]);
    return d;
  }
};

// The checks of class_args that need no values (its target range check reads the targets, which
// the CUDA kernels do on the device), for tensors on the device.
ClassGeom check_class_shapes(std::string_view op, const TensorImpl& input, const TensorImpl& target,
                             const CrossEntropyOptions& opt) {
  const ClassGeom g = class_geom(op, input.sizes(), target.sizes());
  KILN_CHECK(opt.label_smoothing >= 0.0 && opt.label_smoothing <= 1.0, op,
             "expected label_smoothing in [0, 1], got ", opt.label_smoothing);
  if (opt.weight) check_shape(op, *opt.weight, Dims{g.C}, "weight");
  return g;
}

bool on_device(std::initializer_list<const TensorImpl*> tensors) {
  for (const TensorImpl* t : tensors) {
    if (t && t->device() != Device::CPU) return true;
  }
  return false;
}

void class_loss_forward(std::string_view op, bool logits, const TensorImpl& input,
                        const TensorImpl& target, const CrossEntropyOptions& opt, TensorImpl& out) {
  if (on_device({&input, &target, &out, opt.weight})) [[unlikely]] {
    const ClassGeom g = check_class_shapes(op, input, target, opt);
    check_reduced_out(op, out, opt.reduction, g.sample_shape, "out");
    return cuda::cross_entropy_out(input, target, opt, !logits, out);
  }
  const ClassArgs a = class_args(op, input, target, opt);
  check_same_dtype(op, input, out, "out");
  check_reduced_out(op, out, opt.reduction, a.g.sample_shape, "out");
  const DType cd = compute_dtype(input.dtype());
  auto x = input_as(input, cd);
  dispatch_fd(cd, [&](auto tag) {
    using T = decltype(tag);
    ClassKernel<T> k{a, opt, logits, x->data_ptr<T>()};
    const int64_t n = a.g.samples();
    if (opt.reduction == LossReduction::None) {
      OutTarget y(&out, cd);
      T* yp = y.get<T>();
      parallel_elems(n, [&](int64_t i) {
        double lse;
        yp[i] = static_cast<T>(k.loss(i, lse));
      });
      y.finish();
      return;
    }
    double total = chunked_sum(n, [&](int64_t i) {
      double lse;
      return k.loss(i, lse);
    });
    if (opt.reduction == LossReduction::Mean) total /= k.denominator();
    write_scalar(out, total);
  });
}

void class_loss_backward(std::string_view op, bool logits, const TensorImpl& grad_output,
                         const TensorImpl& input, const TensorImpl& target,
                         const CrossEntropyOptions& opt, TensorImpl& grad_input) {
  if (on_device({&grad_output, &input, &target, &grad_input, opt.weight})) [[unlikely]] {
    const ClassGeom g = check_class_shapes(op, input, target, opt);
    check_shape(op, grad_input, input.sizes(), "grad_input");
    check_reduced_out(op, grad_output, opt.reduction, g.sample_shape, "grad_output");
    return cuda::cross_entropy_backward_out(grad_output, input, target, opt, !logits, grad_input);
  }
  const ClassArgs a = class_args(op, input, target, opt);
  check_same_dtype(op, input, grad_output, "grad_output");
  check_same_dtype(op, input, grad_input, "grad_input");
  check_shape(op, grad_input, input.sizes(), "grad_input");
  check_reduced_out(op, grad_output, opt.reduction, a.g.sample_shape, "grad_output");
  const DType cd = compute_dtype(input.dtype());
  auto x = input_as(input, cd);
  auto gy = input_as(grad_output, cd);
  OutTarget gx(&grad_input, cd);
  dispatch_fd(cd, [&](auto tag) {
    using T = decltype(tag);
    ClassKernel<T> k{a, opt, logits, x->data_ptr<T>()};
    const T* g = gy->data_ptr<T>();
    double scale = 0;
    if (opt.reduction != LossReduction::None) {
      scale = static_cast<double>(g[0]);
      if (opt.reduction == LossReduction::Mean) scale /= k.denominator();
    }
    T* gp = gx.get<T>();
    parallel_elems(a.g.samples(), [&](int64_t i) {
      k.grad(i, opt.reduction == LossReduction::None ? static_cast<double>(g[i]) : scale, gp);
    });
  });
  gx.finish();
}

// =============================================================================================
// Pointwise losses

struct PointArgs {
  DType cd;
  TensorImplPtr x, y, w, pw;  // contiguous, compute dtype; w / pw broadcast-materialized
};

TensorImplPtr broadcast_materialize(std::string_view op, const TensorImpl* t,
                                    std::span<const int64_t> shape, DType cd,
                                    std::string_view what) {
  if (!t) return {};
  check_floating(op, *t, what);
  const Dims st = broadcast_strides(*t, shape, op);
  auto v = make_view(*t, Dims(shape), st, t->storage_offset());
  return to_dtype(v.get(), cd);
}

PointArgs point_args(std::string_view op, const TensorImpl& input, const TensorImpl& target,
                     const TensorImpl* weight = nullptr, const TensorImpl* pos_weight = nullptr) {
  check_floating(op, input, "input");
  check_same_dtype(op, input, target, "target");
  check_shape(op, target, input.sizes(), "target (same as input)");
  PointArgs a;
  a.cd = compute_dtype(input.dtype());
  a.x = input_as(input, a.cd);
  a.y = input_as(target, a.cd);
  a.w = broadcast_materialize(op, weight, input.sizes(), a.cd, "weight");
  a.pw = broadcast_materialize(op, pos_weight, input.sizes(), a.cd, "pos_weight");
  return a;
}

// loss(i) per element -> out (none) or its sum / mean.
template <typename T, typename F>
void point_forward(std::string_view op, const PointArgs& a, const TensorImpl& input,
                   LossReduction r, TensorImpl& out, F&& loss) {
  check_same_dtype(op, input, out, "out");
  check_reduced_out(op, out, r, input.sizes(), "out");
  const int64_t n = input.numel();
  if (r == LossReduction::None) {
    OutTarget y(&out, a.cd);
    T* yp = y.get<T>();
    parallel_elems(n, [&](int64_t i) { yp[i] = static_cast<T>(loss(i)); });
    y.finish();
    return;
  }
  double total = chunked_sum(n, [&](int64_t i) { return loss(i); });
  if (r == LossReduction::Mean) total /= static_cast<double>(n);  // NaN for empty, as PyTorch
  write_scalar(out, total);
}

// grad_input[i] = g_i · dloss(i), g_i from grad_output by reduction.
template <typename T, typename F>
void point_backward(std::string_view op, const PointArgs& a, const TensorImpl& grad_output,
                    const TensorImpl& input, LossReduction r, TensorImpl& grad_input, F&& dloss) {
  check_same_dtype(op, input, grad_output, "grad_output");
  check_same_dtype(op, input, grad_input, "grad_input");
  check_shape(op, grad_input, input.sizes(), "grad_input");
  check_reduced_out(op, grad_output, r, input.sizes(), "grad_output");
  const int64_t n = input.numel();
  OutTarget gx(&grad_input, a.cd);
  T* gp = gx.get<T>();
  if (r == LossReduction::None) {
    auto gy = input_as(grad_output, a.cd);
    const T* g = gy->data_ptr<T>();
    parallel_elems(n, [&](int64_t i) { gp[i] = static_cast<T>(g[i] * dloss(i)); });
  } else {
    double s = scalar_value(grad_output);
    if (r == LossReduction::Mean) s /= static_cast<double>(n);
    parallel_elems(n, [&](int64_t i) { gp[i] = static_cast<T>(s * dloss(i)); });
  }
  gx.finish();
}

inline double softplus_neg(double x) {  // log(1 + e^{-x}), stable
  return std::log1p(std::exp(-std::abs(x))) + std::max(-x, 0.0);
}
inline double sigmoid(double x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  const double e = std::exp(x);
  return e / (1.0 + e);
}

}  // namespace

// =============================================================================================

Dims cross_entropy_output_shape(std::span<const int64_t> input, std::span<const int64_t> target,
                                LossReduction reduction) {
  const ClassGeom g = class_geom("cross_entropy", input, target);
  return reduction == LossReduction::None ? g.sample_shape : Dims{};
}

void cross_entropy_out(const TensorImpl& input, const TensorImpl& target,
                       const CrossEntropyOptions& opt, TensorImpl& out) {
  class_loss_forward("cross_entropy", true, input, target, opt, out);
}
void cross_entropy_backward_out(const TensorImpl& grad_output, const TensorImpl& input,
                                const TensorImpl& target, const CrossEntropyOptions& opt,
                                TensorImpl& grad_input) {
  class_loss_backward("cross_entropy_backward", true, grad_output, input, target, opt, grad_input);
}
void nll_loss_out(const TensorImpl& input, const TensorImpl& target, const CrossEntropyOptions& opt,
                  TensorImpl& out) {
  class_loss_forward("nll_loss", false, input, target, opt, out);
}
void nll_loss_backward_out(const TensorImpl& grad_output, const TensorImpl& input,
                           const TensorImpl& target, const CrossEntropyOptions& opt,
                           TensorImpl& grad_input) {
  class_loss_backward("nll_loss_backward", false, grad_output, input, target, opt, grad_input);
}

Dims pointwise_loss_output_shape(std::span<const int64_t> input, LossReduction reduction) {
  return reduction == LossReduction::None ? Dims(input) : Dims{};
}

void mse_loss_out(const TensorImpl& input, const TensorImpl& target, LossReduction r,
                  TensorImpl& out) {
  constexpr std::string_view op = "mse_loss";
  if (input.device() != Device::CPU || target.device() != Device::CPU) [[unlikely]] {
    return cuda::mse_loss_out(input, target, static_cast<int>(r), out);
  }
  const PointArgs a = point_args(op, input, target);
  dispatch_fd(a.cd, [&](auto tag) {
    using T = decltype(tag);
    const T* x = a.x->data_ptr<T>();
    const T* y = a.y->data_ptr<T>();
    point_forward<T>(op, a, input, r, out, [&](int64_t i) {
      const double d = static_cast<double>(x[i]) - static_cast<double>(y[i]);
      return d * d;
    });
  });
}

void mse_loss_backward_out(const TensorImpl& grad_output, const TensorImpl& input,
                           const TensorImpl& target, LossReduction r, TensorImpl& grad_input) {
  constexpr std::string_view op = "mse_loss_backward";
  if (input.device() != Device::CPU || grad_output.device() != Device::CPU) [[unlikely]] {
    return cuda::mse_loss_backward_out(grad_output, input, target, static_cast<int>(r), grad_input);
  }
  const PointArgs a = point_args(op, input, target);
  dispatch_fd(a.cd, [&](auto tag) {
    using T = decltype(tag);
    const T* x = a.x->data_ptr<T>();
    const T* y = a.y->data_ptr<T>();
    point_backward<T>(op, a, grad_output, input, r, grad_input, [&](int64_t i) {
      return 2.0 * (static_cast<double>(x[i]) - static_cast<double>(y[i]));
    });
  });
}

void smooth_l1_loss_out(const TensorImpl& input, const TensorImpl& target, LossReduction r,
                        double beta, TensorImpl& out) {
  constexpr std::string_view op = "smooth_l1_loss";
  KILN_CHECK(beta >= 0, op, "expected beta >= 0, got ", beta);
  const PointArgs a = point_args(op, input, target);
  dispatch_fd(a.cd, [&](auto tag) {
    using T = decltype(tag);
    const T* x = a.x->data_ptr<T>();
    const T* y = a.y->data_ptr<T>();
    point_forward<T>(op, a, input, r, out, [&](int64_t i) {
      const double d = std::abs(static_cast<double>(x[i]) - static_cast<double>(y[i]));
      return d < beta ? 0.5 * d * d / beta : d - 0.5 * beta;
    });
  });
}

void smooth_l1_loss_backward_out(const TensorImpl& grad_output, const TensorImpl& input,
                                 const TensorImpl& target, LossReduction r, double beta,
                                 TensorImpl& grad_input) {
  constexpr std::string_view op = "smooth_l1_loss_backward";
  KILN_CHECK(beta >= 0, op, "expected beta >= 0, got ", beta);
  const PointArgs a = point_args(op, input, target);
  dispatch_fd(a.cd, [&](auto tag) {
    using T = decltype(tag);
    const T* x = a.x->data_ptr<T>();
    const T* y = a.y->data_ptr<T>();
    point_backward<T>(op, a, grad_output, input, r, grad_input, [&](int64_t i) {
      const double d = static_cast<double>(x[i]) - static_cast<double>(y[i]);
      if (std::abs(d) < beta) return d / beta;
      return d > 0 ? 1.0 : d < 0 ? -1.0 : 0.0;
    });
  });
}

void binary_cross_entropy_with_logits_out(const TensorImpl& input, const TensorImpl& target,
                                          const TensorImpl* weight, const TensorImpl* pos_weight,
                                          LossReduction r, TensorImpl& out) {
  constexpr std::string_view op = "binary_cross_entropy_with_logits";
  const PointArgs a = point_args(op, input, target, weight, pos_weight);
  dispatch_fd(a.cd, [&](auto tag) {
    using T = decltype(tag);
    const T* x = a.x->data_ptr<T>();
    const T* y = a.y->data_ptr<T>();
    const T* w = a.w ? a.w->data_ptr<T>() : nullptr;
    const T* pw = a.pw ? a.pw->data_ptr<T>() : nullptr;
    point_forward<T>(op, a, input, r, out, [&](int64_t i) {
      const double xv = x[i], yv = y[i];
      const double lw = pw ? 1.0 + (static_cast<double>(pw[i]) - 1.0) * yv : 1.0;
      const double l = (1.0 - yv) * xv + lw * softplus_neg(xv);
      return w ? l * static_cast<double>(w[i]) : l;
    });
  });
}

void binary_cross_entropy_with_logits_backward_out(const TensorImpl& grad_output,
                                                   const TensorImpl& input,
                                                   const TensorImpl& target,
                                                   const TensorImpl* weight,
                                                   const TensorImpl* pos_weight, LossReduction r,
                                                   TensorImpl& grad_input) {
  constexpr std::string_view op = "binary_cross_entropy_with_logits_backward";
  const PointArgs a = point_args(op, input, target, weight, pos_weight);
  dispatch_fd(a.cd, [&](auto tag) {
    using T = decltype(tag);
    const T* x = a.x->data_ptr<T>();
    const T* y = a.y->data_ptr<T>();
    const T* w = a.w ? a.w->data_ptr<T>() : nullptr;
    const T* pw = a.pw ? a.pw->data_ptr<T>() : nullptr;
    point_backward<T>(op, a, grad_output, input, r, grad_input, [&](int64_t i) {
      const double xv = x[i], yv = y[i];
      const double p = pw ? static_cast<double>(pw[i]) : 1.0;
      const double lw = 1.0 + (p - 1.0) * yv;
      const double gv = lw * sigmoid(xv) - p * yv;
      return w ? gv * static_cast<double>(w[i]) : gv;
    });
  });
}

}  // namespace kiln::kernels
