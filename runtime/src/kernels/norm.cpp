// batch_norm / layer_norm / group_norm, forward and backward.
//
// Every normalization is y = x * a + b with per-(channel|row|group) scalars a, b (and a per-element
// weight/bias for layer_norm), so each kernel is: (1) per-plane partial sums, parallel over planes,
// accumulated in double, two passes (mean, then Σ(x-mean)²) for accuracy; (2) per-channel
// coefficients; (3) one vectorizable elementwise pass. Backward likewise: per-plane Σgy and
// Σgy·(x-mean), then gx = k1·gy + k2·x + k3.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kiln/runtime/cuda/nn.h"
#include "kiln/runtime/kernels/norm.h"
#include "kiln/runtime/thread_pool.h"
#include "nn_common.h"

namespace kiln::kernels {
namespace {

using namespace nn_detail;

int64_t grain_for(int64_t work) {
  return std::max<int64_t>(1, 32768 / std::max<int64_t>(work, 1));
}

void check_param(std::string_view op, const TensorImpl* t, std::span<const int64_t> shape,
                 std::string_view what) {
  if (!t) return;
  check_floating(op, *t, what);
  check_shape(op, *t, shape, what);
}

void check_stat(std::string_view op, const TensorImpl* t, int64_t n, std::string_view what) {
  if (!t) return;
  check_floating(op, *t, what);
  check_numel(op, *t, n, what);
}

// y[i] = gy[i]*k1 + x[i]*k2 + k3
template <typename T>
inline void grad_affine(const T* gy, const T* x, T* gx, int64_t n, T k1, T k2, T k3) {
  for (int64_t i = 0; i < n; ++i) gx[i] = gy[i] * k1 + x[i] * k2 + k3;
}

// Per-plane (row of S elements) Σ over planes [0, P) of a [P, S] array.
template <typename T>
void plane_sums(const T* x, int64_t P, int64_t S, std::vector<double>& out) {
  out.assign(static_cast<size_t>(P), 0.0);
  parallel_for(0, P, grain_for(S), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) out[p] = row_sum(x + p * S, S);
  });
}

template <typename T>
void plane_sumsq_dev(const T* x, int64_t P, int64_t S, const std::vector<double>& mean_of_plane,
                     std::vector<double>& out) {
  out.assign(static_cast<size_t>(P), 0.0);
  parallel_for(0, P, grain_for(S), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) out[p] = row_sumsq_dev(x + p * S, S, mean_of_plane[p]);
  });
}

// Σgy and Σgy·(x - shift[p]) per plane.
template <typename T>
void plane_grad_sums(const T* gy, const T* x, int64_t P, int64_t S,
                     const std::vector<double>& shift, std::vector<double>& sg,
                     std::vector<double>& sgx) {
  sg.assign(static_cast<size_t>(P), 0.0);
  sgx.assign(static_cast<size_t>(P), 0.0);
  parallel_for(0, P, grain_for(S), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p)
      row_sum_dot(gy + p * S, x + p * S, S, shift[p], sg[p], sgx[p]);
  });
}

// y[plane] = x[plane] * a[c] + b[c] with c = plane % C.
template <typename T>
void apply_affine_planes(const T* x, T* y, int64_t P, int64_t C, int64_t S,
                         const std::vector<double>& a, const std::vector<double>& b) {
  parallel_for(0, P, grain_for(S), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t c = p % C;
      row_affine(x + p * S, y + p * S, S, static_cast<T>(a[c]), static_cast<T>(b[c]));
    }
  });
}

}  // namespace

// =============================================================================================
// batch_norm

void batch_norm_out(const TensorImpl& input, const TensorImpl* weight, const TensorImpl* bias,
                    TensorImpl* running_mean, TensorImpl* running_var, bool training,
                    double momentum, double eps, TensorImpl& out, TensorImpl* save_mean,
                    TensorImpl* save_invstd) {
  constexpr std::string_view op = "batch_norm";
  KILN_CHECK(input.dim() >= 2, op, "expected input of at least 2 dims (N, C, *), got ",
             dims_str(input.sizes()));
  check_floating(op, input, "input");
  check_same_dtype(op, input, out, "out");
  check_shape(op, out, input.sizes(), "out");
  const int64_t N = input.size(0), C = input.size(1);
  const int64_t S = C == 0 || N == 0 ? 0 : input.numel() / (N * C);
  const Dims cs{C};
  check_param(op, weight, cs, "weight");
  check_param(op, bias, cs, "bias");
  check_param(op, running_mean, cs, "running_mean");
  check_param(op, running_var, cs, "running_var");
  check_stat(op, save_mean, C, "save_mean");
  check_stat(op, save_invstd, C, "save_invstd");
  KILN_CHECK(eps >= 0, op, "expected eps >= 0, got ", eps);
  if (!training) {
    KILN_CHECK(running_mean && running_var, op,
               "expected running_mean and running_var in inference mode, got none");
  }
  if (input.device() == Device::CUDA || out.device() == Device::CUDA) {
    return cuda::batch_norm_out(input, weight, bias, running_mean, running_var, training, momentum,
                                eps, out, save_mean, save_invstd);
  }
  if (input.numel() == 0) {  // no statistics, running ones unchanged; no buffers of C (2^40?)
    if (save_mean) fill_param(*save_mean, 0.0);
    if (save_invstd) fill_param(*save_invstd, 0.0);
    return;
  }
  const int64_t M = N * S;  // values per channel
  if (training) {
    KILN_CHECK(M > 1, op, "expected more than 1 value per channel when training, got input size ",
               dims_str(input.sizes()));
  }
  const std::vector<double> w = read_param(weight), b = read_param(bias);
  std::vector<double> mean(static_cast<size_t>(C), 0.0), invstd(static_cast<size_t>(C), 0.0);
  const DType cd = compute_dtype(input.dtype());
  auto x = input_as(input, cd);
  OutTarget y(&out, cd);
  const int64_t P = N * C;

  dispatch_fd(cd, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x->data_ptr<T>();
    if (training) {
      std::vector<double> ps, pq, pmean(static_cast<size_t>(P));
      plane_sums(xp, P, S, ps);
      for (int64_t c = 0; c < C; ++c) {
        double s = 0;
        for (int64_t n = 0; n < N; ++n) s += ps[n * C + c];
        mean[c] = M > 0 ? s / static_cast<double>(M) : 0.0;
      }
      for (int64_t p = 0; p < P; ++p) pmean[p] = mean[p % C];
      plane_sumsq_dev(xp, P, S, pmean, pq);
      std::vector<double> var(static_cast<size_t>(C), 0.0);
      for (int64_t c = 0; c < C; ++c) {
        double q = 0;
        for (int64_t n = 0; n < N; ++n) q += pq[n * C + c];
        var[c] = M > 0 ? q / static_cast<double>(M) : 0.0;
        invstd[c] = 1.0 / std::sqrt(var[c] + eps);
      }
      if (M > 0 && (running_mean || running_var)) {
        if (running_mean) {
          std::vector<double> rm = read_param(running_mean);
          for (int64_t c = 0; c < C; ++c) rm[c] = (1 - momentum) * rm[c] + momentum * mean[c];
          write_param(*running_mean, rm);
        }
        if (running_var) {
          std::vector<double> rv = read_param(running_var);
          const double unbias = M > 1 ? static_cast<double>(M) / static_cast<double>(M - 1) : 1.0;
          for (int64_t c = 0; c < C; ++c)
            rv[c] = (1 - momentum) * rv[c] + momentum * var[c] * unbias;
          write_param(*running_var, rv);
        }
      }
    } else {
      mean = read_param(running_mean);
      const std::vector<double> rv = read_param(running_var);
      for (int64_t c = 0; c < C; ++c) invstd[c] = 1.0 / std::sqrt(rv[c] + eps);
    }
    std::vector<double> a(static_cast<size_t>(C)), bb(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) {
      a[c] = invstd[c] * (w.empty() ? 1.0 : w[c]);
      bb[c] = (b.empty() ? 0.0 : b[c]) - mean[c] * a[c];
    }
    apply_affine_planes(xp, y.get<T>(), P, C, S, a, bb);
  });
  y.finish();
  if (save_mean) write_param(*save_mean, mean);
  if (save_invstd) write_param(*save_invstd, invstd);
}

void batch_norm_backward_out(const TensorImpl& grad_output, const TensorImpl& input,
                             const TensorImpl* weight, const TensorImpl* running_mean,
                             const TensorImpl* running_var, const TensorImpl* save_mean,
                             const TensorImpl* save_invstd, bool training, double eps,
                             TensorImpl* grad_input, TensorImpl* grad_weight,
                             TensorImpl* grad_bias) {
  constexpr std::string_view op = "batch_norm_backward";
  KILN_CHECK(input.dim() >= 2, op, "expected input of at least 2 dims (N, C, *), got ",
             dims_str(input.sizes()));
  check_floating(op, input, "input");
  check_same_dtype(op, input, grad_output, "grad_output");
  check_shape(op, grad_output, input.sizes(), "grad_output");
  const int64_t N = input.size(0), C = input.size(1);
  const int64_t S = C == 0 || N == 0 ? 0 : input.numel() / (N * C);
  const Dims cs{C};
  check_param(op, weight, cs, "weight");
  if (grad_input) {
    check_same_dtype(op, input, *grad_input, "grad_input");
    check_shape(op, *grad_input, input.sizes(), "grad_input");
  }
  check_param(op, grad_weight, cs, "grad_weight");
  check_param(op, grad_bias, cs, "grad_bias");
  if (input.device() == Device::CUDA || grad_output.device() == Device::CUDA) {
    return cuda::batch_norm_backward_out(grad_output, input, weight, running_mean, running_var,
                                         save_mean, save_invstd, training, eps, grad_input,
                                         grad_weight, grad_bias);
  }
  std::vector<double> mean, invstd;
  if (training) {
    KILN_CHECK(save_mean && save_invstd, op,
               "expected save_mean and save_invstd in training mode, got none");
    check_stat(op, save_mean, C, "save_mean");
    check_stat(op, save_invstd, C, "save_invstd");
    mean = read_param(save_mean);
    invstd = read_param(save_invstd);
  } else {
    KILN_CHECK(running_mean && running_var, op,
               "expected running_mean and running_var in inference mode, got none");
    check_param(op, running_mean, cs, "running_mean");
    check_param(op, running_var, cs, "running_var");
    mean = read_param(running_mean);
    const std::vector<double> rv = read_param(running_var);
    invstd.resize(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) invstd[c] = 1.0 / std::sqrt(rv[c] + eps);
  }
  const std::vector<double> w = read_param(weight);
  const int64_t P = N * C, M = N * S;
  const DType cd = compute_dtype(input.dtype());
  auto x = input_as(input, cd);
  auto gy = input_as(grad_output, cd);
  OutTarget gx(grad_input, cd);
  std::vector<double> sum_g(static_cast<size_t>(C), 0.0), sum_gx(static_cast<size_t>(C), 0.0);

  dispatch_fd(cd, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x->data_ptr<T>();
    const T* gp = gy->data_ptr<T>();
    const bool need_sums = grad_weight || grad_bias || (training && grad_input);
    if (need_sums) {
      std::vector<double> pmean(static_cast<size_t>(P)), sg, sgx;
      for (int64_t p = 0; p < P; ++p) pmean[p] = mean[p % C];
      plane_grad_sums(gp, xp, P, S, pmean, sg, sgx);
      for (int64_t p = 0; p < P; ++p) sum_g[p % C] += sg[p], sum_gx[p % C] += sgx[p];
    }
    if (grad_input) {
      std::vector<double> k1(static_cast<size_t>(C)), k2(static_cast<size_t>(C)),
          k3(static_cast<size_t>(C));
      for (int64_t c = 0; c < C; ++c) {
        const double wc = w.empty() ? 1.0 : w[c], is = invstd[c];
        k1[c] = wc * is;
        if (training && M > 0) {
          // gx = w·is·(gy - Σgy/M - (x-μ)·is²·Σgy(x-μ)/M)
          const double t = wc * is * is * is * sum_gx[c] / static_cast<double>(M);
          k2[c] = -t;
          k3[c] = -wc * is * sum_g[c] / static_cast<double>(M) + t * mean[c];
        } else {
          k2[c] = 0.0;
          k3[c] = 0.0;
        }
      }
      T* gxp = gx.get<T>();
      parallel_for(0, P, grain_for(S), [&](int64_t p0, int64_t p1) {
        for (int64_t p = p0; p < p1; ++p) {
          const int64_t c = p % C;
          grad_affine(gp + p * S, xp + p * S, gxp + p * S, S, static_cast<T>(k1[c]),
                      static_cast<T>(k2[c]), static_cast<T>(k3[c]));
        }
      });
    }
  });
  gx.finish();
  if (grad_weight) {
    std::vector<double> v(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) v[c] = sum_gx[c] * invstd[c];
    write_param(*grad_weight, v);
  }
  if (grad_bias) write_param(*grad_bias, sum_g);
}

// =============================================================================================
// layer_norm

namespace {
// Rows M and row length D; checks that input ends with normalized_shape.
void layer_norm_dims(std::string_view op, std::span<const int64_t> in, std::span<const int64_t> ns,
                     int64_t& M, int64_t& D) {
  KILN_CHECK(!ns.empty(), op, "expected a non-empty normalized_shape, got []");
  bool ok = in.size() >= ns.size();
  for (size_t i = 0; ok && i < ns.size(); ++i) ok = in[in.size() - ns.size() + i] == ns[i];
  KILN_CHECK(ok, op, "expected input with trailing dims ", dims_str(ns),
             " (normalized_shape), got ", dims_str(in));
  D = 1;
  for (int64_t s : ns) D *= s;
  M = 1;
  for (size_t i = 0; i + ns.size() < in.size(); ++i) M *= in[i];
}
}  // namespace

Dims layer_norm_stats_shape(std::span<const int64_t> input,
                            std::span<const int64_t> normalized_shape) {
  int64_t M, D;
  layer_norm_dims("layer_norm", input, normalized_shape, M, D);
  Dims s(input);
  for (size_t i = input.size() - normalized_shape.size(); i < input.size(); ++i) s[i] = 1;
  return s;
}

void layer_norm_out(const TensorImpl& input, std::span<const int64_t> normalized_shape,
                    const TensorImpl* weight, const TensorImpl* bias, double eps, TensorImpl& out,
                    TensorImpl* mean_out, TensorImpl* rstd_out) {
  constexpr std::string_view op = "layer_norm";
  int64_t M, D;
  layer_norm_dims(op, input.sizes(), normalized_shape, M, D);
  check_floating(op, input, "input");
  check_same_dtype(op, input, out, "out");
  check_shape(op, out, input.sizes(), "out");
  check_param(op, weight, normalized_shape, "weight");
  check_param(op, bias, normalized_shape, "bias");
  check_stat(op, mean_out, M, "mean");
  check_stat(op, rstd_out, M, "rstd");
  if (input.numel() == 0) {  // no per-row buffers: M may be 2^40 with D = 0 (stats 0/0)
    if (mean_out) fill_param(*mean_out, std::numeric_limits<double>::quiet_NaN());
    if (rstd_out) fill_param(*rstd_out, std::numeric_limits<double>::quiet_NaN());
    return;
  }
  const DType cd = compute_dtype(input.dtype());
  auto x = input_as(input, cd);
  OutTarget y(&out, cd);
  std::vector<double> mean(static_cast<size_t>(M)), rstd(static_cast<size_t>(M));
  const std::vector<double> wd = read_param(weight), bd = read_param(bias);
  dispatch_fd(cd, [&](auto tag) {
    using T = decltype(tag);
    const std::vector<T> w(wd.begin(), wd.end()), b(bd.begin(), bd.end());
    const T* xp = x->data_ptr<T>();
    T* yp = y.get<T>();
    parallel_for(0, M, grain_for(D), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* xr = xp + r * D;
        T* yr = yp + r * D;
        const double mu = row_sum(xr, D) / static_cast<double>(D);
        const double var = row_sumsq_dev(xr, D, mu) / static_cast<double>(D);
        const double rs = 1.0 / std::sqrt(var + eps);
        mean[r] = mu;
        rstd[r] = rs;
        const T a = static_cast<T>(rs), c = static_cast<T>(-mu * rs);
        if (!w.empty() && !b.empty()) {
          for (int64_t i = 0; i < D; ++i) yr[i] = (xr[i] * a + c) * w[i] + b[i];
        } else if (!w.empty()) {
          for (int64_t i = 0; i < D; ++i) yr[i] = (xr[i] * a + c) * w[i];
        } else if (!b.empty()) {
          for (int64_t i = 0; i < D; ++i) yr[i] = (xr[i] * a + c) + b[i];
        } else {
          row_affine(xr, yr, D, a, c);
        }
      }
    });
  });
  y.finish();
  if (mean_out) write_param(*mean_out, mean);
  if (rstd_out) write_param(*rstd_out, rstd);
}

void layer_norm_backward_out(const TensorImpl& grad_output, const TensorImpl& input,
                             std::span<const int64_t> normalized_shape, const TensorImpl& mean_t,
                             const TensorImpl& rstd_t, const TensorImpl* weight,
                             TensorImpl* grad_input, TensorImpl* grad_weight,
                             TensorImpl* grad_bias) {
  constexpr std::string_view op = "layer_norm_backward";
  int64_t M, D;
  layer_norm_dims(op, input.sizes(), normalized_shape, M, D);
  check_floating(op, input, "input");
  check_same_dtype(op, input, grad_output, "grad_output");
  check_shape(op, grad_output, input.sizes(), "grad_output");
  check_stat(op, &mean_t, M, "mean");
  check_stat(op, &rstd_t, M, "rstd");
  check_param(op, weight, normalized_shape, "weight");
  if (grad_input) {
    check_same_dtype(op, input, *grad_input, "grad_input");
    check_shape(op, *grad_input, input.sizes(), "grad_input");
  }
  check_param(op, grad_weight, normalized_shape, "grad_weight");
  check_param(op, grad_bias, normalized_shape, "grad_bias");
  const std::vector<double> mean = read_param(&mean_t), rstd = read_param(&rstd_t);
  const std::vector<double> wd = read_param(weight);
  const DType cd = compute_dtype(input.dtype());
  auto x = input_as(input, cd);
  auto gy = input_as(grad_output, cd);
  OutTarget gx(grad_input, cd);
  std::vector<double> gw_acc, gb_acc;
  dispatch_fd(cd, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x->data_ptr<T>();
    const T* gp = gy->data_ptr<T>();
    const std::vector<T> w(wd.begin(), wd.end());
    if (grad_input) {
      T* gxp = gx.get<T>();
      parallel_for(0, M, grain_for(D), [&](int64_t r0, int64_t r1) {
        std::vector<T> a(static_cast<size_t>(w.empty() ? 0 : D));
        for (int64_t r = r0; r < r1; ++r) {
          const T* xr = xp + r * D;
          const T* gr = gp + r * D;
          const T* ar = gr;
          if (!w.empty()) {
            for (int64_t i = 0; i < D; ++i) a[i] = gr[i] * w[i];
            ar = a.data();
          }
          double sa = 0, sax = 0;
          row_sum_dot(ar, xr, D, mean[r], sa, sax);
          // gx = rs·(a - Σa/D - (x-μ)·rs²·Σa(x-μ)/D)
          const double rs = rstd[r], Dd = static_cast<double>(D);
          const double t = rs * rs * rs * sax / Dd;
          const T k2 = static_cast<T>(-t), k3 = static_cast<T>(-rs * sa / Dd + t * mean[r]);
          grad_affine(ar, xr, gxp + r * D, D, static_cast<T>(rs), k2, k3);
        }
      });
    }
    if (grad_weight || grad_bias) {
      // Partial sums per thread chunk, then reduced.
      const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(num_threads(), M));
      std::vector<double> pw(static_cast<size_t>(chunks * D), 0.0),
          pb(static_cast<size_t>(chunks * D), 0.0);
      parallel_for(0, chunks, 1, [&](int64_t k0, int64_t k1) {
        for (int64_t k = k0; k < k1; ++k) {
          double* wk = pw.data() + k * D;
          double* bk = pb.data() + k * D;
          for (int64_t r = M * k / chunks; r < M * (k + 1) / chunks; ++r) {
            const T* xr = xp + r * D;
            const T* gr = gp + r * D;
            const T mu = static_cast<T>(mean[r]), rs = static_cast<T>(rstd[r]);
            for (int64_t i = 0; i < D; ++i) {
              wk[i] += static_cast<double>(gr[i] * ((xr[i] - mu) * rs));
              bk[i] += static_cast<double>(gr[i]);
            }
          }
        }
      });
      gw_acc.assign(static_cast<size_t>(D), 0.0);
      gb_acc.assign(static_cast<size_t>(D), 0.0);
      for (int64_t k = 0; k < chunks; ++k)
        for (int64_t i = 0; i < D; ++i) gw_acc[i] += pw[k * D + i], gb_acc[i] += pb[k * D + i];
    }
  });
  gx.finish();
  if (grad_weight) write_param(*grad_weight, gw_acc);
  if (grad_bias) write_param(*grad_bias, gb_acc);
}

// =============================================================================================
// group_norm

namespace {
void group_norm_dims(std::string_view op, const TensorImpl& input, int64_t G, int64_t& N,
                     int64_t& C, int64_t& S) {
  KILN_CHECK(input.dim() >= 2, op, "expected input of at least 2 dims (N, C, *), got ",
             dims_str(input.sizes()));
  N = input.size(0), C = input.size(1);
  KILN_CHECK(G >= 1, op, "expected num_groups >= 1, got ", G);
  KILN_CHECK(C % G == 0 && G <= std::max<int64_t>(C, 1), op, "expected channels (", C,
             ") divisible by num_groups (", G, ") and at least as many");
  S = 1;
  for (int64_t d = 2; d < input.dim(); ++d) S *= input.size(d);
}
}  // namespace

void group_norm_out(const TensorImpl& input, int64_t G, const TensorImpl* weight,
                    const TensorImpl* bias, double eps, TensorImpl& out, TensorImpl* mean_out,
                    TensorImpl* rstd_out) {
  constexpr std::string_view op = "group_norm";
  int64_t N, C, S;
  group_norm_dims(op, input, G, N, C, S);
  check_floating(op, input, "input");
  check_same_dtype(op, input, out, "out");
  check_shape(op, out, input.sizes(), "out");
  const Dims cs{C};
  check_param(op, weight, cs, "weight");
  check_param(op, bias, cs, "bias");
  check_stat(op, mean_out, N * G, "mean");
  check_stat(op, rstd_out, N * G, "rstd");
  if (input.numel() == 0) {  // no per-group buffers: N may be 2^40 with C = 0
    if (mean_out) fill_param(*mean_out, 0.0);
    if (rstd_out) fill_param(*rstd_out, 1.0 / std::sqrt(eps));
    return;
  }
  const int64_t Cg = C / G, D = Cg * S, P = N * C;
  const DType cd = compute_dtype(input.dtype());
  auto x = input_as(input, cd);
  OutTarget y(&out, cd);
  const std::vector<double> w = read_param(weight), b = read_param(bias);
  std::vector<double> mean(static_cast<size_t>(N * G)), rstd(static_cast<size_t>(N * G));
  dispatch_fd(cd, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x->data_ptr<T>();
    T* yp = y.get<T>();
    parallel_for(0, N * G, grain_for(D), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* xr = xp + r * D;  // (n, g) block is contiguous
        const double mu = D > 0 ? row_sum(xr, D) / static_cast<double>(D) : 0.0;
        const double var = D > 0 ? row_sumsq_dev(xr, D, mu) / static_cast<double>(D) : 0.0;
        mean[r] = mu;
        rstd[r] = 1.0 / std::sqrt(var + eps);
      }
    });
    parallel_for(0, P, grain_for(S), [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t n = p / C, c = p % C, r = n * G + c / Cg;
        const double a = rstd[r] * (w.empty() ? 1.0 : w[c]);
        const double bb = (b.empty() ? 0.0 : b[c]) - mean[r] * a;
        row_affine(xp + p * S, yp + p * S, S, static_cast<T>(a), static_cast<T>(bb));
      }
    });
  });
  y.finish();
  if (mean_out) write_param(*mean_out, mean);
  if (rstd_out) write_param(*rstd_out, rstd);
}

void group_norm_backward_out(const TensorImpl& grad_output, const TensorImpl& input, int64_t G,
                             const TensorImpl& mean_t, const TensorImpl& rstd_t,
                             const TensorImpl* weight, TensorImpl* grad_input,
                             TensorImpl* grad_weight, TensorImpl* grad_bias) {
  constexpr std::string_view op = "group_norm_backward";
  int64_t N, C, S;
  group_norm_dims(op, input, G, N, C, S);
  check_floating(op, input, "input");
  check_same_dtype(op, input, grad_output, "grad_output");
  check_shape(op, grad_output, input.sizes(), "grad_output");
  const Dims cs{C};
  check_param(op, weight, cs, "weight");
  check_stat(op, &mean_t, N * G, "mean");
  check_stat(op, &rstd_t, N * G, "rstd");
  if (grad_input) {
    check_same_dtype(op, input, *grad_input, "grad_input");
    check_shape(op, *grad_input, input.sizes(), "grad_input");
  }
  check_param(op, grad_weight, cs, "grad_weight");
  check_param(op, grad_bias, cs, "grad_bias");
  const int64_t Cg = C / G, D = Cg * S, P = N * C;
  const std::vector<double> mean = read_param(&mean_t), rstd = read_param(&rstd_t);
  const std::vector<double> w = read_param(weight);
  const DType cd = compute_dtype(input.dtype());
  auto x = input_as(input, cd);
  auto gy = input_as(grad_output, cd);
  OutTarget gx(grad_input, cd);
  std::vector<double> db, ds;  // per plane: Σgy, Σgy·(x-μ)
  dispatch_fd(cd, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x->data_ptr<T>();
    const T* gp = gy->data_ptr<T>();
    std::vector<double> pmean(static_cast<size_t>(P));
    for (int64_t p = 0; p < P; ++p) pmean[p] = mean[(p / C) * G + (p % C) / Cg];
    plane_grad_sums(gp, xp, P, S, pmean, db, ds);
    if (grad_input) {
      T* gxp = gx.get<T>();
      parallel_for(0, N * G, grain_for(D), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t n = r / G, g = r % G;
          double A = 0, B = 0;  // Σ w·gy, Σ w·gy·(x-μ) over the group
          for (int64_t c = g * Cg; c < (g + 1) * Cg; ++c) {
            const double wc = w.empty() ? 1.0 : w[c];
            A += wc * db[n * C + c];
            B += wc * ds[n * C + c];
          }
          const double rs = rstd[r], mu = mean[r], Dd = static_cast<double>(D);
          const double t = D > 0 ? rs * rs * rs * B / Dd : 0.0;
          const double k3 = D > 0 ? -rs * A / Dd + t * mu : 0.0;
          for (int64_t c = g * Cg; c < (g + 1) * Cg; ++c) {
            const int64_t p = n * C + c;
            const double wc = w.empty() ? 1.0 : w[c];
            grad_affine(gp + p * S, xp + p * S, gxp + p * S, S, static_cast<T>(rs * wc),
                        static_cast<T>(-t), static_cast<T>(k3));
          }
        }
      });
    }
  });
  gx.finish();
  if (grad_weight) {
    std::vector<double> v(static_cast<size_t>(C), 0.0);
    for (int64_t p = 0; p < P; ++p) v[p % C] += ds[p] * rstd[(p / C) * G + (p % C) / Cg];
    write_param(*grad_weight, v);
  }
  if (grad_bias) {
    std::vector<double> v(static_cast<size_t>(C), 0.0);
    for (int64_t p = 0; p < P; ++p) v[p % C] += db[p];
    write_param(*grad_bias, v);
  }
}

void batch_norm_backward_recompute_out(const TensorImpl& grad_output, const TensorImpl& input,
                                       const TensorImpl* weight, const TensorImpl* running_mean,
                                       const TensorImpl* running_var, bool training, double eps,
                                       TensorImpl* grad_input, TensorImpl* grad_weight,
                                       TensorImpl* grad_bias) {
  TensorImplPtr mean, invstd;
  if (training) {  // the forward's batch statistics, recomputed by the forward kernel
    KILN_CHECK(input.dim() >= 2, "batch_norm_backward", "expected input of rank >= 2, got ",
               dims_str(input.sizes()));
    const Dims stats{input.size(1)};
    mean = empty(stats, compute_dtype(input.dtype()));
    invstd = empty(stats, compute_dtype(input.dtype()));
    TensorImplPtr scratch = empty(input.sizes(), input.dtype());
    batch_norm_out(input, nullptr, nullptr, nullptr, nullptr, true, 0.0, eps, *scratch, mean.get(),
                   invstd.get());
  }
  batch_norm_backward_out(grad_output, input, weight, running_mean, running_var, mean.get(),
                          invstd.get(), training, eps, grad_input, grad_weight, grad_bias);
}

void batch_norm_update_stats_out(const TensorImpl& input, const TensorImpl& running_mean,
                                 const TensorImpl& running_var, double momentum,
                                 TensorImpl& new_mean, TensorImpl& new_var) {
  copy_(new_mean, running_mean);
  copy_(new_var, running_var);
  TensorImplPtr scratch = empty(input.sizes(), input.dtype());
  // eps only scales the normalized output, which is discarded: eager's default.
  batch_norm_out(input, nullptr, nullptr, &new_mean, &new_var, true, momentum, 1e-5, *scratch,
                 nullptr, nullptr);
}

void layer_norm_backward_recompute_out(const TensorImpl& grad_output, const TensorImpl& input,
                                       std::span<const int64_t> normalized_shape,
                                       const TensorImpl* weight, double eps, TensorImpl* grad_input,
                                       TensorImpl* grad_weight, TensorImpl* grad_bias) {
  const Dims stats = layer_norm_stats_shape(input.sizes(), normalized_shape);
  TensorImplPtr mean = empty(stats, compute_dtype(input.dtype()));
  TensorImplPtr rstd = empty(stats, compute_dtype(input.dtype()));
  TensorImplPtr scratch = empty(input.sizes(), input.dtype());
  layer_norm_out(input, normalized_shape, nullptr, nullptr, eps, *scratch, mean.get(), rstd.get());
  layer_norm_backward_out(grad_output, input, normalized_shape, *mean, *rstd, weight, grad_input,
                          grad_weight, grad_bias);
}

void group_norm_backward_recompute_out(const TensorImpl& grad_output, const TensorImpl& input,
                                       int64_t num_groups, const TensorImpl* weight, double eps,
                                       TensorImpl* grad_input, TensorImpl* grad_weight,
                                       TensorImpl* grad_bias) {
  KILN_CHECK(input.dim() >= 2, "group_norm_backward", "expected input of rank >= 2, got ",
             dims_str(input.sizes()));
  const Dims stats{input.size(0), num_groups};
  TensorImplPtr mean = empty(stats, compute_dtype(input.dtype()));
  TensorImplPtr rstd = empty(stats, compute_dtype(input.dtype()));
  TensorImplPtr scratch = empty(input.sizes(), input.dtype());
  group_norm_out(input, num_groups, nullptr, nullptr, eps, *scratch, mean.get(), rstd.get());
  group_norm_backward_out(grad_output, input, num_groups, *mean, *rstd, weight, grad_input,
                          grad_weight, grad_bias);
}

}  // namespace kiln::kernels
