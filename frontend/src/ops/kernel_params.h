#pragma once
// Internal to frontend/src: the runtime kernels' convolution and pooling parameters from the eager
// API's (h, w) pairs, written once for the float ops (ops/nn.cpp) and the quantized ones
// (quant/quantize.cpp).

#include <optional>

#include "kiln/nn_ops.h"
#include "kiln/runtime/kernels/conv.h"
#include "kiln/runtime/kernels/pool.h"

namespace kiln::detail {

inline kernels::Conv2dParams conv2d_params(Pair2 stride, Pair2 padding, Pair2 dilation,
                                           int64_t groups) {
  kernels::Conv2dParams p;
  p.stride_h = stride.h, p.stride_w = stride.w;
  p.pad_h = padding.h, p.pad_w = padding.w;
  p.dilation_h = dilation.h, p.dilation_w = dilation.w;
  p.groups = groups;
  return p;
}

// No stride: the kernel's size (PyTorch's default).
inline kernels::Pool2dParams pool2d_params(Pair2 kernel, std::optional<Pair2> stride, Pair2 padding,
                                           Pair2 dilation, bool ceil_mode) {
  kernels::Pool2dParams p;
  p.kernel_h = kernel.h, p.kernel_w = kernel.w;
  const Pair2 s = stride.value_or(kernel);
  p.stride_h = s.h, p.stride_w = s.w;
  p.pad_h = padding.h, p.pad_w = padding.w;
  p.dilation_h = dilation.h, p.dilation_w = dilation.w;
  p.ceil_mode = ceil_mode;
  return p;
}

}  // namespace kiln::detail
