// Matrix products. Gradients: d(a@b) = g@bᵀ, aᵀ@g, reduced over broadcast batch dims.

#include "kiln/runtime/kernels/linalg.h"
#include "kiln/autograd.h"
#include "kiln/dispatch.h"
#include "kiln/ops.h"

namespace kiln {

namespace {
// The gradient of a matmul operand, reduced to its (possibly 1-D or broadcast) shape.
Tensor matmul_grad_a(const Tensor& g, const Tensor& a, const Tensor& b) {
  if (a.dim() == 1 && b.dim() == 1) return g * b;
  if (b.dim() == 1) {  // [.., n, k] @ [k] -> [.., n]
    return sum_to(matmul(g.unsqueeze(-1), b.unsqueeze(0)), a.sizes());
  }
  if (a.dim() == 1) {  // [k] @ [.., k, m] -> [.., m]
    return sum_to(matmul(g.unsqueeze(-2), b.transpose(-1, -2)).squeeze(-2), a.sizes());
  }
  return sum_to(matmul(g, b.transpose(-1, -2)), a.sizes());
}
Tensor matmul_grad_b(const Tensor& g, const Tensor& a, const Tensor& b) {
  if (a.dim() == 1 && b.dim() == 1) return g * a;
  if (b.dim() == 1) {  // g [.., n], a [.., n, k] -> [k]
    return sum_to(matmul(a.transpose(-1, -2), g.unsqueeze(-1)).squeeze(-1), b.sizes());
  }
  if (a.dim() == 1) {  // g [.., m], a [k] -> [.., k, m]
    return sum_to(matmul(a.unsqueeze(-1), g.unsqueeze(-2)), b.sizes());
  }
  return sum_to(matmul(a.transpose(-1, -2), g), b.sizes());
}

Tensor record_matmul(const char* name, const Tensor& a, const Tensor& b, Tensor out) {
  autograd::record(name, {a, b}, {out}, {a, b}, {}, [](const TensorList& s, const TensorList& g) {
    const bool need_a = s[0].requires_grad(), need_b = s[1].requires_grad();
    return TensorList{need_a ? matmul_grad_a(g[0], s[0], s[1]) : Tensor(),
                      need_b ? matmul_grad_b(g[0], s[0], s[1]) : Tensor()};
  });
  return out;
}
}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  Tensor out(kiln::empty(kernels::matmul_shape(*a.impl(), *b.impl()),
                         promote_types(a.dtype(), b.dtype()), a.device()));
  kernels::matmul_out(*a.impl(), *b.impl(), *out.impl());
  record_matmul("MatmulBackward", a, b, out);
  KILN_TRACE("matmul", TensorList({a, b}), {out});
  return out;
}

Tensor mm(const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.dim() == 2 && b.dim() == 2, "mm", "expected 2-D operands, got ", a.sizes(), " and ",
             b.sizes());
  return matmul(a, b);
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.dim() == 3 && b.dim() == 3, "bmm", "expected 3-D operands, got ", a.sizes(), " and ",
             b.sizes());
  KILN_CHECK(a.size(0) == b.size(0), "bmm", "batch sizes differ: ", a.sizes(), " and ", b.sizes());
  return matmul(a, b);
}

Tensor mv(const Tensor& a, const Tensor& v) {
  KILN_CHECK(a.dim() == 2 && v.dim() == 1, "mv", "expected a matrix and a vector, got ", a.sizes(),
             " and ", v.sizes());
  return matmul(a, v);
}

Tensor dot(const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.dim() == 1 && b.dim() == 1, "dot", "expected 1-D operands, got ", a.sizes(), " and ",
             b.sizes());
  return matmul(a, b);
}

Tensor addmm(const Tensor& bias, const Tensor& a, const Tensor& b, double beta, double alpha) {
  return add(mul(bias, beta), mul(mm(a, b), alpha));
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  KILN_CHECK(weight.dim() == 2, "linear", "expected weight of 2 dims (out, in), got ",
             weight.sizes());
  KILN_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1), "linear",
             "expected input with last dim ", weight.size(1), ", got ", x.sizes());
  if (bias.defined()) {
    KILN_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), "linear",
               "expected bias of shape [", weight.size(0), "], got ", bias.sizes());
  }
  Dims shape = x.sizes();
  shape.back() = weight.size(0);
  Tensor out(kiln::empty(shape, x.dtype(), x.device()));
  kernels::linear_out(*x.impl(), *weight.impl(), bias.defined() ? bias.impl() : nullptr,
                      *out.impl());
  autograd::record("LinearBackward", {x, weight, bias}, {out}, {x, weight}, {},
                   [has_bias = bias.defined()](const TensorList& s, const TensorList& g) {
                     const Tensor& xi = s[0];
                     const Tensor& w = s[1];
                     Tensor g2 = g[0].reshape(Dims{-1, w.size(0)});
                     // CUDA multiplies 2-D matrices only: the rows folded, as in the forward.
                     Tensor gx = !xi.requires_grad() ? Tensor()
                                 : xi.is_cuda()      ? mm(g2, w).reshape(xi.sizes())
                                                     : matmul(g[0], w);
                     Tensor x2 = xi.reshape(Dims{-1, w.size(1)});
                     Tensor gw = w.requires_grad() ? mm(g2.t(), x2) : Tensor();
                     Tensor gb = has_bias ? sum(g2, Dims{0}) : Tensor();
                     return TensorList{gx, gw, gb};
                   });
  KILN_TRACE("linear", bias.defined() ? TensorList({x, weight, bias}) : TensorList({x, weight}),
             {out});
  return out;
}

}  // namespace kiln
