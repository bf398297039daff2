#pragma once
// One int8 convolution layer for the tests of qconv2d_add_out and the channels-last convolutions
// (test_qconv_add.cpp, test_qconv_channels_last.cpp): its geometry and quantization parameters
// that keep the sums mostly within the output's bytes.

#include "kiln/runtime/kernels/conv.h"
#include "quant_test_util.h"

namespace quant_test {

struct ConvGeometry {
  const char* name;
  int64_t N, C, H, W, O, K, stride, pad, groups;
  bool symmetric;  // weight zero points 0 (byte quads, the direct convolution), else random

  kiln::kernels::Conv2dParams params() const {
    kiln::kernels::Conv2dParams p;
    p.stride_h = p.stride_w = stride;
    p.pad_h = p.pad_w = pad;
    p.groups = groups;
    return p;
  }
  int64_t Ho() const { return (H + 2 * pad - K) / stride + 1; }
  int64_t Wo() const { return (W + 2 * pad - K) / stride + 1; }
};

// The input's, the weights' and the convolution result's parameters: scales that keep the
// convolution's sums in range (mostly unsaturated bytes).
struct ConvSides {
  Side x, w, conv;
};
inline ConvSides conv_sides(const ConvGeometry& s, kiln::DType x_dtype, kiln::DType conv_dtype) {
  return {side(0.02f, lo_of(x_dtype) + 5), side(0.01f, s.symmetric ? 0 : 3),
          side(0.02f * 0.01f * float(s.C / s.groups * s.K * s.K) / 8.0f,
               conv_dtype == kiln::DType::UInt8 ? 120 : -4)};
}

}  // namespace quant_test
