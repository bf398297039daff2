#pragma once
// Private to the conv kernels: resolved conv2d geometry and the direct depthwise kernels.

#include <cstdint>

#include "kiln/runtime/kernels/conv.h"

namespace kiln::kernels::conv_detail {

struct ConvGeom {
  int64_t N = 0, C = 0, H = 0, W = 0;  // input
  int64_t O = 0, KH = 0, KW = 0;       // weight [O, C/G, KH, KW]
  int64_t Ho = 0, Wo = 0;              // output
  int64_t G = 1, Cg = 0, Og = 0;       // groups, channels per group
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;

  int64_t HW() const { return H * W; }
  int64_t HoWo() const { return Ho * Wo; }
  int64_t K() const { return Cg * KH * KW; }  // GEMM depth (rows of the column matrix)
  // 1x1, stride 1, no padding: the input plane block already is the column matrix.
  bool direct_1x1() const { return KH == 1 && KW == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0; }
  bool depthwise() const { return G == C && G == O && G > 1; }
};

// y[N, C, Ho, Wo] = depthwise(x, w) + bias, then residual and activation. All contiguous.
// bias / residual may be null.
void depthwise_conv2d_f32(const ConvGeom& g, const float* x, const float* w, const float* bias,
                          const float* residual, float* y, const ConvEpilogue& ep);

}  // namespace kiln::kernels::conv_detail
