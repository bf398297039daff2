#pragma once
// 2-d resampling of (N, C, H, W) tensors with PyTorch's semantics (F.interpolate, modes
// 'nearest' and 'bilinear'), and its backward. Any input strides; outputs are written whole.
// DTypes: float32, float64 (float16/bfloat16 computed in float32); others are rejected.
//
// Source coordinates, per dim (in = input extent, out = output extent, o = output index):
//   step  = the user's scale factor s given ? 1/s : in/out       (align_corners: (in-1)/(out-1))
//   nearest:  i = o when out == in, o / 2 when out == 2 in (PyTorch's nearest_idx, whatever the
//             scale), else min(floor(o * step), in - 1)
//   bilinear: x = align_corners ? o * step : max((o + 0.5) * step - 0.5, 0); i0 = floor(x),
//             i1 = min(i0 + 1, in - 1), weights (1 - (x - i0), x - i0).
// The step is computed in float32 for float32 data, as PyTorch does, so indices match it.

#include <cstdint>
#include <span>
#include <string_view>

#include "kiln/runtime/tensor.h"

namespace kiln::kernels {

enum class InterpolateMode : int64_t { Nearest = 0, Bilinear = 1 };

struct InterpolateParams {
  InterpolateMode mode = InterpolateMode::Nearest;
  bool align_corners = false;  // bilinear only
  // The scale factors the output size came from (0 = none): when given, the source step is
  // 1/scale rather than in/out (they differ when in * scale is not an integer).
  double scale_h = 0, scale_w = 0;
};

// The output extent of one dim for a scale factor: floor(in * scale), as PyTorch computes it.
// Rejects non-finite or non-positive scales and results below 1 or above 2^40.
int64_t interpolate_output_size(std::string_view op, int64_t in, double scale);

// The output size comes from out's last two dims; leading dims must match input's.
void interpolate_out(const TensorImpl& input, const InterpolateParams& p, TensorImpl& out);
// grad_input (overwritten) has the input's shape; grad_output the output's.
void interpolate_backward_out(const TensorImpl& grad_output, const InterpolateParams& p,
                              TensorImpl& grad_input);

}  // namespace kiln::kernels
