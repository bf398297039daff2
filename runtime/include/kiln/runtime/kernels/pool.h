#pragma once
// 2-d pooling (PyTorch semantics and names): max_pool2d (with int64 indices), avg_pool2d,
// adaptive_avg_pool2d, each with its backward. Input is (N, C, H, W) or (C, H, W); any strides.
// DTypes: float32, float64 (and float16/bfloat16 computed in float32); others are rejected.
// Indices are flat positions inside each input plane (ih * W + iw), as PyTorch returns them.

#include <cstdint>
#include <span>

#include "kiln/runtime/tensor.h"

namespace kiln::kernels {

struct Pool2dParams {
  int64_t kernel_h = 1, kernel_w = 1;
  int64_t stride_h = 0, stride_w = 0;      // 0 = same as the kernel (PyTorch's default)
  int64_t pad_h = 0, pad_w = 0;            // at most half the (effective) kernel
  int64_t dilation_h = 1, dilation_w = 1;  // max_pool2d only
  bool ceil_mode = false;
  bool count_include_pad = true;  // avg_pool2d only
  int64_t divisor_override = 0;   // avg_pool2d only; 0 = none
};

// Output extent of one dim as PyTorch computes it (ceil_mode keeps the last window starting
// inside the input or the left padding).
int64_t pool_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation,
                         bool ceil_mode);

Dims max_pool2d_output_shape(std::span<const int64_t> input, const Pool2dParams& p);
// out and (optional) indices [.., C, H_out, W_out]; indices are Int64. input float, or uint8 / int8
// (quantized values: their max, exactly).
void max_pool2d_out(const TensorImpl& input, const Pool2dParams& p, TensorImpl& out,
                    TensorImpl* indices);
// grad_input (input's shape) = scatter-add of grad_output at indices; overwritten.
void max_pool2d_backward_out(const TensorImpl& grad_output, const TensorImpl& indices,
                             TensorImpl& grad_input);

Dims avg_pool2d_output_shape(std::span<const int64_t> input, const Pool2dParams& p);
void avg_pool2d_out(const TensorImpl& input, const Pool2dParams& p, TensorImpl& out);
void avg_pool2d_backward_out(const TensorImpl& grad_output, const Pool2dParams& p,
                             TensorImpl& grad_input);

// Output (out_h, out_w); window i spans [floor(i*H/out_h), ceil((i+1)*H/out_h)).
Dims adaptive_avg_pool2d_output_shape(std::span<const int64_t> input, int64_t out_h, int64_t out_w);
// The output size is out's last two dims.
void adaptive_avg_pool2d_out(const TensorImpl& input, TensorImpl& out);
void adaptive_avg_pool2d_backward_out(const TensorImpl& grad_output, TensorImpl& grad_input);

}  // namespace kiln::kernels
