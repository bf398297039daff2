// The eager quantization ops: the runtime's kernels (kernels/quantize.h, kernels/qgemm.h),
// fake_quantize's straight-through gradient, and the trace records (kiln.quantize,
// kiln.dequantize, kiln.fake_quantize, kiln.fake_quantize_backward, kiln.qlinear, kiln.qconv2d,
// kiln.qadd, kiln.qavg_pool2d).

#include "kiln/runtime/kernels/quantize.h"
#include "../ops/kernel_params.h"
#include "kiln/autograd.h"
#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "kiln/quant.h"
#include "kiln/runtime/error.h"
#include "kiln/runtime/kernels/qgemm.h"

namespace kiln {
namespace {

// A 0-dim parameter made by a kiln op (the tracer records it as a constant).
Tensor scalar_tensor(double v, DType dtype) {
  return full(Dims{}, v, TensorOptions(dtype));
}

void check_dtype(const char* op, DType dtype) {
  KILN_CHECK(dtype == DType::Int8 || dtype == DType::UInt8 || dtype == DType::Int32, op,
             "expected dtype int8, uint8 or int32, got ", dtype_name(dtype));
}

void check_int8_dtype(const char* op, DType dtype) {
  KILN_CHECK(dtype == DType::Int8 || dtype == DType::UInt8, op,
             "expected an output dtype of int8 or uint8, got ", dtype_name(dtype));
}

kernels::QuantizedOperands operands(const Tensor& xs, const Tensor& xz, const QuantizedWeight& w,
                                    const Tensor& bias, const QuantizedOutput& y) {
  return {xs.impl(),
          xz.impl(),
          w.scale.impl(),
          w.zero_point.impl(),
          bias.defined() ? bias.impl() : nullptr,
          y.scale.impl(),
          y.zero_point.impl(),
          y.relu};
}

TensorList qoperands(const Tensor& x, const Tensor& xs, const Tensor& xz, const QuantizedWeight& w,
                     const Tensor& bias, const QuantizedOutput& y) {
  return TensorList({x, xs, xz, w.weight, w.scale, w.zero_point, bias, y.scale, y.zero_point});
}

}  // namespace

Tensor qlinear(const Tensor& input, const Tensor& input_scale, const Tensor& input_zero_point,
               const QuantizedWeight& weight, const Tensor& bias, const QuantizedOutput& output) {
  check_int8_dtype("qlinear", output.dtype);
  KILN_CHECK(input.dim() >= 1 && weight.weight.dim() == 2, "qlinear",
             "expected input of at least 1 dim and a 2-dim weight, got ", input.sizes(), " and ",
             weight.weight.sizes());
  Dims shape = input.sizes();
  shape.back() = weight.weight.size(0);
  Tensor out(kiln::empty(shape, output.dtype));
  kernels::qlinear_out(*input.impl(), *weight.weight.impl(),
                       operands(input_scale, input_zero_point, weight, bias, output), *out.impl());
  KILN_TRACE("qlinear", qoperands(input, input_scale, input_zero_point, weight, bias, output),
             {out}, {"dtype", static_cast<int64_t>(output.dtype)}, {"relu", output.relu});
  return out;
}

Tensor qconv2d(const Tensor& input, const Tensor& input_scale, const Tensor& input_zero_point,
               const QuantizedWeight& weight, const Tensor& bias, const QuantizedOutput& output,
               Dims stride, Dims padding, Dims dilation, int64_t groups) {
  check_int8_dtype("qconv2d", output.dtype);
  KILN_CHECK(stride.size() == 2 && padding.size() == 2 && dilation.size() == 2, "qconv2d",
             "expected 2 values each for stride, padding and dilation, got ", stride, ", ", padding,
             ", ", dilation);
  const kernels::Conv2dParams p = detail::conv2d_params(
      {stride[0], stride[1]}, {padding[0], padding[1]}, {dilation[0], dilation[1]}, groups);
  Tensor out(kiln::empty(kernels::conv2d_output_shape(input.sizes(), weight.weight.sizes(), p),
                         output.dtype));
  kernels::qconv2d_out(*input.impl(), *weight.weight.impl(),
                       operands(input_scale, input_zero_point, weight, bias, output), p,
                       *out.impl());
  KILN_TRACE("qconv2d", qoperands(input, input_scale, input_zero_point, weight, bias, output),
             {out}, {"stride", stride}, {"padding", padding}, {"dilation", dilation},
             {"groups", groups}, {"dtype", static_cast<int64_t>(output.dtype)},
             {"relu", output.relu});
  return out;
}

Tensor qlinear_dynamic(const Tensor& input, const QuantizedWeight& weight, const Tensor& bias) {
  KILN_CHECK(input.dim() >= 1 && weight.weight.dim() == 2, "qlinear_dynamic",
             "expected input of at least 1 dim and a 2-dim weight, got ", input.sizes(), " and ",
             weight.weight.sizes());
  Dims shape = input.sizes();
  shape.back() = weight.weight.size(0);
  Tensor out(kiln::empty(shape, DType::Float32));
  kernels::qlinear_dynamic_out(*input.impl(), *weight.weight.impl(), *weight.scale.impl(),
                               *weight.zero_point.impl(), bias.defined() ? bias.impl() : nullptr,
                               *out.impl());
  KILN_TRACE("qlinear_dynamic",
             TensorList({input, weight.weight, weight.scale, weight.zero_point, bias}), {out});
  return out;
}

Tensor qadd(const Tensor& input, const Tensor& input_scale, const Tensor& input_zero_point,
            const Tensor& other, const Tensor& other_scale, const Tensor& other_zero_point,
            const QuantizedOutput& output) {
  check_int8_dtype("qadd", output.dtype);
  Tensor out(kiln::empty(input.sizes(), output.dtype));
  kernels::qadd_out(
      *input.impl(), *other.impl(),
      {input_scale.impl(), input_zero_point.impl(), other_scale.impl(), other_zero_point.impl(),
       output.scale.impl(), output.zero_point.impl(), output.relu},
      *out.impl());
  KILN_TRACE("qadd",
             TensorList({input, input_scale, input_zero_point, other, other_scale, other_zero_point,
                         output.scale, output.zero_point}),
             {out}, {"dtype", static_cast<int64_t>(output.dtype)}, {"relu", output.relu});
  return out;
}

Tensor qavg_pool2d(const Tensor& input, const Tensor& input_scale, const Tensor& input_zero_point,
                   const QuantizedOutput& output, Dims kernel, Dims stride, Dims padding,
                   bool ceil_mode, bool count_include_pad) {
  constexpr const char* op = "qavg_pool2d";
  check_int8_dtype(op, output.dtype);
  KILN_CHECK(!output.relu, op, "expected no relu (an average of quantized values has none)");
  if (stride.empty()) stride = kernel;
  KILN_CHECK(kernel.size() == 2 && stride.size() == 2 && padding.size() == 2, op,
             "expected 2 values each for kernel, stride and padding, got ", kernel, ", ", stride,
             ", ", padding);
  kernels::Pool2dParams p = detail::pool2d_params(
      {kernel[0], kernel[1]}, Pair2{stride[0], stride[1]}, {padding[0], padding[1]}, 1, ceil_mode);
  p.count_include_pad = count_include_pad;
  KILN_CHECK(input.dim() == 3 || input.dim() == 4, op,
             "expected input of 3 or 4 dims ((N,)C,H,W), got ", input.sizes());
  Tensor out(kiln::empty(kernels::avg_pool2d_output_shape(input.sizes(), p), output.dtype));
  kernels::qavg_pool2d_out(
      *input.impl(),
      {input_scale.impl(), input_zero_point.impl(), output.scale.impl(), output.zero_point.impl()},
      p, *out.impl());
  KILN_TRACE(
      op, TensorList({input, input_scale, input_zero_point, output.scale, output.zero_point}),
      {out}, {"kernel", kernel}, {"stride", stride}, {"padding", padding}, {"ceil_mode", ceil_mode},
      {"count_include_pad", count_include_pad}, {"dtype", static_cast<int64_t>(output.dtype)});
  return out;
}

Tensor quantize(const Tensor& input, const Tensor& scale, const Tensor& zero_point, DType dtype,
                int64_t axis) {
  check_dtype("quantize", dtype);
  Tensor out(kiln::empty(input.sizes(), dtype));
  kernels::quantize_out(*input.impl(), *scale.impl(), *zero_point.impl(), {axis}, *out.impl());
  KILN_TRACE("quantize", TensorList({input, scale, zero_point}), {out}, {"axis", axis},
             {"dtype", static_cast<int64_t>(dtype)});
  return out;
}

Tensor dequantize(const Tensor& input, const Tensor& scale, const Tensor& zero_point,
                  int64_t axis) {
  Tensor out(kiln::empty(input.sizes(), DType::Float32));
  kernels::dequantize_out(*input.impl(), *scale.impl(), *zero_point.impl(), {axis}, *out.impl());
  KILN_TRACE("dequantize", TensorList({input, scale, zero_point}), {out}, {"axis", axis});
  return out;
}

Tensor fake_quantize(const Tensor& input, const Tensor& scale, const Tensor& zero_point,
                     int64_t quant_min, int64_t quant_max, int64_t axis) {
  const kernels::FakeQuantParams p{axis, quant_min, quant_max};
  Tensor out(kiln::empty(input.sizes(), DType::Float32));
  kernels::fake_quantize_out(*input.impl(), *scale.impl(), *zero_point.impl(), p, *out.impl());
  // The gradient flows to input only (scale and zero_point are observed, not learned).
  autograd::record(
      "FakeQuantizeBackward", {input}, {out}, {input, scale, zero_point}, {},
      [p](const TensorList& saved, const TensorList& g) {
        KILN_CHECK(!(autograd::grad_enabled() && g[0].defined() && g[0].requires_grad()),
                   "fake_quantize",
                   "double backward (create_graph through this op's gradient) is not supported");
        const Tensor &x = saved[0], &scale = saved[1], &zero_point = saved[2];
        Tensor grad = g[0].contiguous();
        Tensor gi(kiln::empty(x.sizes(), DType::Float32));
        kernels::fake_quantize_backward_out(*grad.impl(), *x.impl(), *scale.impl(),
                                            *zero_point.impl(), p, *gi.impl());
        KILN_TRACE("fake_quantize_backward", TensorList({grad, x, scale, zero_point}), {gi},
                   {"axis", p.axis}, {"quant_min", p.quant_min}, {"quant_max", p.quant_max});
        return TensorList{gi};
      });
  KILN_TRACE("fake_quantize", TensorList({input, scale, zero_point}), {out}, {"axis", axis},
             {"quant_min", quant_min}, {"quant_max", quant_max});
  return out;
}

Tensor quantize_per_tensor(const Tensor& input, double scale, int64_t zero_point, DType dtype) {
  return quantize(input, scalar_tensor(scale, DType::Float32),
                  scalar_tensor(double(zero_point), DType::Int64), dtype);
}

Tensor quantize_per_channel(const Tensor& input, const Tensor& scales, const Tensor& zero_points,
                            int64_t axis, DType dtype) {
  KILN_CHECK(scales.dim() == 1, "quantize_per_channel", "expected 1-dim scales, got ",
             scales.sizes());
  return quantize(input, scales, zero_points, dtype, axis);
}

Tensor fake_quantize_per_tensor_affine(const Tensor& input, double scale, int64_t zero_point,
                                       int64_t quant_min, int64_t quant_max) {
  return fake_quantize(input, scalar_tensor(scale, DType::Float32),
                       scalar_tensor(double(zero_point), DType::Int64), quant_min, quant_max);
}

Tensor fake_quantize_per_channel_affine(const Tensor& input, const Tensor& scale,
                                        const Tensor& zero_point, int64_t axis, int64_t quant_min,
                                        int64_t quant_max) {
  KILN_CHECK(scale.dim() == 1, "fake_quantize_per_channel_affine", "expected 1-dim scales, got ",
             scale.sizes());
  return fake_quantize(input, scale, zero_point, quant_min, quant_max, axis);
}

}  // namespace kiln
