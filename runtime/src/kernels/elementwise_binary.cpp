// Binary arithmetic (add, sub, mul, div, pow, maximum, minimum) and the dispatch shared with the
// comparison and logical ops: promotion, broadcasting, checks, scalar operands.
#include <cmath>
#include <optional>

#include "elementwise_engine.h"
#include "kiln/runtime/cuda/eager.h"

namespace kiln::kernels {

namespace {

bool is_compare(BinaryOp op) {
  return op >= BinaryOp::Eq && op <= BinaryOp::Ge;
}
bool is_logical(BinaryOp op) {
  return op >= BinaryOp::LogicalAnd;
}

// Integer power by squaring, wrapping like the other integer ops; negative exponents give 0 except
// for bases 1 and -1.
template <typename T>
T ipow(T base, T exp) {
  if constexpr (std::is_signed_v<T>) {
    if (exp < 0) {
      if (base == 1) return 1;
      if (base == -1) return (exp & 1) ? T(-1) : T(1);
      return 0;
    }
  }
  T result = 1;
  while (exp) {
    if (exp & 1) result = ew::wmul(result, base);
    exp = static_cast<T>(exp >> 1);
    base = ew::wmul(base, base);
  }
  return result;
}

// pow's exponent when it is one value for every element: a scalar, or a one-element float
// tensor (an exponent constant in an imported model, ONNX's Pow(x, 2) of a decomposed layer norm).
std::optional<double> single_exponent(const ew::BinOperand& a, const ew::BinOperand& b) {
  if (!a.t) return std::nullopt;
  if (!b.t) return b.s.to_double();
  if (b.t->numel() != 1) return std::nullopt;
  if (b.t->dtype() == DType::Float32) return *static_cast<const float*>(b.t->data());
  if (b.t->dtype() == DType::Float64) return *static_cast<const double*>(b.t->data());
  return std::nullopt;
}

template <typename T>
void run_arith(BinaryOp op, TensorImpl& out, const ew::BinOperand& a, const ew::BinOperand& b,
               std::span<const int64_t> shape, std::string_view name, const Scalar& alpha_s) {
  const T alpha = ew::scalar_as<T>(alpha_s);
  const bool unit_alpha = alpha_s.to_double() == 1.0;
  auto go = [&](auto f) { ew::run_binary<T, T>(out, a, b, shape, name, f); };
  switch (op) {
    case BinaryOp::Add:
      if (unit_alpha) return go([](T x, T y) { return ew::wadd(x, y); });
      if constexpr (std::is_floating_point_v<T>) {
        return go([alpha](T x, T y) { return x + alpha * y; });
      } else {
        return go([alpha](T x, T y) { return ew::wadd(x, ew::wmul(alpha, y)); });
      }
    case BinaryOp::Sub:
      if (unit_alpha) return go([](T x, T y) { return ew::wsub(x, y); });
      if constexpr (std::is_floating_point_v<T>) {
        return go([alpha](T x, T y) { return x - alpha * y; });
      } else {
        return go([alpha](T x, T y) { return ew::wsub(x, ew::wmul(alpha, y)); });
      }
    case BinaryOp::Mul:
      return go([](T x, T y) { return ew::wmul(x, y); });
    case BinaryOp::Div:
      if constexpr (std::is_floating_point_v<T>) return go([](T x, T y) { return x / y; });
      break;
    case BinaryOp::Pow:
      if constexpr (std::is_floating_point_v<T>) {
        if (const std::optional<double> exponent = single_exponent(a, b)) {
          // Exponents with exact cheaper forms (as PyTorch does).
          const double e = *exponent;
          if (e == 2.0) return go([](T x, T) { return x * x; });
          if (e == 3.0) return go([](T x, T) { return x * x * x; });
          if (e == 1.0) return go([](T x, T) { return x; });
          if (e == 0.5) return go([](T x, T) { return std::sqrt(x); });
          if (e == -1.0) return go([](T x, T) { return T(1) / x; });
        }
        return go([](T x, T y) { return std::pow(x, y); });
      } else if constexpr (std::is_same_v<T, bool>) {
        return go([](T x, T y) { return x || !y; });
      } else {
        return go([](T x, T y) { return ipow(x, y); });
      }
    case BinaryOp::Maximum:
      if constexpr (std::is_floating_point_v<T>) {
        return go([](T x, T y) { return (x > y || x != x) ? x : y; });
      } else {
        return go([](T x, T y) { return x > y ? x : y; });
      }
    case BinaryOp::Minimum:
      if constexpr (std::is_floating_point_v<T>) {
        return go([](T x, T y) { return (x < y || x != x) ? x : y; });
      } else {
        return go([](T x, T y) { return x < y ? x : y; });
      }
    default:
      break;
  }
  fail(name, "internal: op not supported for compute type ", dtype_of<T>);
}

DType binary_result(BinaryOp op, DType promoted) {
  if (is_compare(op) || is_logical(op)) return DType::Bool;
  if (op == BinaryOp::Div && !is_floating(promoted)) return DType::Float32;
  return promoted;
}

void binary_impl(BinaryOp op, const ew::BinOperand& a, const ew::BinOperand& b, TensorImpl& out,
                 const Scalar& alpha) {
  const std::string_view name = binary_op_name(op);
  KILN_CHECK(a.t || b.t, name, "expected at least one tensor operand");
  if (out.device() != Device::CPU || (a.t && a.t->device() != Device::CPU) ||
      (b.t && b.t->device() != Device::CPU)) [[unlikely]] {
    return cuda::binary_out(op, a.t, a.s, b.t, b.s, out, alpha);
  }
  const DType promoted = a.t && b.t ? result_type(*a.t, *b.t)
                         : a.t      ? result_type(*a.t, b.s)
                                    : result_type(*b.t, a.s);
  const DType result = binary_result(op, promoted);
  if (op == BinaryOp::Sub) {
    KILN_CHECK(promoted != DType::Bool, name,
               "subtraction, the `-` operator, with two bool tensors is not supported; use "
               "logical_xor");
  }
  if (op == BinaryOp::Add || op == BinaryOp::Sub) {
    KILN_CHECK(is_floating(promoted) || !alpha.is_floating(), name,
               "for integral input tensors, argument alpha must not be a floating point number, "
               "got ",
               alpha.d);
    KILN_CHECK(!alpha.is_bool() || promoted == DType::Bool, name,
               "boolean alpha only supported for bool results, got result type ", promoted);
  }
  const Dims shape = a.t && b.t ? broadcast_shape(a.t->sizes(), b.t->sizes(), name)
                     : a.t      ? a.t->sizes()
                                : b.t->sizes();
  const TensorImpl* inputs[] = {a.t, b.t};
  ew::check_out(name, out, shape, result, inputs);
  if (out.numel() == 0) return;
  if (is_compare(op) || is_logical(op)) {
    const DType compute = is_logical(op) ? DType::Bool : ew::opmath_dtype(promoted);
    ew::run_compare(op, compute, out, a, b, shape, name);
    return;
  }
  ew::visit_compute(ew::opmath_dtype(result), [&](auto tag) {
    using T = decltype(tag);
    run_arith<T>(op, out, a, b, shape, name, alpha);
  });
}

}  // namespace

std::string_view binary_op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add:
      return "add";
    case BinaryOp::Sub:
      return "sub";
    case BinaryOp::Mul:
      return "mul";
    case BinaryOp::Div:
      return "div";
    case BinaryOp::Pow:
      return "pow";
    case BinaryOp::Maximum:
      return "maximum";
    case BinaryOp::Minimum:
      return "minimum";
    case BinaryOp::Eq:
      return "eq";
    case BinaryOp::Ne:
      return "ne";
    case BinaryOp::Lt:
      return "lt";
    case BinaryOp::Le:
      return "le";
    case BinaryOp::Gt:
      return "gt";
    case BinaryOp::Ge:
      return "ge";
    case BinaryOp::LogicalAnd:
      return "logical_and";
    case BinaryOp::LogicalOr:
      return "logical_or";
    case BinaryOp::LogicalXor:
      return "logical_xor";
  }
  return "binary";
}

DType binary_result_type(BinaryOp op, DType a, DType b) {
  return binary_result(op, promote_types(a, b));
}

void binary_out(BinaryOp op, const TensorImpl& a, const TensorImpl& b, TensorImpl& out,
                const Scalar& alpha) {
  binary_impl(op, ew::BinOperand{&a, {}}, ew::BinOperand{&b, {}}, out, alpha);
}
void binary_out(BinaryOp op, const TensorImpl& a, const Scalar& s, TensorImpl& out,
                const Scalar& alpha) {
  binary_impl(op, ew::BinOperand{&a, {}}, ew::BinOperand{nullptr, s}, out, alpha);
}
void binary_out(BinaryOp op, const Scalar& s, const TensorImpl& b, TensorImpl& out,
                const Scalar& alpha) {
  binary_impl(op, ew::BinOperand{nullptr, s}, ew::BinOperand{&b, {}}, out, alpha);
}

TensorImplPtr binary(BinaryOp op, const TensorImpl& a, const TensorImpl& b, const Scalar& alpha) {
  const Dims shape = broadcast_shape(a.sizes(), b.sizes(), binary_op_name(op));
  if (a.device() != b.device()) cuda::check_same_device(binary_op_name(op), a, "self", b, "other");
  auto out = empty(shape, binary_result(op, result_type(a, b)), a.device());
  binary_out(op, a, b, *out, alpha);
  return out;
}
TensorImplPtr binary(BinaryOp op, const TensorImpl& a, const Scalar& s, const Scalar& alpha) {
  auto out = empty(a.sizes(), binary_result(op, result_type(a, s)), a.device());
  binary_out(op, a, s, *out, alpha);
  return out;
}

void add_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out, const Scalar& alpha) {
  binary_out(BinaryOp::Add, a, b, out, alpha);
}
void sub_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out, const Scalar& alpha) {
  binary_out(BinaryOp::Sub, a, b, out, alpha);
}
void mul_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out) {
  binary_out(BinaryOp::Mul, a, b, out);
}
void div_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out) {
  binary_out(BinaryOp::Div, a, b, out);
}
void pow_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out) {
  binary_out(BinaryOp::Pow, a, b, out);
}
void maximum_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out) {
  binary_out(BinaryOp::Maximum, a, b, out);
}
void minimum_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out) {
  binary_out(BinaryOp::Minimum, a, b, out);
}
void add_scalar_out(const TensorImpl& a, const Scalar& s, TensorImpl& out, const Scalar& alpha) {
  binary_out(BinaryOp::Add, a, s, out, alpha);
}
void sub_scalar_out(const TensorImpl& a, const Scalar& s, TensorImpl& out, const Scalar& alpha) {
  binary_out(BinaryOp::Sub, a, s, out, alpha);
}
void rsub_scalar_out(const TensorImpl& a, const Scalar& s, TensorImpl& out) {
  binary_out(BinaryOp::Sub, s, a, out);
}
void mul_scalar_out(const TensorImpl& a, const Scalar& s, TensorImpl& out) {
  binary_out(BinaryOp::Mul, a, s, out);
}
void div_scalar_out(const TensorImpl& a, const Scalar& s, TensorImpl& out) {
  binary_out(BinaryOp::Div, a, s, out);
}
void pow_scalar_out(const TensorImpl& a, const Scalar& exponent, TensorImpl& out) {
  binary_out(BinaryOp::Pow, a, exponent, out);
}

void add_(TensorImpl& a, const TensorImpl& b, const Scalar& alpha) {
  binary_out(BinaryOp::Add, a, b, a, alpha);
}
void sub_(TensorImpl& a, const TensorImpl& b, const Scalar& alpha) {
  binary_out(BinaryOp::Sub, a, b, a, alpha);
}
void mul_(TensorImpl& a, const TensorImpl& b) {
  binary_out(BinaryOp::Mul, a, b, a);
}
void div_(TensorImpl& a, const TensorImpl& b) {
  binary_out(BinaryOp::Div, a, b, a);
}
void add_scalar_(TensorImpl& a, const Scalar& s) {
  binary_out(BinaryOp::Add, a, s, a);
}
void mul_scalar_(TensorImpl& a, const Scalar& s) {
  binary_out(BinaryOp::Mul, a, s, a);
}

}  // namespace kiln::kernels
