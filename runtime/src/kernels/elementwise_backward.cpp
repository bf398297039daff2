// Backward helpers of the activations: grad_input = f(grad_output, saved) in one pass.
#include <cmath>

#include "elementwise_engine.h"
#include "elementwise_vec.h"
#include "kiln/runtime/cuda/eager.h"
#include "unary_formulas.h"

namespace kiln::kernels {

namespace {

enum class Bwd { Threshold, Sigmoid, Tanh, Gelu, GeluTanh, Silu, LeakyRelu, Hardtanh };

template <typename T>
void run_scalar_bwd(Bwd op, TensorImpl& out, const std::array<ew::In, 2>& ins, T pa, T pb) {
  auto go = [&](auto f) { ew::run<2, T, T, true>(out, ins, ew::BinaryLoop<T, T, decltype(f)>{f}); };
  switch (op) {
    case Bwd::Threshold:
      return go([pa](T g, T x) { return scalar::threshold_backward(g, x, pa); });
    case Bwd::LeakyRelu:
      return go([pa](T g, T x) { return scalar::leaky_relu_backward(g, x, pa); });
    case Bwd::Hardtanh:
      return go([pa, pb](T g, T x) { return scalar::hardtanh_backward(g, x, pa, pb); });
    case Bwd::Sigmoid:
      return go([](T g, T y) { return scalar::sigmoid_backward(g, y); });
    case Bwd::Tanh:
      return go([](T g, T y) { return scalar::tanh_backward(g, y); });
    case Bwd::Silu:
      return go([](T g, T x) { return scalar::silu_backward(g, x); });
    case Bwd::Gelu:
      return go([](T g, T x) { return scalar::gelu_backward(g, x); });
    case Bwd::GeluTanh:
      return go([](T g, T x) { return scalar::gelu_tanh_backward(g, x); });
  }
}

// The formula's name in unary_formulas.h (what the CUDA backend's generated kernel calls).
const char* bwd_formula(Bwd op) {
  switch (op) {
    case Bwd::Threshold:
      return "threshold_backward";
    case Bwd::LeakyRelu:
      return "leaky_relu_backward";
    case Bwd::Hardtanh:
      return "hardtanh_backward";
    case Bwd::Sigmoid:
      return "sigmoid_backward";
    case Bwd::Tanh:
      return "tanh_backward";
    case Bwd::Silu:
      return "silu_backward";
    case Bwd::Gelu:
      return "gelu_backward";
    case Bwd::GeluTanh:
      return "gelu_tanh_backward";
  }
  return "";
}
// The op's name in errors: the formula's, gelu for both of its forms.
const char* bwd_name(Bwd op) {
  return op == Bwd::GeluTanh ? "gelu_backward" : bwd_formula(op);
}
int bwd_params(Bwd op) {
  return op == Bwd::Hardtanh ? 2 : (op == Bwd::Threshold || op == Bwd::LeakyRelu) ? 1 : 0;
}

void backward_impl(Bwd op, const TensorImpl& grad, const TensorImpl& saved, TensorImpl& out,
                   double pa = 0, double pb = 0) {
  const std::string_view name = bwd_name(op);
  if (grad.device() != Device::CPU || saved.device() != Device::CPU || out.device() != Device::CPU)
      [[unlikely]] {
    const double params[] = {pa, pb};
    return cuda::formula_out(name, bwd_formula(op), grad, saved,
                             std::span<const double>(params, bwd_params(op)), out);
  }
  const DType promoted = result_type(grad, saved);
  // Masks (threshold, hardtanh) keep integer dtypes; the rest are float ops.
  const bool mask_op = op == Bwd::Threshold || op == Bwd::Hardtanh;
  const DType result = (mask_op || is_floating(promoted)) ? promoted : DType::Float32;
  const Dims shape = broadcast_shape(grad.sizes(), saved.sizes(), name);
  const TensorImpl* inputs[] = {&grad, &saved};
  ew::check_out(name, out, shape, result, inputs);
  if (out.numel() == 0) return;
  const std::array<ew::In, 2> ins{ew::make_in(grad, shape, name), ew::make_in(saved, shape, name)};
  ew::visit_compute(ew::opmath_dtype(result), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float>) {
      const ew::VecTable& vt = ew::vec_table();
      const ew::VecBinaryFn fn = op == Bwd::Gelu       ? vt.gelu_backward
                                 : op == Bwd::GeluTanh ? vt.gelu_tanh_backward
                                 : op == Bwd::Silu     ? vt.silu_backward
                                 : op == Bwd::Sigmoid  ? vt.sigmoid_backward
                                 : op == Bwd::Tanh     ? vt.tanh_backward
                                                       : nullptr;
      if (fn) {
        ew::run<2, float, float, false>(
            out, ins, [fn](float* o, const float* const* in, const bool*, int64_t n) {
              fn(o, in[0], in[1], n);
            });
        return;
      }
    }
    if constexpr (std::is_same_v<T, bool>) {
      // Only the masks reach here with bool (grad and saved both bool).
      ew::run<2, bool, bool, true>(
          out, ins,
          ew::BinaryLoop<bool, bool, bool (*)(bool, bool)>{[](bool g, bool x) { return g && x; }});
      (void)pa;
      (void)pb;
    } else {
      run_scalar_bwd<T>(op, out, ins, static_cast<T>(pa), static_cast<T>(pb));
    }
  });
}

}  // namespace

void relu_backward_out(const TensorImpl& grad, const TensorImpl& saved, TensorImpl& grad_input) {
  backward_impl(Bwd::Threshold, grad, saved, grad_input, 0.0);
}
void threshold_backward_out(const TensorImpl& grad, const TensorImpl& x, double threshold,
                            TensorImpl& grad_input) {
  backward_impl(Bwd::Threshold, grad, x, grad_input, threshold);
}
void sigmoid_backward_out(const TensorImpl& grad, const TensorImpl& out, TensorImpl& grad_input) {
  backward_impl(Bwd::Sigmoid, grad, out, grad_input);
}
void tanh_backward_out(const TensorImpl& grad, const TensorImpl& out, TensorImpl& grad_input) {
  backward_impl(Bwd::Tanh, grad, out, grad_input);
}
void gelu_backward_out(const TensorImpl& grad, const TensorImpl& x, GeluApproximate approximate,
                       TensorImpl& grad_input) {
  backward_impl(approximate == GeluApproximate::Tanh ? Bwd::GeluTanh : Bwd::Gelu, grad, x,
                grad_input);
}
void silu_backward_out(const TensorImpl& grad, const TensorImpl& x, TensorImpl& grad_input) {
  backward_impl(Bwd::Silu, grad, x, grad_input);
}
void leaky_relu_backward_out(const TensorImpl& grad, const TensorImpl& x, double negative_slope,
                             TensorImpl& grad_input) {
  backward_impl(Bwd::LeakyRelu, grad, x, grad_input, negative_slope);
}
void hardtanh_backward_out(const TensorImpl& grad, const TensorImpl& x, double min_val,
                           double max_val, TensorImpl& grad_input) {
  backward_impl(Bwd::Hardtanh, grad, x, grad_input, min_val, max_val);
}

}  // namespace kiln::kernels
