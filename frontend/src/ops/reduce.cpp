// Reductions, softmax family and scans, with their gradients written in tensor ops.

#include <cmath>

#include "kiln/autograd.h"
#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "kiln/runtime/kernels/reduce.h"

namespace kiln {

namespace {

Dims wrap_dims(std::span<const int64_t> dims, int64_t rank) {
  Dims out;
  for (int64_t d : dims) out.push_back(wrap_dim(d, rank, "reduce"));
  return out;
}

// Re-inserts reduced dims (as size 1) into a gradient computed with keepdim=false, so it
// broadcasts against the input.
Tensor unsqueeze_reduced(const Tensor& g, const Dims& in_sizes, std::span<const int64_t> dims,
                         bool keepdim) {
  if (keepdim || in_sizes.size() == 0) return g;
  Dims shape = kernels::reduce_shape(in_sizes, dims, true);
  return g.reshape(shape);
}

// Number of elements folded into each output element.
int64_t reduced_count(const Dims& sizes, std::span<const int64_t> dims) {
  if (dims.empty()) {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    return n;
  }
  int64_t n = 1;
  for (int64_t d : wrap_dims(dims, sizes.size())) n *= sizes[d];
  return n;
}

Tensor new_out(std::span<const int64_t> sizes, std::span<const int64_t> dims, bool keepdim,
               DType dtype, const char* op, Device device = Device::CPU) {
  return Tensor(kiln::empty(kernels::reduce_shape(sizes, dims, keepdim, op), dtype, device));
}

}  // namespace

Tensor sum_to(const Tensor& t, std::span<const int64_t> sizes) {
  if (t.sizes() == Dims(sizes)) return t;
  const int64_t lead = t.dim() - static_cast<int64_t>(sizes.size());
  KILN_CHECK(lead >= 0, "sum_to", "cannot reduce ", t.sizes(), " to ", Dims(sizes));
  Dims dims;
  for (int64_t i = 0; i < t.dim(); ++i) {
    if (i < lead) {
      dims.push_back(i);
    } else if (sizes[i - lead] == 1 && t.size(i) != 1) {
      dims.push_back(i);
    }
  }
  Tensor r = dims.empty() ? t : sum(t, dims, true);
  return r.reshape(sizes);
}

Tensor sum(const Tensor& x, std::span<const int64_t> dims, bool keepdim) {
  Tensor out =
      new_out(x.sizes(), dims, keepdim, kernels::sum_result_dtype(x.dtype()), "sum", x.device());
  kernels::sum_out(*x.impl(), dims, keepdim, *out.impl());
  Dims in = x.sizes(), d(dims);
  autograd::record("SumBackward", {x}, {out}, {}, {}, [=](const TensorList&, const TensorList& g) {
    return TensorList{unsqueeze_reduced(g[0], in, d, keepdim).expand(in)};
  });
  KILN_TRACE("sum", {x}, {out}, {"dims", d}, {"keepdim", keepdim});
  return out;
}

Tensor mean(const Tensor& x, std::span<const int64_t> dims, bool keepdim) {
  KILN_CHECK(is_floating(x.dtype()), "mean", "expected a floating-point input, got ", x.dtype());
  Tensor out = new_out(x.sizes(), dims, keepdim, x.dtype(), "mean", x.device());
  kernels::mean_out(*x.impl(), dims, keepdim, *out.impl());
  Dims in = x.sizes(), d(dims);
  const double n = static_cast<double>(reduced_count(in, dims));
  autograd::record("MeanBackward", {x}, {out}, {}, {}, [=](const TensorList&, const TensorList& g) {
    return TensorList{unsqueeze_reduced(g[0], in, d, keepdim).expand(in) / n};
  });
  KILN_TRACE("mean", {x}, {out}, {"dims", d}, {"keepdim", keepdim});
  return out;
}

Tensor prod(const Tensor& x, std::span<const int64_t> dims, bool keepdim) {
  Tensor out = new_out(x.sizes(), dims, keepdim, kernels::sum_result_dtype(x.dtype()), "prod");
  kernels::prod_out(*x.impl(), dims, keepdim, *out.impl());
  Dims in = x.sizes(), d(dims);
  // d prod / d x_i = prod / x_i (inputs with zeros need the product of the others: computed
  // directly for correctness).
  autograd::record("ProdBackward", {x}, {out}, {x}, {out},
                   [=](const TensorList& s, const TensorList& g) {
                     const Tensor& xi = s[0];
                     Tensor gout = unsqueeze_reduced(g[0], in, d, keepdim);
                     Tensor pout = unsqueeze_reduced(s[1], in, d, keepdim);
                     Tensor zero_mask = eq(xi, zeros_like(xi));
                     Tensor safe = where(zero_mask, ones_like(xi), xi);
                     // x_i != 0: prod / x_i (already 0 when another element of the group is 0).
                     // x_i == 0: the product of the others when it is the group's only zero, else
                     // 0.
                     Tensor zeros_in_group = sum(zero_mask.to(xi.dtype()), d, true);
                     Tensor others = where(eq(zeros_in_group, ones_like(zeros_in_group)),
                                           prod(safe, d, true), zeros_like(zeros_in_group));
                     return TensorList{gout * where(zero_mask, others.expand(in), pout / safe)};
                   });
  KILN_TRACE("prod", {x}, {out}, {"dims", d}, {"keepdim", keepdim});
  return out;
}

namespace {
// Gradient of amax/amin: split evenly among the elements equal to the result.
Tensor extreme_backward(const Tensor& g, const Tensor& x, const Tensor& result, const Dims& in,
                        const Dims& d, bool keepdim) {
  Tensor r = unsqueeze_reduced(result, in, d, keepdim);
  Tensor mask = eq(x, r).to(x.dtype());
  Tensor count = sum(mask, d, true);
  return unsqueeze_reduced(g, in, d, keepdim) * mask / count;
}
}  // namespace

Tensor amax(const Tensor& x, std::span<const int64_t> dims, bool keepdim) {
  Tensor out = new_out(x.sizes(), dims, keepdim, x.dtype(), "amax");
  kernels::amax_out(*x.impl(), dims, keepdim, *out.impl());
  Dims in = x.sizes(), d(dims);
  autograd::record("AmaxBackward", {x}, {out}, {x}, {out},
                   [=](const TensorList& s, const TensorList& g) {
                     return TensorList{extreme_backward(g[0], s[0], s[1], in, d, keepdim)};
                   });
  KILN_TRACE("amax", {x}, {out}, {"dims", d}, {"keepdim", keepdim});
  return out;
}

Tensor amin(const Tensor& x, std::span<const int64_t> dims, bool keepdim) {
  Tensor out = new_out(x.sizes(), dims, keepdim, x.dtype(), "amin");
  kernels::amin_out(*x.impl(), dims, keepdim, *out.impl());
  Dims in = x.sizes(), d(dims);
  autograd::record("AminBackward", {x}, {out}, {x}, {out},
                   [=](const TensorList& s, const TensorList& g) {
                     return TensorList{extreme_backward(g[0], s[0], s[1], in, d, keepdim)};
                   });
  KILN_TRACE("amin", {x}, {out}, {"dims", d}, {"keepdim", keepdim});
  return out;
}

Tensor max(const Tensor& x) {
  return amax(x);
}
Tensor min(const Tensor& x) {
  return amin(x);
}

namespace {
std::pair<Tensor, Tensor> max_min_dim(const Tensor& x, int64_t dim, bool keepdim, bool is_max) {
  const char* op = is_max ? "max" : "min";
  KILN_CHECK(x.dim() > 0 || dim == 0 || dim == -1, op, "dim ", dim,
             " out of range for a 0-dim tensor");
  Dims dims{dim};
  Tensor values = new_out(x.sizes(), dims, keepdim, x.dtype(), op);
  Tensor indices = new_out(x.sizes(), dims, keepdim, DType::Int64, op);
  if (is_max) {
    kernels::max_out(*x.impl(), dim, keepdim, *values.impl(), *indices.impl());
  } else {
    kernels::min_out(*x.impl(), dim, keepdim, *values.impl(), *indices.impl());
  }
  Dims in = x.sizes();
  autograd::record(is_max ? "MaxBackward" : "MinBackward", {x}, {values}, {indices}, {},
                   [=](const TensorList& s, const TensorList& g) {
                     // One-hot of the chosen index along `dim`.
                     const int64_t d = in.size() ? wrap_dim(dim, in.size(), "max") : 0;
                     Tensor idx = unsqueeze_reduced(s[0], in, Dims{d}, keepdim);
                     Tensor positions = arange(0, in.size() ? in[d] : 1, 1, DType::Int64);
                     Dims shape(in.size(), 1);
                     if (in.size()) shape[d] = in[d];
                     Tensor hit = eq(positions.reshape(shape), idx).to(g[0].dtype());
                     return TensorList{unsqueeze_reduced(g[0], in, Dims{d}, keepdim) * hit};
                   });
  KILN_TRACE(op, {x}, TensorList({values, indices}), {"dim", dim}, {"keepdim", keepdim});
  return {values, indices};
}
}  // namespace

std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  return max_min_dim(x, dim, keepdim, true);
}
std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  return max_min_dim(x, dim, keepdim, false);
}

Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  Dims dims = dim ? Dims{*dim} : Dims{};
  Tensor out = new_out(x.sizes(), dims, dim ? keepdim : false, DType::Int64, "argmax");
  if (!dim && keepdim) out = Tensor(kiln::empty(Dims(x.dim(), 1), DType::Int64));
  kernels::argmax_out(*x.impl(), dim, keepdim, *out.impl());
  KILN_TRACE("argmax", {x}, {out}, {"dim", dim.value_or(INT64_MIN)}, {"keepdim", keepdim});
  return out;
}

Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  Dims dims = dim ? Dims{*dim} : Dims{};
  Tensor out = new_out(x.sizes(), dims, dim ? keepdim : false, DType::Int64, "argmin");
  if (!dim && keepdim) out = Tensor(kiln::empty(Dims(x.dim(), 1), DType::Int64));
  kernels::argmin_out(*x.impl(), dim, keepdim, *out.impl());
  KILN_TRACE("argmin", {x}, {out}, {"dim", dim.value_or(INT64_MIN)}, {"keepdim", keepdim});
  return out;
}

Tensor var(const Tensor& x, std::span<const int64_t> dims, bool unbiased, bool keepdim) {
  KILN_CHECK(is_floating(x.dtype()), "var", "expected a floating-point input, got ", x.dtype());
  Tensor out = new_out(x.sizes(), dims, keepdim, x.dtype(), "var");
  const double correction = unbiased ? 1.0 : 0.0;
  kernels::var_out(*x.impl(), dims, correction, keepdim, *out.impl());
  Dims in = x.sizes(), d(dims);
  const double n = static_cast<double>(reduced_count(in, dims));
  autograd::record(
      "VarBackward", {x}, {out}, {x}, {}, [=](const TensorList& s, const TensorList& g) {
        const Tensor& xi = s[0];
        Tensor centered = xi - mean(xi, d, true);
        const double denom = std::max(0.0, n - correction);
        return TensorList{unsqueeze_reduced(g[0], in, d, keepdim) * centered * (2.0 / denom)};
      });
  KILN_TRACE("var", {x}, {out}, {"dims", d}, {"unbiased", unbiased}, {"keepdim", keepdim});
  return out;
}

Tensor std(const Tensor& x, std::span<const int64_t> dims, bool unbiased, bool keepdim) {
  return sqrt(var(x, dims, unbiased, keepdim));
}

Tensor norm(const Tensor& x, double p, std::span<const int64_t> dims, bool keepdim) {
  KILN_CHECK(is_floating(x.dtype()), "norm", "expected a floating-point input, got ", x.dtype());
  Tensor out = new_out(x.sizes(), dims, keepdim, x.dtype(), "norm");
  kernels::norm_out(*x.impl(), p, dims, keepdim, *out.impl());
  Dims in = x.sizes(), d(dims);
  autograd::record("NormBackward", {x}, {out}, {x}, {out},
                   [=](const TensorList& s, const TensorList& g) {
                     const Tensor& xi = s[0];
                     Tensor n = unsqueeze_reduced(s[1], in, d, keepdim);
                     Tensor go = unsqueeze_reduced(g[0], in, d, keepdim);
                     if (std::isinf(p)) {
                       Tensor a = abs(xi);
                       Tensor mask = eq(a, n).to(xi.dtype());
                       return TensorList{go * sign(xi) * mask / sum(mask, d, true)};
                     }
                     if (p == 1.0) return TensorList{go * sign(xi)};
                     if (p == 2.0) {
                       Tensor safe = where(eq(n, zeros_like(n)), ones_like(n), n);
                       return TensorList{go * xi / safe};
                     }
                     // d/dx (sum |x|^p)^(1/p) = x |x|^(p-2) / n^(p-1)
                     Tensor safe = where(eq(n, zeros_like(n)), ones_like(n), n);
                     return TensorList{go * xi * pow(abs(xi), p - 2) / pow(safe, p - 1)};
                   });
  KILN_TRACE("norm", {x}, {out}, {"p", p}, {"dims", d}, {"keepdim", keepdim});
  return out;
}

Tensor logsumexp(const Tensor& x, std::span<const int64_t> dims, bool keepdim) {
  KILN_CHECK(is_floating(x.dtype()), "logsumexp", "expected a floating-point input, got ",
             x.dtype());
  Tensor out = new_out(x.sizes(), dims, keepdim, x.dtype(), "logsumexp");
  kernels::logsumexp_out(*x.impl(), dims, keepdim, *out.impl());
  Dims in = x.sizes(), d(dims);
  autograd::record("LogsumexpBackward", {x}, {out}, {x}, {out},
                   [=](const TensorList& s, const TensorList& g) {
                     Tensor r = unsqueeze_reduced(s[1], in, d, keepdim);
                     return TensorList{unsqueeze_reduced(g[0], in, d, keepdim) * exp(s[0] - r)};
                   });
  KILN_TRACE("logsumexp", {x}, {out}, {"dims", d}, {"keepdim", keepdim});
  return out;
}

namespace {
Tensor softmax_backward(const Tensor& grad, const Tensor& out, int64_t dim);
Tensor log_softmax_backward(const Tensor& grad, const Tensor& out, int64_t dim);
}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  KILN_CHECK(is_floating(x.dtype()), "softmax", "expected a floating-point input, got ", x.dtype());
  Tensor out(kiln::empty(x.sizes(), x.dtype(), x.device()));
  kernels::softmax_out(*x.impl(), dim, *out.impl());
  autograd::record("SoftmaxBackward", {x}, {out}, {}, {out},
                   [dim](const TensorList& s, const TensorList& g) {
                     return TensorList{softmax_backward(g[0], s[0], dim)};
                   });
  KILN_TRACE("softmax", {x}, {out}, {"dim", dim});
  return out;
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  KILN_CHECK(is_floating(x.dtype()), "log_softmax", "expected a floating-point input, got ",
             x.dtype());
  Tensor out(kiln::empty(x.sizes(), x.dtype(), x.device()));
  kernels::log_softmax_out(*x.impl(), dim, *out.impl());
  autograd::record("LogSoftmaxBackward", {x}, {out}, {}, {out},
                   [dim](const TensorList& s, const TensorList& g) {
                     return TensorList{log_softmax_backward(g[0], s[0], dim)};
                   });
  KILN_TRACE("log_softmax", {x}, {out}, {"dim", dim});
  return out;
}

namespace {
// First-order backward runs the fused kernel; under create_graph it is spelled in tensor ops so
// the second derivative exists.
Tensor softmax_backward(const Tensor& grad, const Tensor& out, int64_t dim) {
  if (autograd::grad_enabled() && (grad.requires_grad() || out.requires_grad())) {
    return out * (grad - sum(grad * out, Dims{dim}, true));
  }
  Tensor gi(kiln::empty(out.sizes(), out.dtype(), out.device()));
  kernels::softmax_backward_out(*grad.contiguous().impl(), *out.impl(), dim, *gi.impl());
  KILN_TRACE("softmax_backward", TensorList({grad, out}), {gi}, {"dim", dim});
  return gi;
}
Tensor log_softmax_backward(const Tensor& grad, const Tensor& out, int64_t dim) {
  if (autograd::grad_enabled() && (grad.requires_grad() || out.requires_grad())) {
    return grad - exp(out) * sum(grad, Dims{dim}, true);
  }
  Tensor gi(kiln::empty(out.sizes(), out.dtype(), out.device()));
  kernels::log_softmax_backward_out(*grad.contiguous().impl(), *out.impl(), dim, *gi.impl());
  KILN_TRACE("log_softmax_backward", TensorList({grad, out}), {gi}, {"dim", dim});
  return gi;
}
}  // namespace

Tensor cumsum(const Tensor& x, int64_t dim) {
  Tensor out(kiln::empty(x.sizes(), kernels::sum_result_dtype(x.dtype())));
  kernels::cumsum_out(*x.impl(), dim, *out.impl());
  autograd::record("CumsumBackward", {x}, {out}, {}, {},
                   [dim](const TensorList&, const TensorList& g) {
                     // Reverse cumulative sum: total - cumsum + g.
                     Tensor total = sum(g[0], Dims{dim}, true);
                     return TensorList{total - cumsum(g[0], dim) + g[0]};
                   });
  KILN_TRACE("cumsum", {x}, {out}, {"dim", dim});
  return out;
}

}  // namespace kiln
