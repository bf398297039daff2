#pragma once
// embedding (a row gather with bounds checks) and its backward (dense gradient accumulation),
// and dropout given a precomputed keep-mask (the mask itself comes from the random kernels).
//
// DTypes: embedding forward copies rows of any dtype; its backward and dropout take float32 /
// float64 (float16 / bfloat16 computed in float32). Indices: any integer dtype (int64, int32, ...).

#include <cstdint>
#include <optional>
#include <span>

#include "kiln/runtime/tensor.h"

namespace kiln::kernels {

// indices.shape + [D] for weight [V, D].
Dims embedding_output_shape(std::span<const int64_t> indices, std::span<const int64_t> weight);
// out[..., :] = weight[indices[...], :]. Every index must be in [0, V).
void embedding_out(const TensorImpl& weight, const TensorImpl& indices, TensorImpl& out);
// grad_weight [V, D] (overwritten) = Σ over positions of grad_output rows, scattered by index.
// Rows equal to padding_idx (negative counts from V, as PyTorch) get no gradient;
// scale_grad_by_freq divides each row's gradient by the number of times its index occurs.
void embedding_backward_out(const TensorImpl& grad_output, const TensorImpl& indices,
                            std::optional<int64_t> padding_idx, bool scale_grad_by_freq,
                            TensorImpl& grad_weight);

// out = input * mask / (1 - p), mask Bool or UInt8 (nonzero = keep), broadcastable to input;
// p in [0, 1] (p == 1 gives zeros). Backward is the same op on grad_output.
void dropout_out(const TensorImpl& input, const TensorImpl& mask, double p, TensorImpl& out);
void dropout_backward_out(const TensorImpl& grad_output, const TensorImpl& mask, double p,
                          TensorImpl& grad_input);

}  // namespace kiln::kernels
