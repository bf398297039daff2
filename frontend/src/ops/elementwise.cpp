// Elementwise ops with their gradients. Gradients of broadcast operands are summed back to the
// operand's shape (sum_to).

#include <cmath>

#include "kiln/autograd.h"
#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "kiln/runtime/kernels/elementwise.h"

namespace kiln {

namespace detail {
void check_inplace(const Tensor& t, const char* op);
}

using kernels::BinaryOp;
using kernels::UnaryOp;

namespace {

// An integral alpha (the default 1) is an int scalar, so integer tensors add without error.
kernels::Scalar alpha_scalar(double alpha) {
  return alpha == static_cast<double>(static_cast<int64_t>(alpha))
             ? kernels::Scalar(static_cast<int64_t>(alpha))
             : kernels::Scalar(alpha);
}
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b, double alpha = 1.0) {
  return Tensor(kernels::binary(op, *a.impl(), *b.impl(), alpha_scalar(alpha)));
}
// C++ callers write `x + 1` for integer tensors: an integral value keeps an integral tensor's
// dtype (as a Python int would), anything else is a float scalar.
kernels::Scalar scalar_for(const Tensor& t, double v) {
  if (is_integral(t.dtype(), true) && v == static_cast<double>(static_cast<int64_t>(v))) {
    return kernels::Scalar(static_cast<int64_t>(v));
  }
  return kernels::Scalar(v);
}
Tensor binary(BinaryOp op, const Tensor& a, double s) {
  return Tensor(kernels::binary(op, *a.impl(), scalar_for(a, s)));
}
Tensor unary(UnaryOp op, const Tensor& x, kernels::UnaryParams p = {}) {
  return Tensor(kernels::unary(op, *x.impl(), p));
}
// Gradients flow only to floating inputs that require grad.
bool wants(const Tensor& t) {
  return t.requires_grad();
}

}  // namespace

// --- binary ---------------------------------------------------------------------------------

Tensor add(const Tensor& a, const Tensor& b, double alpha) {
  Tensor out = binary(BinaryOp::Add, a, b, alpha);
  if (autograd::any_requires_grad({&a, &b})) [[unlikely]] {
    Dims sa = a.sizes(), sb = b.sizes();
    autograd::record(
        "AddBackward", {a, b}, {out}, {}, {}, [=](const TensorList&, const TensorList& g) {
          return TensorList{sum_to(g[0], sa), sum_to(alpha == 1.0 ? g[0] : g[0] * alpha, sb)};
        });
  }
  KILN_TRACE("add", TensorList({a, b}), {out}, {"alpha", alpha});
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b, double alpha) {
  Tensor out = binary(BinaryOp::Sub, a, b, alpha);
  if (autograd::any_requires_grad({&a, &b})) [[unlikely]] {
    Dims sa = a.sizes(), sb = b.sizes();
    autograd::record("SubBackward", {a, b}, {out}, {}, {},
                     [=](const TensorList&, const TensorList& g) {
                       return TensorList{sum_to(g[0], sa), sum_to(g[0] * -alpha, sb)};
                     });
  }
  KILN_TRACE("sub", TensorList({a, b}), {out}, {"alpha", alpha});
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary(BinaryOp::Mul, a, b);
  if (autograd::any_requires_grad({&a, &b})) [[unlikely]] {
    Dims sa = a.sizes(), sb = b.sizes();
    autograd::record("MulBackward", {a, b}, {out}, {a, b}, {},
                     [=](const TensorList& s, const TensorList& g) {
                       return TensorList{wants(s[0]) ? sum_to(g[0] * s[1], sa) : Tensor(),
                                         wants(s[1]) ? sum_to(g[0] * s[0], sb) : Tensor()};
                     });
  }
  KILN_TRACE("mul", TensorList({a, b}), {out});
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = binary(BinaryOp::Div, a, b);
  if (autograd::any_requires_grad({&a, &b})) [[unlikely]] {
    Dims sa = a.sizes(), sb = b.sizes();
    autograd::record(
        "DivBackward", {a, b}, {out}, {a, b}, {}, [=](const TensorList& s, const TensorList& g) {
          Tensor ga = wants(s[0]) ? sum_to(g[0] / s[1], sa) : Tensor();
          Tensor gb = wants(s[1]) ? sum_to(-g[0] * s[0] / (s[1] * s[1]), sb) : Tensor();
          return TensorList{ga, gb};
        });
  }
  KILN_TRACE("div", TensorList({a, b}), {out});
  return out;
}

Tensor pow(const Tensor& a, const Tensor& b) {
  Tensor out = binary(BinaryOp::Pow, a, b);
  if (autograd::any_requires_grad({&a, &b})) [[unlikely]] {
    Dims sa = a.sizes(), sb = b.sizes();
    autograd::record("PowBackward", {a, b}, {out}, {a, b}, {out},
                     [=](const TensorList& s, const TensorList& g) {
                       const Tensor &x = s[0], &y = s[1], &r = s[2];
                       Tensor ga = wants(x) ? sum_to(g[0] * y * pow(x, y - 1.0), sa) : Tensor();
                       // d/dy x^y = x^y log x (0 where x == 0, as PyTorch)
                       Tensor gb;
                       if (wants(y)) {
                         Tensor logx = where(eq(x, zeros_like(x)), zeros_like(x), log(x));
                         gb = sum_to(g[0] * r * logx, sb);
                       }
                       return TensorList{ga, gb};
                     });
  }
  KILN_TRACE("pow", TensorList({a, b}), {out});
  return out;
}

namespace {
Tensor max_min_binary(BinaryOp op, const char* name, const Tensor& a, const Tensor& b) {
  Tensor out = binary(op, a, b);
  if (autograd::any_requires_grad({&a, &b})) [[unlikely]] {
    Dims sa = a.sizes(), sb = b.sizes();
    const bool is_max = op == BinaryOp::Maximum;
    autograd::record(name, {a, b}, {out}, {a, b}, {},
                     [=](const TensorList& s, const TensorList& g) {
                       // Ties split the gradient evenly (PyTorch's rule).
                       Tensor a_wins = (is_max ? gt(s[0], s[1]) : lt(s[0], s[1])).to(g[0].dtype());
                       Tensor tie = eq(s[0], s[1]).to(g[0].dtype());
                       Tensor wa = a_wins + tie * 0.5;
                       Tensor wb = (1.0 - a_wins) - tie * 0.5;
                       return TensorList{sum_to(g[0] * wa, sa), sum_to(g[0] * wb, sb)};
                     });
  }
  KILN_TRACE(name, TensorList({a, b}), {out});
  return out;
}
}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) {
  return max_min_binary(BinaryOp::Maximum, "maximum", a, b);
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return max_min_binary(BinaryOp::Minimum, "minimum", a, b);
}

// --- with a scalar ----------------------------------------------------------------------------

Tensor add(const Tensor& a, double b) {
  Tensor out = binary(BinaryOp::Add, a, b);
  autograd::record("AddBackward", {a}, {out}, {}, {},
                   [](const TensorList&, const TensorList& g) { return TensorList{g[0]}; });
  KILN_TRACE("add_scalar", {a}, {out}, {"other", b});
  return out;
}

Tensor sub(const Tensor& a, double b) {
  return add(a, -b);
}

Tensor rsub(const Tensor& a, double b) {
  Tensor out(kiln::empty(a.sizes(), kernels::result_type(*a.impl(), scalar_for(a, b)), a.device()));
  kernels::rsub_scalar_out(*a.impl(), scalar_for(a, b), *out.impl());
  autograd::record("RsubBackward", {a}, {out}, {}, {},
                   [](const TensorList&, const TensorList& g) { return TensorList{-g[0]}; });
  KILN_TRACE("rsub_scalar", {a}, {out}, {"other", b});
  return out;
}

Tensor mul(const Tensor& a, double b) {
  Tensor out = binary(BinaryOp::Mul, a, b);
  autograd::record("MulBackward", {a}, {out}, {}, {},
                   [b](const TensorList&, const TensorList& g) { return TensorList{g[0] * b}; });
  KILN_TRACE("mul_scalar", {a}, {out}, {"other", b});
  return out;
}

Tensor div(const Tensor& a, double b) {
  Tensor out = binary(BinaryOp::Div, a, b);
  autograd::record("DivBackward", {a}, {out}, {}, {},
                   [b](const TensorList&, const TensorList& g) { return TensorList{g[0] / b}; });
  KILN_TRACE("div_scalar", {a}, {out}, {"other", b});
  return out;
}

Tensor pow(const Tensor& a, double e) {
  Tensor out = binary(BinaryOp::Pow, a, e);
  autograd::record("PowBackward", {a}, {out}, {a}, {},
                   [e](const TensorList& s, const TensorList& g) {
                     if (e == 0.0) return TensorList{zeros_like(g[0])};
                     return TensorList{g[0] * e * pow(s[0], e - 1.0)};
                   });
  KILN_TRACE("pow_scalar", {a}, {out}, {"exponent", e});
  return out;
}

// --- unary ------------------------------------------------------------------------------------

namespace {
// An op whose gradient is a function of the input (saved) and/or the output (saved as output).
template <typename Fn>
Tensor unary_op(UnaryOp op, const char* name, const char* backward_name, const Tensor& x,
                bool save_input, bool save_output, Fn grad_fn, kernels::UnaryParams p = {},
                dispatch::Attrs trace_attrs = {}) {
  Tensor out = unary(op, x, p);
  if (autograd::any_requires_grad({&x})) [[unlikely]] {
    TensorList si = save_input ? TensorList{x} : TensorList{};
    TensorList so = save_output ? TensorList{out} : TensorList{};
    autograd::record(backward_name, {x}, {out}, si, so,
                     [grad_fn](const TensorList& s, const TensorList& g) {
                       return TensorList{grad_fn(s, g[0])};
                     });
  }
  if (dispatch::tracer()) [[unlikely]]
    dispatch::trace(name, {x}, {out}, trace_attrs);
  return out;
}
// The fused backward kernels serve plain first-order gradients; under create_graph, or while
// tracing (so a traced training step records the backward as ops), the tensor-op formula runs.
bool first_order(const Tensor& g) {
  return !(autograd::grad_enabled() && g.requires_grad()) && !dispatch::tracer();
}
}  // namespace

// The unary ops whose schema entries say eager = "generated": the kernel forward, the schema's
// gradient formula (ir/ops.toml) backward. The rest of the family follows by hand.
#include "eager_unary.inc"

Tensor tanh(const Tensor& x) {
  return unary_op(UnaryOp::Tanh, "tanh", "TanhBackward", x, false, true,
                  [](const TensorList& s, const Tensor& g) {
                    if (first_order(g) && !s[0].requires_grad()) {
                      Tensor gi(kiln::empty(g.sizes(), g.dtype(), g.device()));
                      kernels::tanh_backward_out(*g.impl(), *s[0].impl(), *gi.impl());
                      return gi;
                    }
                    return g * (1.0 - s[0] * s[0]);
                  });
}
Tensor sigmoid(const Tensor& x) {
  return unary_op(UnaryOp::Sigmoid, "sigmoid", "SigmoidBackward", x, false, true,
                  [](const TensorList& s, const Tensor& g) {
                    if (first_order(g) && !s[0].requires_grad()) {
                      Tensor gi(kiln::empty(g.sizes(), g.dtype(), g.device()));
                      kernels::sigmoid_backward_out(*g.impl(), *s[0].impl(), *gi.impl());
                      return gi;
                    }
                    return g * s[0] * (1.0 - s[0]);
                  });
}
Tensor relu(const Tensor& x) {
  return unary_op(UnaryOp::Relu, "relu", "ReluBackward", x, false, true,
                  [](const TensorList& s, const Tensor& g) {
                    if (first_order(g)) {
                      Tensor gi(kiln::empty(g.sizes(), g.dtype(), g.device()));
                      kernels::relu_backward_out(*g.impl(), *s[0].impl(), *gi.impl());
                      return gi;
                    }
                    return g * gt(s[0], zeros_like(s[0])).to(g.dtype());
                  });
}
Tensor gelu(const Tensor& x, bool tanh_approx) {
  const auto approx = tanh_approx ? kernels::GeluApproximate::Tanh : kernels::GeluApproximate::None;
  return unary_op(tanh_approx ? UnaryOp::GeluTanh : UnaryOp::Gelu, "gelu", "GeluBackward", x, true,
                  false,
                  [approx, tanh_approx](const TensorList& s, const Tensor& g) {
                    if (first_order(g) && !s[0].requires_grad()) {
                      Tensor gi(kiln::empty(g.sizes(), g.dtype(), g.device()));
                      kernels::gelu_backward_out(*g.impl(), *s[0].impl(), approx, *gi.impl());
                      return gi;
                    }
                    const Tensor& v = s[0];
                    if (tanh_approx) {
                      const double c = 0.79788456080286536;
                      Tensor inner = (v + pow(v, 3.0) * 0.044715) * c;
                      Tensor t = tanh(inner);
                      Tensor dinner = (1.0 + v * v * (3 * 0.044715)) * c;
                      return g * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * dinner);
                    }
                    // Phi(x) + x phi(x)
                    Tensor cdf = 0.5 * (1.0 + erf(v * 0.70710678118654752));
                    Tensor pdf = exp(v * v * -0.5) * 0.3989422804014327;
                    return g * (cdf + v * pdf);
                  },
                  {}, {{"approximate", tanh_approx}});
}
Tensor silu(const Tensor& x) {
  return unary_op(UnaryOp::Silu, "silu", "SiluBackward", x, true, false,
                  [](const TensorList& s, const Tensor& g) {
                    if (first_order(g) && !s[0].requires_grad()) {
                      Tensor gi(kiln::empty(g.sizes(), g.dtype(), g.device()));
                      kernels::silu_backward_out(*g.impl(), *s[0].impl(), *gi.impl());
                      return gi;
                    }
                    Tensor sg = sigmoid(s[0]);
                    return g * sg * (1.0 + s[0] * (1.0 - sg));
                  });
}
Tensor leaky_relu(const Tensor& x, double slope) {
  kernels::UnaryParams p;
  p.a = slope;
  return unary_op(UnaryOp::LeakyRelu, "leaky_relu", "LeakyReluBackward", x, true, false,
                  [slope](const TensorList& s, const Tensor& g) {
                    if (first_order(g)) {
                      Tensor gi(kiln::empty(g.sizes(), g.dtype(), g.device()));
                      kernels::leaky_relu_backward_out(*g.impl(), *s[0].impl(), slope, *gi.impl());
                      return gi;
                    }
                    Tensor pos = gt(s[0], zeros_like(s[0])).to(g.dtype());
                    return g * (pos + (1.0 - pos) * slope);
                  },
                  p, {{"negative_slope", slope}});
}

Tensor clamp(const Tensor& x, std::optional<double> lo, std::optional<double> hi) {
  Tensor out(kiln::empty(x.sizes(), x.dtype()));
  std::optional<kernels::Scalar> l, h;
  if (lo) l = scalar_for(x, *lo);
  if (hi) h = scalar_for(x, *hi);
  kernels::clamp_out(*x.impl(), l, h, *out.impl());
  if (autograd::any_requires_grad({&x})) [[unlikely]] {
    autograd::record("ClampBackward", {x}, {out}, {x}, {},
                     [lo, hi](const TensorList& s, const TensorList& g) {
                       Tensor inside = ones_like(s[0], DType::Bool);
                       if (lo) inside = logical_and(inside, binary(BinaryOp::Ge, s[0], *lo));
                       if (hi) inside = logical_and(inside, binary(BinaryOp::Le, s[0], *hi));
                       return TensorList{g[0] * inside.to(g[0].dtype())};
                     });
  }
  KILN_TRACE("clamp", {x}, {out}, {"min", lo.value_or(-INFINITY)}, {"max", hi.value_or(INFINITY)});
  return out;
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  KILN_CHECK(cond.dtype() == DType::Bool, "where", "expected a bool condition, got ", cond.dtype());
  Tensor out(kernels::where(*cond.impl(), *a.impl(), *b.impl()));
  if (autograd::any_requires_grad({&a, &b})) [[unlikely]] {
    Dims sa = a.sizes(), sb = b.sizes();
    autograd::record(
        "WhereBackward", {a, b}, {out}, {cond}, {}, [=](const TensorList& s, const TensorList& g) {
          Tensor z = zeros_like(g[0]);
          return TensorList{sum_to(where(s[0], g[0], z), sa), sum_to(where(s[0], z, g[0]), sb)};
        });
  }
  KILN_TRACE("where", TensorList({cond, a, b}), {out});
  return out;
}

// --- comparisons and logic (no gradient) --------------------------------------------------------

#define KILN_COMPARE(name, OP)                    \
  Tensor name(const Tensor& a, const Tensor& b) { \
    Tensor out = binary(BinaryOp::OP, a, b);      \
    KILN_TRACE(#name, TensorList({a, b}), {out}); \
    return out;                                   \
  }
KILN_COMPARE(eq, Eq)
KILN_COMPARE(ne, Ne)
KILN_COMPARE(lt, Lt)
KILN_COMPARE(le, Le)
KILN_COMPARE(gt, Gt)
KILN_COMPARE(ge, Ge)
KILN_COMPARE(logical_and, LogicalAnd)
KILN_COMPARE(logical_or, LogicalOr)
#undef KILN_COMPARE

Tensor logical_not(const Tensor& a) {
  Tensor out(kiln::empty(a.sizes(), DType::Bool));
  kernels::logical_not_out(*a.impl(), *out.impl());
  KILN_TRACE("logical_not", {a}, {out});
  return out;
}

// --- in place -----------------------------------------------------------------------------------

namespace {
// After writing into `self`: bump the version and, when gradients are involved, make `self` the
// output of a node whose inputs are self's previous history and the other operands.
void rebase(Tensor& self, const char* name, const TensorList& others, autograd::BackwardFn fn,
            const TensorList& saved = {}) {
  autograd::bump_version(self);
  TensorList inputs{self};
  inputs.insert(inputs.end(), others.begin(), others.end());
  if (!autograd::any_requires_grad(inputs)) return;
  auto node = std::make_shared<autograd::FunctionNode>(name, std::move(fn));
  for (const Tensor& t : saved) node->save(t);
  // The edge to self's old history must be taken before self points at the new node.
  autograd::set_history(node, inputs, {self});
}
}  // namespace

Tensor& add_(Tensor& self, const Tensor& other, double alpha) {
  detail::check_inplace(self, "add_");
  kernels::add_(*self.impl(), *other.impl(), alpha_scalar(alpha));
  Dims so = other.sizes();
  rebase(self, "AddBackward", {other}, [=](const TensorList&, const TensorList& g) {
    return TensorList{g[0], sum_to(g[0] * alpha, so)};
  });
  KILN_TRACE("add_", TensorList({self, other}), {self}, {"alpha", alpha});
  return self;
}

Tensor& sub_(Tensor& self, const Tensor& other, double alpha) {
  return add_(self, other, -alpha);
}

Tensor& mul_(Tensor& self, const Tensor& other) {
  detail::check_inplace(self, "mul_");
  // The gradient needs self's old value: keep a copy only when someone will need it.
  const bool needs = autograd::any_requires_grad({&self, &other});
  Tensor old = needs ? self.detach().clone() : Tensor();
  kernels::mul_(*self.impl(), *other.impl());
  Dims so = other.sizes();
  rebase(
      self, "MulBackward", {other},
      [=](const TensorList& s, const TensorList& g) {
        return TensorList{g[0] * s[1], sum_to(g[0] * s[0], so)};
      },
      needs ? TensorList{old, other} : TensorList{});
  KILN_TRACE("mul_", TensorList({self, other}), {self});
  return self;
}

Tensor& div_(Tensor& self, const Tensor& other) {
  detail::check_inplace(self, "div_");
  const bool needs = autograd::any_requires_grad({&self, &other});
  Tensor old = needs ? self.detach().clone() : Tensor();
  kernels::div_(*self.impl(), *other.impl());
  Dims so = other.sizes();
  rebase(
      self, "DivBackward", {other},
      [=](const TensorList& s, const TensorList& g) {
        return TensorList{g[0] / s[1], sum_to(-g[0] * s[0] / (s[1] * s[1]), so)};
      },
      needs ? TensorList{old, other} : TensorList{});
  KILN_TRACE("div_", TensorList({self, other}), {self});
  return self;
}

Tensor& add_(Tensor& self, double other) {
  detail::check_inplace(self, "add_");
  kernels::add_scalar_(*self.impl(), scalar_for(self, other));
  rebase(self, "AddBackward", {},
         [](const TensorList&, const TensorList& g) { return TensorList{g[0]}; });
  KILN_TRACE("add_scalar_", {self}, {self}, {"other", other});
  return self;
}

Tensor& mul_(Tensor& self, double other) {
  detail::check_inplace(self, "mul_");
  kernels::mul_scalar_(*self.impl(), scalar_for(self, other));
  rebase(self, "MulBackward", {},
         [other](const TensorList&, const TensorList& g) { return TensorList{g[0] * other}; });
  KILN_TRACE("mul_scalar_", {self}, {self}, {"other", other});
  return self;
}

Tensor& relu_(Tensor& self) {
  detail::check_inplace(self, "relu_");
  kernels::relu_(*self.impl());
  const bool needs = autograd::any_requires_grad({&self});
  Tensor result = needs ? self.detach().clone() : Tensor();
  rebase(
      self, "ReluBackward", {},
      [](const TensorList& s, const TensorList& g) {
        return TensorList{g[0] * gt(s[0], zeros_like(s[0])).to(g[0].dtype())};
      },
      needs ? TensorList{result} : TensorList{});
  KILN_TRACE("relu_", {self}, {self});
  return self;
}

// --- operators
// ------------------------------------------------------------------------------------

Tensor operator-(const Tensor& x) {
  return neg(x);
}
Tensor operator+(const Tensor& a, const Tensor& b) {
  return add(a, b);
}
Tensor operator-(const Tensor& a, const Tensor& b) {
  return sub(a, b);
}
Tensor operator*(const Tensor& a, const Tensor& b) {
  return mul(a, b);
}
Tensor operator/(const Tensor& a, const Tensor& b) {
  return div(a, b);
}
Tensor operator+(const Tensor& a, double b) {
  return add(a, b);
}
Tensor operator-(const Tensor& a, double b) {
  return add(a, -b);
}
Tensor operator*(const Tensor& a, double b) {
  return mul(a, b);
}
Tensor operator/(const Tensor& a, double b) {
  return div(a, b);
}
Tensor operator+(double a, const Tensor& b) {
  return add(b, a);
}
Tensor operator-(double a, const Tensor& b) {
  return rsub(b, a);
}
Tensor operator*(double a, const Tensor& b) {
  return mul(b, a);
}
Tensor operator/(double a, const Tensor& b) {
  return mul(reciprocal(b), a);
}
Tensor operator==(const Tensor& a, const Tensor& b) {
  return eq(a, b);
}
Tensor operator!=(const Tensor& a, const Tensor& b) {
  return ne(a, b);
}
Tensor operator<(const Tensor& a, const Tensor& b) {
  return lt(a, b);
}
Tensor operator<=(const Tensor& a, const Tensor& b) {
  return le(a, b);
}
Tensor operator>(const Tensor& a, const Tensor& b) {
  return gt(a, b);
}
Tensor operator>=(const Tensor& a, const Tensor& b) {
  return ge(a, b);
}
Tensor operator>(const Tensor& a, double b) {
  return binary(BinaryOp::Gt, a, b);
}
Tensor operator<(const Tensor& a, double b) {
  return binary(BinaryOp::Lt, a, b);
}
Tensor& operator+=(Tensor& a, const Tensor& b) {
  return add_(a, b);
}
Tensor& operator-=(Tensor& a, const Tensor& b) {
  return sub_(a, b);
}
Tensor& operator*=(Tensor& a, const Tensor& b) {
  return mul_(a, b);
}
Tensor& operator+=(Tensor& a, double b) {
  return add_(a, b);
}
Tensor& operator*=(Tensor& a, double b) {
  return mul_(a, b);
}

}  // namespace kiln
