// Registry entries of the elementwise ops: unary, binary, comparison, clamp, where, casts.
// Each ends in the same runtime kernel eager mode calls (kernels/elementwise.h).

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "common.h"
#include "kiln/runtime/kernels/copy.h"
#include "kiln/runtime/kernels/elementwise.h"

namespace kiln::rt::ops {
namespace {

using kernels::BinaryOp;
using kernels::UnaryOp;

struct UnaryEntry {
  std::string_view name;
  UnaryOp op;
};
// The schema's unary ops with `unary_kernel` (ir/ops.toml), generated.
constexpr UnaryEntry kUnary[] = {
#define KILN_UNARY_OP(name, value, keeps_integers) {#name, UnaryOp::value},
#include "kiln/runtime/unary_ops.inc"
#undef KILN_UNARY_OP
};

struct BinaryEntry {
  std::string_view name;
  BinaryOp op;
};
constexpr BinaryEntry kBinary[] = {
    {"add", BinaryOp::Add},
    {"sub", BinaryOp::Sub},
    {"mul", BinaryOp::Mul},
    {"div", BinaryOp::Div},
    {"pow", BinaryOp::Pow},
    {"maximum", BinaryOp::Maximum},
    {"minimum", BinaryOp::Minimum},
    {"eq", BinaryOp::Eq},
    {"ne", BinaryOp::Ne},
    {"lt", BinaryOp::Lt},
    {"le", BinaryOp::Le},
    {"gt", BinaryOp::Gt},
    {"ge", BinaryOp::Ge},
    {"logical_and", BinaryOp::LogicalAnd},
    {"logical_or", BinaryOp::LogicalOr},
};

struct UnaryParamsP : KernelParams {
  UnaryOp op = UnaryOp::Neg;
  kernels::UnaryParams p;
};

std::unique_ptr<KernelParams> decode_unary(const AttrMap& a) {
  auto p = std::make_unique<UnaryParamsP>();
  for (const UnaryEntry& e : kUnary) {
    if (e.name == a.op()) p->op = e.op;
  }
  if (a.op() == "gelu") p->op = a.b("approximate") ? UnaryOp::GeluTanh : UnaryOp::Gelu;
  if (a.op() == "leaky_relu") {
    p->op = UnaryOp::LeakyRelu;
    p->p.a = a.f("negative_slope");
  }
  return p;
}
void run_unary(const KernelCall& c) {
  const auto& p = params<UnaryParamsP>(c);
  kernels::unary_out(p.op, in(c, 0), out(c), p.p);
}

struct BinaryParamsP : KernelParams {
  BinaryOp op = BinaryOp::Add;
  double alpha = 1.0;
};
std::unique_ptr<KernelParams> decode_binary(const AttrMap& a) {
  auto p = std::make_unique<BinaryParamsP>();
  for (const BinaryEntry& e : kBinary) {
    if (e.name == a.op()) p->op = e.op;
  }
  p->alpha = a.f("alpha", 1.0);  // comparisons share this decoder and carry no alpha
  return p;
}
void run_binary(const KernelCall& c) {
  const auto& p = params<BinaryParamsP>(c);
  // Integer tensors keep an integral alpha (1 for every traced add).
  const kernels::Scalar alpha = p.alpha == std::floor(p.alpha) && std::fabs(p.alpha) < 9e15
                                    ? kernels::Scalar(static_cast<int64_t>(p.alpha))
                                    : kernels::Scalar(p.alpha);
  kernels::binary_out(p.op, in(c, 0), in(c, 1), out(c), alpha);
}

void run_logical_not(const KernelCall& c) {
  kernels::logical_not_out(in(c, 0), out(c));
}

std::unique_ptr<KernelParams> decode_clamp(const AttrMap& a) {
  auto p = std::make_unique<FloatParams>();
  p->v[0] = a.f("min");
  p->v[1] = a.f("max");
  return p;
}
void run_clamp(const KernelCall& c) {
  const auto& p = params<FloatParams>(c);
  std::optional<kernels::Scalar> lo, hi;
  if (!std::isinf(p.v[0])) lo = kernels::Scalar(p.v[0]);
  if (!std::isinf(p.v[1])) hi = kernels::Scalar(p.v[1]);
  kernels::clamp_out(in(c, 0), lo, hi, out(c));
}

void run_where(const KernelCall& c) {
  kernels::where_out(in(c, 0), in(c, 1), in(c, 2), out(c));
}

// to / clone / contiguous / copy: the result is the (last) input converted and broadcast into
// the output's shape and dtype.
void run_copy(const KernelCall& c) {
  kernels::copy_(out(c), in(c, c.inputs.size() - 1));
}

std::unique_ptr<KernelParams> decode_fill(const AttrMap& a) {
  auto p = std::make_unique<FloatParams>();
  p->v[0] = a.f("value");
  return p;
}
void run_fill(const KernelCall& c) {
  TensorImpl& o = out(c);
  const double v = params<FloatParams>(c).v[0];
  KILN_CHECK(o.is_contiguous(), "fill", "expected a contiguous output");
  visit_dtype(o.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* d = o.data_ptr<T>();
    T value{};
    if constexpr (std::is_integral_v<T>) {
      // Out-of-range float -> integer conversion is undefined: refuse it.
      // (max() + 1 is exact in double, max() itself may round up to it: int64's 2^63.)
      KILN_CHECK(v >= static_cast<double>(std::numeric_limits<T>::lowest()) &&
                     v < std::ldexp(1.0, std::numeric_limits<T>::digits),
                 "fill", "value ", v, " does not fit ", dtype_short_name(o.dtype()));
      value = static_cast<T>(v);
    } else {
      value = static_cast<T>(static_cast<float>(v));
    }
    for (int64_t i = 0; i < o.numel(); ++i) d[i] = value;
  });
}

}  // namespace

void register_elementwise(Registry& r) {
  for (const UnaryEntry& e : kUnary)
    r.add(with_signature(
        {.name = e.name, .decode = decode_unary, .run = run_unary, .inplace_ok = true}));
  r.add(with_signature(
      {.name = "gelu", .decode = decode_unary, .run = run_unary, .inplace_ok = true}));
  r.add(with_signature(
      {.name = "leaky_relu", .decode = decode_unary, .run = run_unary, .inplace_ok = true}));
  for (const BinaryEntry& e : kBinary)
    r.add(with_signature(
        {.name = e.name, .decode = decode_binary, .run = run_binary, .inplace_ok = true}));
  r.add(with_signature({.name = "logical_not", .run = run_logical_not, .inplace_ok = true}));
  r.add(with_signature(
      {.name = "clamp", .decode = decode_clamp, .run = run_clamp, .inplace_ok = true}));
  r.add(with_signature({.name = "where", .run = run_where, .inplace_ok = true}));
  r.add(with_signature({.name = "to", .run = run_copy, .inplace_ok = true}));
  r.add(with_signature({.name = "clone", .run = run_copy, .inplace_ok = true}));
  r.add(with_signature({.name = "copy", .run = run_copy, .inplace_ok = true}));
  r.add(
      with_signature({.name = "fill", .decode = decode_fill, .run = run_fill, .inplace_ok = true}));
}

}  // namespace kiln::rt::ops
