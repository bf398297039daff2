// Unary elementwise ops: float32 through the vector kernels of elementwise_vec.h, float64 and
// integers through scalar loops (which the compiler vectorizes where it can).
#include <cmath>
#include <limits>

#include "elementwise_engine.h"
#include "elementwise_vec.h"
#include "kiln/runtime/cuda/eager.h"
#include "unary_formulas.h"

namespace kiln::kernels {

namespace {

// Whether integer and bool inputs compute in float32 (the schema's `integers`).
bool is_float_op(UnaryOp op) {
  switch (op) {
#define KILN_UNARY_OP(name, value, keeps_integers) \
  case UnaryOp::value:                             \
    return !(keeps_integers);
#include "kiln/runtime/unary_ops.inc"
#undef KILN_UNARY_OP
    default:
      return true;
  }
}

// out[i] = f(in[i]) over contiguous blocks.
template <typename T, typename F>
struct UnaryLoop {
  F f;
  void operator()(T* out, const T* const* in, const bool*, int64_t n) const {
    const T* x = in[0];
    for (int64_t i = 0; i < n; ++i) out[i] = f(x[i]);
  }
};

template <typename T, typename F>
void run_scalar(TensorImpl& out, const ew::In& in, F f) {
  ew::run<1, T, T, false>(out, std::array<ew::In, 1>{in}, UnaryLoop<T, F>{f});
}

// Ops that keep an integer or bool dtype.
template <typename T>
void run_integral(UnaryOp op, TensorImpl& out, const ew::In& in) {
  constexpr bool kBool = std::is_same_v<T, bool>;
  switch (op) {
    case UnaryOp::Neg:
      if constexpr (!kBool) run_scalar<T>(out, in, [](T x) { return ew::wsub(T(0), x); });
      return;
    case UnaryOp::Abs:
      if constexpr (kBool || std::is_unsigned_v<T>) {
        run_scalar<T>(out, in, [](T x) { return x; });
      } else {
        run_scalar<T>(out, in, [](T x) { return x < 0 ? ew::wsub(T(0), x) : x; });
      }
      return;
    case UnaryOp::Sign:
      if constexpr (kBool) {
        run_scalar<T>(out, in, [](T x) { return x; });
      } else {
        run_scalar<T>(out, in, [](T x) { return static_cast<T>((x > 0) - (x < 0)); });
      }
      return;
    case UnaryOp::Relu:
      run_scalar<T>(out, in, [](T x) { return x < T(0) ? T(0) : x; });
      return;
    case UnaryOp::Floor:
    case UnaryOp::Ceil:
    case UnaryOp::Round:
      run_scalar<T>(out, in, [](T x) { return x; });
      return;
    default:
      fail(unary_op_name(op), "internal: not an integral op");
  }
}

// Floating ops in plain scalar code (float64, and float32 ops without a vector kernel): the
// schema's unary family through its formulas (unary_formulas.h), then the attribute variants.
template <typename T>
void run_floating(UnaryOp op, TensorImpl& out, const ew::In& in, T pa, T pb) {
  switch (op) {
#define KILN_UNARY_OP(name, value, keeps_integers) \
  case UnaryOp::value:                             \
    return run_scalar<T>(out, in, [](T x) { return scalar::name(x); });
#include "kiln/runtime/unary_ops.inc"
#undef KILN_UNARY_OP
    case UnaryOp::Gelu:
      return run_scalar<T>(out, in, [](T x) { return scalar::gelu(x); });
    case UnaryOp::GeluTanh:
      return run_scalar<T>(out, in, [](T x) { return scalar::gelu_tanh(x); });
    case UnaryOp::LeakyRelu:
      return run_scalar<T>(out, in, [pa](T x) { return scalar::leaky_relu(x, pa); });
    case UnaryOp::Hardtanh:
      return run_scalar<T>(out, in, [pa, pb](T x) { return scalar::hardtanh(x, pa, pb); });
  }
}

}  // namespace

double unary_param_a(UnaryOp op, const UnaryParams& p) {
  if (!std::isnan(p.a)) return p.a;
  return op == UnaryOp::LeakyRelu ? 0.01 : op == UnaryOp::Hardtanh ? -1.0 : 0.0;
}
double unary_param_b(UnaryOp op, const UnaryParams& p) {
  if (!std::isnan(p.b)) return p.b;
  return op == UnaryOp::Hardtanh ? 1.0 : 0.0;
}

std::string_view unary_op_name(UnaryOp op) {
  switch (op) {
#define KILN_UNARY_OP(name, value, keeps_integers) \
  case UnaryOp::value:                             \
    return #name;
#include "kiln/runtime/unary_ops.inc"
#undef KILN_UNARY_OP
    case UnaryOp::Gelu:
    case UnaryOp::GeluTanh:
      return "gelu";
    case UnaryOp::LeakyRelu:
      return "leaky_relu";
    case UnaryOp::Hardtanh:
      return "hardtanh";
  }
  return "unary";
}

DType unary_result_type(UnaryOp op, DType x) {
  return (is_float_op(op) && !is_floating(x)) ? DType::Float32 : x;
}

void unary_out(UnaryOp op, const TensorImpl& x, TensorImpl& out, const UnaryParams& params) {
  const std::string_view name = unary_op_name(op);
  KILN_CHECK(static_cast<int>(op) < ew::kNumUnaryOps, "unary", "invalid op ", static_cast<int>(op));
  const DType result = unary_result_type(op, x.dtype());
  KILN_CHECK(!(op == UnaryOp::Neg && x.dtype() == DType::Bool), name,
             "negation, the `-` operator, on a bool tensor is not supported; use logical_not");
  if (x.device() != Device::CPU || out.device() != Device::CPU) [[unlikely]] {
    return cuda::unary_out(op, x, out, params);
  }
  const TensorImpl* inputs[] = {&x};
  ew::check_out(name, out, x.sizes(), result, inputs);
  if (out.numel() == 0) return;
  const ew::In in = ew::make_in(x, out.sizes(), name);
  const double pa = unary_param_a(op, params), pb = unary_param_b(op, params);
  const DType compute = ew::opmath_dtype(result);
  ew::visit_compute(compute, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float>) {
      if (const ew::VecUnaryFn fn = ew::vec_table().unary[static_cast<int>(op)]) {
        const float fa = static_cast<float>(pa), fb = static_cast<float>(pb);
        ew::run<1, float, float, false>(out, std::array<ew::In, 1>{in},
                                        [fn, fa, fb](float* o, const float* const* i, const bool*,
                                                     int64_t n) { fn(o, i[0], n, fa, fb); });
        return;
      }
    }
    if constexpr (std::is_floating_point_v<T>) {
      run_floating<T>(op, out, in, static_cast<T>(pa), static_cast<T>(pb));
    } else {
      run_integral<T>(op, out, in);
    }
  });
}

TensorImplPtr unary(UnaryOp op, const TensorImpl& x, const UnaryParams& params) {
  auto out = empty(x.sizes(), unary_result_type(op, x.dtype()), x.device());
  unary_out(op, x, *out, params);
  return out;
}

void unary_(UnaryOp op, TensorImpl& x, const UnaryParams& params) {
  unary_out(op, x, x, params);
}
void relu_(TensorImpl& x) {
  unary_out(UnaryOp::Relu, x, x);
}

void neg_out(const TensorImpl& x, TensorImpl& out) {
  unary_out(UnaryOp::Neg, x, out);
}
void abs_out(const TensorImpl& x, TensorImpl& out) {
  unary_out(UnaryOp::Abs, x, out);
}
void sign_out(const TensorImpl& x, TensorImpl& out) {
  unary_out(UnaryOp::Sign, x, out);
}
void relu_out(const TensorImpl& x, TensorImpl& out) {
  unary_out(UnaryOp::Relu, x, out);
}
void floor_out(const TensorImpl& x, TensorImpl& out) {
  unary_out(UnaryOp::Floor, x, out);
}
void ceil_out(const TensorImpl& x, TensorImpl& out) {
  unary_out(UnaryOp::Ceil, x, out);
}
void round_out(const TensorImpl& x, TensorImpl& out) {
  unary_out(UnaryOp::Round, x, out);
}
void exp_out(const TensorImpl& x, TensorImpl& out) {
  unary_out(UnaryOp::Exp, x, out);
}
void log_out(const TensorImpl& x, TensorImpl& out) {
  unary_out(UnaryOp::Log, x, out);
}
void log1p_out(const TensorImpl& x, TensorImpl& out) {
  unary_out(UnaryOp::Log1p, x, out);
}
void sqrt_out(const TensorImpl& x, TensorImpl& out) {
  unary_out(UnaryOp::Sqrt, x, out);
}
void rsqrt_out(const TensorImpl& x, TensorImpl& out) {
  unary_out(UnaryOp::Rsqrt, x, out);
}
void sin_out(const TensorImpl& x, TensorImpl& out) {
  unary_out(UnaryOp::Sin, x, out);
}
void cos_out(const TensorImpl& x, TensorImpl& out) {
  unary_out(UnaryOp::Cos, x, out);
}
void tanh_out(const TensorImpl& x, TensorImpl& out) {
  unary_out(UnaryOp::Tanh, x, out);
}
void sigmoid_out(const TensorImpl& x, TensorImpl& out) {
  unary_out(UnaryOp::Sigmoid, x, out);
}
void gelu_out(const TensorImpl& x, TensorImpl& out, GeluApproximate approximate) {
  unary_out(approximate == GeluApproximate::Tanh ? UnaryOp::GeluTanh : UnaryOp::Gelu, x, out);
}
void silu_out(const TensorImpl& x, TensorImpl& out) {
  unary_out(UnaryOp::Silu, x, out);
}
void erf_out(const TensorImpl& x, TensorImpl& out) {
  unary_out(UnaryOp::Erf, x, out);
}
void reciprocal_out(const TensorImpl& x, TensorImpl& out) {
  unary_out(UnaryOp::Reciprocal, x, out);
}
void leaky_relu_out(const TensorImpl& x, double negative_slope, TensorImpl& out) {
  unary_out(UnaryOp::LeakyRelu, x, out, UnaryParams{negative_slope, 0.0});
}
void hardtanh_out(const TensorImpl& x, double min_val, double max_val, TensorImpl& out) {
  unary_out(UnaryOp::Hardtanh, x, out, UnaryParams{min_val, max_val});
}

}  // namespace kiln::kernels
