#pragma once
// Affine quantization in eager mode (issue #26's first layer): quantize / dequantize with explicit
// parameters, fake quantization with a straight-through gradient for quantization-aware training,
// and the observers that choose scales and zero points from calibration data.
//
//   q = clamp(round_half_even(x / scale) + zero_point, qmin, qmax),  x' = (q - zero_point) * scale
//
// scale (float32) and zero_point (int64 here; any integer dtype is accepted) are 0-dim (per
// tensor) or 1-dim with one value per index of `axis` (per channel). Names follow PyTorch
// (torch.quantize_per_tensor, torch.fake_quantize_per_channel_affine, torch.ao.quantization's
// observers); kiln has no quantized tensor type: an int8 / uint8 / int32 tensor and its
// parameters travel separately, as in ONNX's QuantizeLinear / DequantizeLinear.

#include <cstdint>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {

// int8, uint8 or int32 result.
Tensor quantize(const Tensor& input, const Tensor& scale, const Tensor& zero_point, DType dtype,
                int64_t axis = 1);
// float32 result; input int8, uint8 or int32.
Tensor dequantize(const Tensor& input, const Tensor& scale, const Tensor& zero_point,
                  int64_t axis = 1);
// dequantize(quantize(input)) over [quant_min, quant_max], in float32; its gradient passes where
// the value is in range and is 0 where it was clamped (the straight-through estimator).
Tensor fake_quantize(const Tensor& input, const Tensor& scale, const Tensor& zero_point,
                     int64_t quant_min, int64_t quant_max, int64_t axis = 1);

// PyTorch's spellings.
Tensor quantize_per_tensor(const Tensor& input, double scale, int64_t zero_point, DType dtype);
Tensor quantize_per_channel(const Tensor& input, const Tensor& scales, const Tensor& zero_points,
                            int64_t axis, DType dtype);
Tensor fake_quantize_per_tensor_affine(const Tensor& input, double scale, int64_t zero_point,
                                       int64_t quant_min, int64_t quant_max);
Tensor fake_quantize_per_channel_affine(const Tensor& input, const Tensor& scale,
                                        const Tensor& zero_point, int64_t axis, int64_t quant_min,
                                        int64_t quant_max);

// Integer linear and convolution (the runtime's kernels/qgemm.h), traced as kiln.qlinear /
// kiln.qconv2d: int32 sums of (input - input_zero_point) * (weight - weight_zero_point) plus an
// int32 bias (undefined: none) at input_scale * weight_scale, requantized to `dtype` (uint8 or
// int8) at output_scale / output_zero_point; `relu` clamps at the output zero point. input uint8
// or int8, weight int8 or uint8 with per-tensor (0-dim) or per-output-channel (1-dim) parameters;
// the other parameters 0-dim. Usually made by kiln::quant's convert or the Q/DQ folding pass.
struct QuantizedWeight {
  Tensor weight, scale, zero_point;
};
struct QuantizedOutput {
  Tensor scale, zero_point;
  DType dtype = DType::UInt8;
  bool relu = false;
};
Tensor qlinear(const Tensor& input, const Tensor& input_scale, const Tensor& input_zero_point,
               const QuantizedWeight& weight, const Tensor& bias, const QuantizedOutput& output);
Tensor qconv2d(const Tensor& input, const Tensor& input_scale, const Tensor& input_zero_point,
               const QuantizedWeight& weight, const Tensor& bias, const QuantizedOutput& output,
               Dims stride = {1, 1}, Dims padding = {0, 0}, Dims dilation = {1, 1},
               int64_t groups = 1);

// Dynamic quantization's linear (the runtime's kernels/qgemm.h), traced as kiln.qlinear_dynamic:
// the float32 input quantized per call to uint8 over [min(x, 0), max(x, 0)], int32 sums against
// the int8 (or uint8) weight, then acc * input_scale * weight_scale[o] + bias[o] in float32
// (bias float32, undefined: none). Usually made by kiln::quant::quantize_dynamic.
Tensor qlinear_dynamic(const Tensor& input, const QuantizedWeight& weight, const Tensor& bias);

// Integer add (the runtime's kernels/quantize.h), traced as kiln.qadd: quantize(relu?(
// dequantize(input) + dequantize(other))) in float32, the same bytes as those three ops. input
// and other uint8 or int8 of one shape with 0-dim parameters; output.dtype uint8 or int8.
Tensor qadd(const Tensor& input, const Tensor& input_scale, const Tensor& input_zero_point,
            const Tensor& other, const Tensor& other_scale, const Tensor& other_zero_point,
            const QuantizedOutput& output);

// Integer average pooling (the runtime's kernels/quantize.h), traced as kiln.qavg_pool2d:
// avg_pool2d's window (kernel, stride (empty: the kernel), padding, ceil_mode,
// count_include_pad) summed exactly over input - input_zero_point and requantized to output's
// dtype at input_scale / (output.scale * divisor), rounded half to even. 0-dim parameters;
// output.relu must be false.
Tensor qavg_pool2d(const Tensor& input, const Tensor& input_scale, const Tensor& input_zero_point,
                   const QuantizedOutput& output, Dims kernel, Dims stride = {},
                   Dims padding = {0, 0}, bool ceil_mode = false, bool count_include_pad = true);

}  // namespace kiln

#include "kiln/quant/observer.h"
#include "kiln/quant/sqnr.h"
