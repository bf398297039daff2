#pragma once
// Convolutions (PyTorch semantics and names): conv2d / conv1d / conv_transpose2d, forward and
// backward. Layouts: input NCHW, weight OIHW (conv) or IOHW (transposed conv), bias [C_out].
//
// DTypes: float32 is the fast path (GEMM-based: 1x1/stride-1 as a direct GEMM, kxk through a
// column-tiled im2col into kernels::sgemm, depthwise as a direct vectorized kernel). float64 runs
// the same algorithms with a simple reference GEMM (for tests / finite differences). float16 and
// bfloat16 are converted to float32, computed, and converted back. Other dtypes are rejected:
//   conv2d: expected a floating dtype (float32, float64, float16, bfloat16), got int64
//
// All tensors may be non-contiguous; outputs are written in place whatever their strides.

#include <cstdint>
#include <memory>

#include "kiln/runtime/kernels/gemm.h"
#include "kiln/runtime/tensor.h"

namespace kiln::kernels {

struct Conv2dParams {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
  // Channels-last activations: input [N, H, W, C] and result [N, OH, OW, OC] (the weight stays
  // [OC, C / groups, KH, KW]). The int8 convolutions (qconv2d_out, qconv2d_add_out) only; the
  // float32 ones refuse it.
  bool channels_last = false;
};

// What runs on each output element after the bias, while the tile is still hot:
//   out = act(conv(x, w) + bias + residual)
// `residual` has the output's shape (any strides). Used to fuse conv + (folded) bn + add + relu.
// For float64 the same is applied in double precision.
struct ConvEpilogue {
  const TensorImpl* residual = nullptr;
  Activation activation = Activation::None;
  float clamp_min = 0.0f;  // Activation::Clamp
  float clamp_max = 0.0f;
  // After the activation (float32 only), on each block of the output as the algorithm finishes
  // it: the GEMM's blocks (im2col and 1x1 paths), each tile row's output rows of a channel
  // (Winograd), each band of rows (direct), each plane (depthwise; after the channel-interleaved
  // kernel for narrow maps). conv2d_out sets its origin.
  BlockEpilogue block;
};

// [N, C_out, H_out, W_out] from input [N, C_in, H, W] and weight [C_out, C_in/groups, KH, KW];
// checks ranks, channel counts, groups, params and that the output is not empty-by-error.
Dims conv2d_output_shape(std::span<const int64_t> input, std::span<const int64_t> weight,
                         const Conv2dParams& p);

// out = conv2d(input, weight) + bias (bias may be null) with the fused epilogue.
void conv2d_out(const TensorImpl& input, const TensorImpl& weight, const TensorImpl* bias,
                const Conv2dParams& p, TensorImpl& out, const ConvEpilogue& epilogue = {});

// A conv2d weight prepared once for repeated forward calls with that same weight (the constant
// weights of artifacts and compiled code): packed for the GEMM microkernel in use, or transformed
// for a fast algorithm (Winograd). Immutable once built, so threads and sessions share one.
class PreparedConv2dWeight {
 public:
  virtual ~PreparedConv2dWeight() = default;
  // Bytes it holds (reported by the artifact runtime's memory statistics).
  virtual size_t nbytes() const = 0;
  // "winograd" (F(4x4, 3x3): 3x3 stride-1 convs with enough output tiles), "gemm" (packed for
  // the GEMM microkernel, output positions across its vector lanes) or "gemm-ch" (output
  // channels across the lanes: small feature maps with many channels).
  virtual const char* algorithm() const = 0;
};
using PreparedConv2dWeightPtr = std::shared_ptr<const PreparedConv2dWeight>;

// Prepares float32 `weight` for inputs of `input_sizes` ([N, C, H, W]), which choose the
// algorithm; any input size runs correctly with it. Returns nullptr when nothing can be gained
// (other dtypes, depthwise convs, ...). Throws kiln::Error on inconsistent shapes, as conv2d_out
// would.
PreparedConv2dWeightPtr prepare_conv2d_weight(const TensorImpl& weight, const Conv2dParams& p,
                                              std::span<const int64_t> input_sizes);

// conv2d_out with a weight prepared from exactly `weight`'s current values (the caller's
// promise: only shapes are checked). `prepared` may be null; one that does not fit this call
// (other input sizes, or the GEMM ISA changed since) is ignored.
void conv2d_out(const TensorImpl& input, const TensorImpl& weight, const TensorImpl* bias,
                const Conv2dParams& p, TensorImpl& out, const ConvEpilogue& epilogue,
                const PreparedConv2dWeight* prepared);

// mean over each output plane of conv2d_out(input, weight, bias, epilogue) -- adaptive_avg_pool2d
// to 1x1 -- into out [N, C_out, 1, 1], in one call (kiln.conv2d_avgpool: a classifier head). No
// residual. `prepared` as for conv2d_out; with a gemm-ch weight the map is never written out.
Dims conv2d_avgpool_output_shape(std::span<const int64_t> input, std::span<const int64_t> weight,
                                 const Conv2dParams& p);
void conv2d_avgpool_out(const TensorImpl& input, const TensorImpl& weight, const TensorImpl* bias,
                        const Conv2dParams& p, TensorImpl& out, const ConvEpilogue& epilogue,
                        const PreparedConv2dWeight* prepared);

// Gradients of conv2d (without epilogue) given grad_output [N, C_out, H_out, W_out]. Any of the
// outputs may be null (not needed). grad_input has input's shape, grad_weight weight's shape,
// grad_bias [C_out]. All are overwritten (not accumulated).
void conv2d_backward_out(const TensorImpl& grad_output, const TensorImpl& input,
                         const TensorImpl& weight, const Conv2dParams& p, TensorImpl* grad_input,
                         TensorImpl* grad_weight, TensorImpl* grad_bias);

// conv1d: input [N, C_in, L], weight [C_out, C_in/groups, K]; runs as conv2d with H = 1.
struct Conv1dParams {
  int64_t stride = 1, padding = 0, dilation = 1, groups = 1;
};
Dims conv1d_output_shape(std::span<const int64_t> input, std::span<const int64_t> weight,
                         const Conv1dParams& p);
void conv1d_out(const TensorImpl& input, const TensorImpl& weight, const TensorImpl* bias,
                const Conv1dParams& p, TensorImpl& out, const ConvEpilogue& epilogue = {});
void conv1d_backward_out(const TensorImpl& grad_output, const TensorImpl& input,
                         const TensorImpl& weight, const Conv1dParams& p, TensorImpl* grad_input,
                         TensorImpl* grad_weight, TensorImpl* grad_bias);

// conv_transpose2d: input [N, C_in, H, W], weight [C_in, C_out/groups, KH, KW] (PyTorch layout),
// H_out = (H-1)*stride - 2*pad + dilation*(KH-1) + output_padding + 1. It is conv2d's grad_input.
struct ConvTranspose2dParams {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t output_pad_h = 0, output_pad_w = 0;  // must be < stride or < dilation (as PyTorch)
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
};
Dims conv_transpose2d_output_shape(std::span<const int64_t> input, std::span<const int64_t> weight,
                                   const ConvTranspose2dParams& p);
void conv_transpose2d_out(const TensorImpl& input, const TensorImpl& weight, const TensorImpl* bias,
                          const ConvTranspose2dParams& p, TensorImpl& out);
void conv_transpose2d_backward_out(const TensorImpl& grad_output, const TensorImpl& input,
                                   const TensorImpl& weight, const ConvTranspose2dParams& p,
                                   TensorImpl* grad_input, TensorImpl* grad_weight,
                                   TensorImpl* grad_bias);

}  // namespace kiln::kernels
