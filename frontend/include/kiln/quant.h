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

}  // namespace kiln

#include "kiln/quant/observer.h"
