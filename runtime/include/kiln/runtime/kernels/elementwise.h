#pragma once
// Elementwise kernels: unary, binary, comparison, logical, ternary (where, clamp) and the
// elementwise backward helpers of autograd.
//
// Semantics follow PyTorch:
// - Broadcasting: NumPy rules over any strides (broadcast_shape). `out` must already have the
//   broadcast shape (kernels never resize), must not have overlapping elements (no stride-0 dim of
//   size > 1) and may alias an input only exactly (same data, sizes and strides: in-place ops).
// - Type promotion (result_type): PyTorch's three tiers. Dimensioned tensors decide the dtype; a
//   0-dim tensor or a Scalar only raises the *category* (bool < integer < floating): an int32
//   tensor + int64 0-dim tensor -> int32, int32 tensor + 2.5 -> float32 (the default float),
//   float16 tensor + 2.5 -> float16, bool tensor + 3 -> int64.
// - The result is computed in the promoted dtype (float16/bfloat16 in float32) and then converted
//   to `out`'s dtype, which may differ when the cast is allowed (can_cast: never floating ->
//   integral, never non-bool -> bool), as in PyTorch's out= and in-place forms.
// - Float ops (exp, sigmoid, div, ...) on integer or bool inputs compute in float32.
// Errors name the op: "add: shapes [2, 3] and [4] do not broadcast (dim 1: 3 vs 4)".

#include <cstdint>
#include <optional>
#include <span>
#include <type_traits>

#include "kiln/runtime/tensor.h"

namespace kiln::kernels {

// A number that is not a tensor (PyTorch's Python scalar). Its kind (bool, integer or floating)
// matters for promotion: `x + 2` keeps an integer tensor integral, `x + 2.0` makes it float32.
struct Scalar {
  enum class Kind : uint8_t { Bool, Int, Float };
  Kind kind = Kind::Int;
  int64_t i = 0;  // valid for Bool and Int
  double d = 0;   // valid for Float; to_double() works for every kind

  Scalar() = default;
  template <typename T>
  requires std::is_arithmetic_v<T> Scalar(
      T v) {  // NOLINT: implicit on purpose (add_scalar_out(x, 2) and (x, 2.5))
    if constexpr (std::is_same_v<T, bool>) {
      kind = Kind::Bool;
      i = v ? 1 : 0;
      d = static_cast<double>(i);
    } else if constexpr (std::is_integral_v<T>) {
      kind = Kind::Int;
      i = static_cast<int64_t>(v);
      d = static_cast<double>(v);
    } else {
      kind = Kind::Float;
      d = static_cast<double>(v);
      i = 0;
    }
  }
  bool is_floating() const { return kind == Kind::Float; }
  bool is_integral() const { return kind == Kind::Int; }
  bool is_bool() const { return kind == Kind::Bool; }
  double to_double() const { return kind == Kind::Float ? d : static_cast<double>(i); }
  // The dtype PyTorch gives a wrapped number of this kind: bool, int64 or float32 (default float).
  DType default_dtype() const;
};

// ---- promotion and broadcasting -------------------------------------------------------------

// Promotion of two tensor dtypes (promote_types).
DType result_type(DType a, DType b);
// PyTorch's result_type for tensors (0-dim tensors only raise the category) and scalars.
DType result_type(const TensorImpl& a, const TensorImpl& b);
DType result_type(const TensorImpl& a, const TensorImpl& b, const TensorImpl& c);
DType result_type(const TensorImpl& a, const Scalar& b);
// Whether a value of dtype `from` may be written into an `out` of dtype `to` (PyTorch's canCast).
bool can_cast(DType from, DType to);
// The broadcast shape (NumPy rules); throws "op: shapes ... do not broadcast".
Dims broadcast_shape(std::span<const int64_t> a, std::span<const int64_t> b,
                     std::string_view op = "broadcast_shape");
Dims broadcast_shape(std::span<const int64_t> a, std::span<const int64_t> b,
                     std::span<const int64_t> c, std::string_view op = "broadcast_shape");

// ---- unary -----------------------------------------------------------------------------------

// The unary family of the op schema (ir/ops.toml: neg, abs, exp, ..., in its order; generated),
// then the kernel variants of ops whose schema entries carry attributes. Integer and bool inputs
// of an op whose schema says `integers = "float"` compute in float32. Sign: NaN -> NaN; round:
// half to even.
enum class UnaryOp : uint8_t {
#define KILN_UNARY_OP(name, value, keeps_integers) value,
#include "kiln/runtime/unary_ops.inc"
#undef KILN_UNARY_OP
  Gelu,       // x * Phi(x) (erf form)
  GeluTanh,   // tanh approximation (PyTorch approximate="tanh")
  LeakyRelu,  // param a = negative slope (default 0.01)
  Hardtanh,   // params a = min_val, b = max_val (default -1, 1)
};
std::string_view unary_op_name(UnaryOp op);
// Parameters of the parameterized unary ops; NaN means "the op's default".
struct UnaryParams {
  double a = __builtin_nan("");
  double b = __builtin_nan("");
};
// The parameters an op runs with: p's, else the op's default (leaky_relu 0.01, hardtanh -1, 1).
double unary_param_a(UnaryOp op, const UnaryParams& p);
double unary_param_b(UnaryOp op, const UnaryParams& p);
enum class GeluApproximate : uint8_t { None, Tanh };

// The dtype of unary(op, x): x's dtype, or float32 for a float op on an integer/bool input.
DType unary_result_type(UnaryOp op, DType x);
void unary_out(UnaryOp op, const TensorImpl& x, TensorImpl& out, const UnaryParams& params = {});
TensorImplPtr unary(UnaryOp op, const TensorImpl& x, const UnaryParams& params = {});

void neg_out(const TensorImpl& x, TensorImpl& out);
void abs_out(const TensorImpl& x, TensorImpl& out);
void sign_out(const TensorImpl& x, TensorImpl& out);
void relu_out(const TensorImpl& x, TensorImpl& out);
void floor_out(const TensorImpl& x, TensorImpl& out);
void ceil_out(const TensorImpl& x, TensorImpl& out);
void round_out(const TensorImpl& x, TensorImpl& out);
void exp_out(const TensorImpl& x, TensorImpl& out);
void log_out(const TensorImpl& x, TensorImpl& out);
void log1p_out(const TensorImpl& x, TensorImpl& out);
void sqrt_out(const TensorImpl& x, TensorImpl& out);
void rsqrt_out(const TensorImpl& x, TensorImpl& out);
void sin_out(const TensorImpl& x, TensorImpl& out);
void cos_out(const TensorImpl& x, TensorImpl& out);
void tanh_out(const TensorImpl& x, TensorImpl& out);
void sigmoid_out(const TensorImpl& x, TensorImpl& out);
void gelu_out(const TensorImpl& x, TensorImpl& out,
              GeluApproximate approximate = GeluApproximate::None);
void silu_out(const TensorImpl& x, TensorImpl& out);
void erf_out(const TensorImpl& x, TensorImpl& out);
void reciprocal_out(const TensorImpl& x, TensorImpl& out);
void leaky_relu_out(const TensorImpl& x, double negative_slope, TensorImpl& out);
void hardtanh_out(const TensorImpl& x, double min_val, double max_val, TensorImpl& out);
// In place: x = op(x). x must be floating for float ops (the result must fit x's dtype).
void unary_(UnaryOp op, TensorImpl& x, const UnaryParams& params = {});
void relu_(TensorImpl& x);

// ---- binary ----------------------------------------------------------------------------------

enum class BinaryOp : uint8_t {
  Add,  // a + alpha * b
  Sub,  // a - alpha * b
  Mul,
  Div,  // true division: integer / integer -> float32
  Pow,
  Maximum,  // NaN-propagating
  Minimum,  // NaN-propagating
  // Comparisons and logical ops: Bool results.
  Eq,
  Ne,
  Lt,
  Le,
  Gt,
  Ge,
  LogicalAnd,
  LogicalOr,
  LogicalXor,
};
std::string_view binary_op_name(BinaryOp op);
// Dtype of binary(op, a, b) for given operand dtypes (both treated as dimensioned tensors).
DType binary_result_type(BinaryOp op, DType a, DType b);

// out = op(a, b). alpha applies to Add and Sub only (must be integral for integral results).
void binary_out(BinaryOp op, const TensorImpl& a, const TensorImpl& b, TensorImpl& out,
                const Scalar& alpha = 1);
// out = op(a, s) and, with the scalar first, out = op(s, b) (rsub, scalar / tensor, 2 ** x).
void binary_out(BinaryOp op, const TensorImpl& a, const Scalar& s, TensorImpl& out,
                const Scalar& alpha = 1);
void binary_out(BinaryOp op, const Scalar& s, const TensorImpl& b, TensorImpl& out,
                const Scalar& alpha = 1);
TensorImplPtr binary(BinaryOp op, const TensorImpl& a, const TensorImpl& b,
                     const Scalar& alpha = 1);
TensorImplPtr binary(BinaryOp op, const TensorImpl& a, const Scalar& s, const Scalar& alpha = 1);

void add_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out, const Scalar& alpha = 1);
void sub_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out, const Scalar& alpha = 1);
void mul_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out);
void div_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out);
void pow_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out);
void maximum_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out);
void minimum_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out);
void add_scalar_out(const TensorImpl& a, const Scalar& s, TensorImpl& out, const Scalar& alpha = 1);
void sub_scalar_out(const TensorImpl& a, const Scalar& s, TensorImpl& out, const Scalar& alpha = 1);
void rsub_scalar_out(const TensorImpl& a, const Scalar& s, TensorImpl& out);  // s - a
void mul_scalar_out(const TensorImpl& a, const Scalar& s, TensorImpl& out);
void div_scalar_out(const TensorImpl& a, const Scalar& s, TensorImpl& out);
void pow_scalar_out(const TensorImpl& a, const Scalar& exponent, TensorImpl& out);

void eq_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out);
void ne_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out);
void lt_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out);
void le_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out);
void gt_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out);
void ge_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out);
void logical_and_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out);
void logical_or_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out);
void logical_xor_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out);
void logical_not_out(const TensorImpl& x, TensorImpl& out);

// In place: a = op(a, b) (= binary_out(op, a, b, a)); b broadcasts to a's shape.
void add_(TensorImpl& a, const TensorImpl& b, const Scalar& alpha = 1);
void sub_(TensorImpl& a, const TensorImpl& b, const Scalar& alpha = 1);
void mul_(TensorImpl& a, const TensorImpl& b);
void div_(TensorImpl& a, const TensorImpl& b);
void add_scalar_(TensorImpl& a, const Scalar& s);
void mul_scalar_(TensorImpl& a, const Scalar& s);

// ---- ternary ---------------------------------------------------------------------------------

// out = cond ? a : b with 3-way broadcasting; cond is any dtype (nonzero = true); the result dtype
// is result_type(a, b).
void where_out(const TensorImpl& cond, const TensorImpl& a, const TensorImpl& b, TensorImpl& out);
void where_out(const TensorImpl& cond, const TensorImpl& a, const Scalar& b, TensorImpl& out);
void where_out(const TensorImpl& cond, const Scalar& a, const Scalar& b, TensorImpl& out);
TensorImplPtr where(const TensorImpl& cond, const TensorImpl& a, const TensorImpl& b);
// out = min(max(x, lo), hi), NaN-propagating; an absent bound is not applied. At least one bound
// is required. If lo > hi every element becomes hi (as in PyTorch).
void clamp_out(const TensorImpl& x, std::optional<Scalar> lo, std::optional<Scalar> hi,
               TensorImpl& out);
void clamp_out(const TensorImpl& x, const TensorImpl* lo, const TensorImpl* hi, TensorImpl& out);
void clamp_(TensorImpl& x, std::optional<Scalar> lo, std::optional<Scalar> hi);

// ---- backward helpers (grad_input = f(grad_output, saved) in one pass) ------------------------

// grad * (saved > 0); saved is the forward's input or output (same sign pattern).
void relu_backward_out(const TensorImpl& grad, const TensorImpl& saved, TensorImpl& grad_input);
// grad where x > threshold, else 0.
void threshold_backward_out(const TensorImpl& grad, const TensorImpl& x, double threshold,
                            TensorImpl& grad_input);
// grad * out * (1 - out).
void sigmoid_backward_out(const TensorImpl& grad, const TensorImpl& out, TensorImpl& grad_input);
// grad * (1 - out^2).
void tanh_backward_out(const TensorImpl& grad, const TensorImpl& out, TensorImpl& grad_input);
void gelu_backward_out(const TensorImpl& grad, const TensorImpl& x, GeluApproximate approximate,
                       TensorImpl& grad_input);
// grad * s * (1 + x * (1 - s)), s = sigmoid(x).
void silu_backward_out(const TensorImpl& grad, const TensorImpl& x, TensorImpl& grad_input);
// x > 0 ? grad : grad * negative_slope.
void leaky_relu_backward_out(const TensorImpl& grad, const TensorImpl& x, double negative_slope,
                             TensorImpl& grad_input);
// (x <= min_val || x >= max_val) ? 0 : grad.
void hardtanh_backward_out(const TensorImpl& grad, const TensorImpl& x, double min_val,
                           double max_val, TensorImpl& grad_input);

}  // namespace kiln::kernels
