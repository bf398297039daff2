#pragma once
// Affine quantization (ONNX QuantizeLinear / DequantizeLinear, PyTorch's quantize_per_tensor /
// quantize_per_channel / fake_quantize_*):
//   q = clamp(round_half_even(x / scale) + zero_point, qmin, qmax),   x' = (q - zero_point) * scale
// `scale` (float32) and `zero_point` (any integer dtype) are 0-dim (per tensor) or 1-dim with one
// value per index of `axis` of the input (per channel; a negative axis counts from the end).
// x / scale is a true division, as ONNX defines it (PyTorch multiplies by 1 / scale, which can
// round the other way at exact ties). NaN quantizes to zero_point; +-inf saturates.
//
// DTypes: x float32; q int8 [-128, 127], uint8 [0, 255] or int32; the fake-quantize range
// [quant_min, quant_max] is given (for example [-128, 127], or [0, 127] with reduce_range).

#include <cstdint>

#include "kiln/runtime/kernels/pool.h"
#include "kiln/runtime/tensor.h"

namespace kiln::kernels {

struct QuantParams {
  int64_t axis = 1;  // the per-channel axis (ignored for 0-dim scales)
};

// out: int8, uint8 or int32, input's shape; its dtype gives the clamp range.
void quantize_out(const TensorImpl& input, const TensorImpl& scale, const TensorImpl& zero_point,
                  QuantParams p, TensorImpl& out);
// out: float32, input's shape; input int8, uint8 or int32.
void dequantize_out(const TensorImpl& input, const TensorImpl& scale, const TensorImpl& zero_point,
                    QuantParams p, TensorImpl& out);

struct FakeQuantParams {
  int64_t axis = 1;
  int64_t quant_min = -128, quant_max = 127;
};
// out = dequantize(quantize(input)) in float32, the quantized range [quant_min, quant_max].
void fake_quantize_out(const TensorImpl& input, const TensorImpl& scale,
                       const TensorImpl& zero_point, FakeQuantParams p, TensorImpl& out);
// The straight-through estimator: grad_input = grad where quant_min <= round(x / scale) + zp <=
// quant_max, else 0 (PyTorch's fake_quantize backward).
void fake_quantize_backward_out(const TensorImpl& grad, const TensorImpl& input,
                                const TensorImpl& scale, const TensorImpl& zero_point,
                                FakeQuantParams p, TensorImpl& grad_input);

// The affine parameters of values in [min, max] quantized to [qmin, qmax], the range widened to
// include 0 (PyTorch's MinMax observer; dynamic quantization per call): scale =
// max((max(max, 0) - min(min, 0)) / (qmax - qmin), float32 epsilon), zero_point = clamp(qmin -
// round_half_even(min(min, 0) / scale), qmin, qmax). min and max finite, min <= max.
struct AffineParams {
  float scale = 1.0f;
  int64_t zero_point = 0;
};
AffineParams affine_qparams(float min, float max, int64_t qmin, int64_t qmax);

// Integer add (ONNX QLinearAdd, kiln.qadd): out = quantize(relu?(dequantize(input) +
// dequantize(other))) with per-tensor (0-dim) parameters, in float32 exactly as those three
// kernels compute it (the same bytes, in one pass). input and other uint8 or int8 (each its own)
// of one shape; out uint8 or int8 of that shape.
struct QAddOperands {
  const TensorImpl *input_scale = nullptr, *input_zero_point = nullptr;
  const TensorImpl *other_scale = nullptr, *other_zero_point = nullptr;
  const TensorImpl *output_scale = nullptr, *output_zero_point = nullptr;
  bool relu = false;
};
void qadd_out(const TensorImpl& input, const TensorImpl& other, const QAddOperands& q,
              TensorImpl& out);

// Integer average pooling (ONNX QLinearAveragePool, kiln.qavg_pool2d): each output the exact
// int32 sum of (input - input zero point) over avg_pool2d's window of `p` (padding adds 0),
// requantized as the integer layers' epilogue does it: round_half_even(sum * float32(
// input_scale / (output_scale * divisor))) + output zero point, saturated (the divisor as
// avg_pool2d counts it). input uint8 or int8 (N, C, H, W) or (C, H, W); out uint8 or int8 of
// avg_pool2d's shape; every parameter per tensor (0-dim).
struct QPoolOperands {
  const TensorImpl *input_scale = nullptr, *input_zero_point = nullptr;
  const TensorImpl *output_scale = nullptr, *output_zero_point = nullptr;
};
void qavg_pool2d_out(const TensorImpl& input, const QPoolOperands& q, const Pool2dParams& p,
                     TensorImpl& out);

}  // namespace kiln::kernels
