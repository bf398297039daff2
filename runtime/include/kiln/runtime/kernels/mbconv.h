#pragma once
// MobileNetV2's inverted-residual block ("MBConv") as one kernel, made by the --kiln-fuse-mbconv
// pass from three float32 convolutions:
//   e = act_e(conv1x1(x, expand_weight) + expand_bias)        (no expansion: e = x)
//   d = act_d(depthwise_kxk(e, dw_weight, stride, padding) + dw_bias)
//   y = act_p(conv1x1(d, project_weight) + project_bias + residual)
// It runs in bands of output rows, each thread carrying whole images (or, below one image per
// thread, row ranges) through the three steps: e and d live in per-thread band buffers that stay
// in cache, and only x and y travel to memory. Expanded rows shared by consecutive bands are kept,
// not recomputed. Same arithmetic as the three convs (same GEMM and depthwise kernels). Small maps
// run a whole image at a time channels-last instead, which spares the transposes NCHW costs there
// (conv_mbconv.cpp): the caller chooses (MBConvParams::strategy; the compiler records its choice
// on kiln.mbconv from the target's mbconv_whole_image_bytes), the kernel never re-decides.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "kiln/runtime/kernels/conv.h"
#include "kiln/runtime/tensor.h"

namespace kiln::kernels {

// How the block runs (the values of kiln.mbconv's `strategy`, ir/ops.toml's MBConvStrategy).
enum class MBConvStrategy : uint8_t {
  Banded = 0,        // bands of output rows in NCHW; the expanded band stays in L2
  ChannelsLast = 1,  // whole images channels-last (scratch: one image's expanded tensor)
};
const char* mbconv_strategy_name(MBConvStrategy s);
// The strategy an attribute holds; kiln::Error naming `op` and the value when it is none.
MBConvStrategy mbconv_strategy(int64_t value, std::string_view op);

struct MBConvParams {
  int64_t stride_h = 1, stride_w = 1;  // of the depthwise conv
  int64_t pad_h = 0, pad_w = 0;
  // Activations after each step (the `residual` fields are unused: see MBConvOperands).
  ConvEpilogue expand, dw, project;
  // Channels-last operands between consecutive blocks (--kiln-mbconv-channels-last): the input
  // (and the residual, which must then be the same layout as the output) holds [N, H, W, C] data,
  // the output [N, Ho, Wo, P], under the same [N, C, H, W] sizes. Only the channels-last strategy
  // reads and writes them: either set runs it, whatever `strategy` says.
  bool input_channels_last = false, output_channels_last = false;
  MBConvStrategy strategy = MBConvStrategy::Banded;
};

struct MBConvOperands {
  const TensorImpl* input = nullptr;           // [N, C, H, W]
  const TensorImpl* expand_weight = nullptr;   // [E, C, 1, 1], or null (no expansion: E = C)
  const TensorImpl* expand_bias = nullptr;     // [E] or null
  const TensorImpl* dw_weight = nullptr;       // [E, 1, KH, KW]
  const TensorImpl* dw_bias = nullptr;         // [E] or null
  const TensorImpl* project_weight = nullptr;  // [P, E, 1, 1]
  const TensorImpl* project_bias = nullptr;    // [P] or null
  const TensorImpl* residual = nullptr;        // [N, P, Ho, Wo] or null
};

// [N, P, Ho, Wo]; checks every shape (kiln::Error naming the operand, expected and actual).
Dims mbconv_output_shape(const MBConvOperands& ops, const MBConvParams& p);

// The weights prepared once (constant weights of artifacts and compiled code): the two 1x1 weights
// packed for the GEMM and, for channels-last blocks, the depthwise weight reordered, in the layouts
// `strategy` computes in (mbconv_out ignores an object prepared for another strategy): the one
// mbconv_run_strategy names for the parameters the block runs with.
class PreparedMBConv {
 public:
  virtual ~PreparedMBConv() = default;
  virtual size_t nbytes() const = 0;
  // "banded" or "channels-last".
  virtual const char* algorithm() const = 0;
};
std::shared_ptr<const PreparedMBConv> prepare_mbconv(const MBConvOperands& ops,
                                                     MBConvStrategy strategy);
// p.strategy, or channels-last where p has channels-last operands.
MBConvStrategy mbconv_run_strategy(const MBConvParams& p);

// out = the block above. `prepared` (from exactly these three weights' values) may be null.
void mbconv_out(const MBConvOperands& ops, const MBConvParams& p, TensorImpl& out,
                const PreparedMBConv* prepared = nullptr);

}  // namespace kiln::kernels
