#pragma once
// Scaled dot-product attention in one kernel: softmax(scale · q kᵀ + mask) · v, the scores of a
// block of query rows computed, normalized and multiplied into the output while they are in
// cache, never stored as a [B, L, S] tensor (kiln.attention, made by passes/FuseAttention.cpp).

#include "kiln/runtime/tensor.h"

namespace kiln::kernels {

// q [B, L, D], k [B, S, D], v [B, S, Dv] -> out [B, L, Dv], all float32; seq_first: each of them
// stored with its first two dims swapped ([L, B, D], PyTorch's MultiheadAttention layout: the
// batch of heads between the sequence and the features). mask (optional, float32, rank <= 3)
// broadcasts to [B, L, S] and is added to the scaled scores (-inf: not attended; a row with no
// finite score gives NaN, as softmax does). Operands may be strided views; out must not overlap
// them. Bad shapes or dtypes throw "attention: expected ...".
void attention_out(const TensorImpl& q, const TensorImpl& k, const TensorImpl& v,
                   const TensorImpl* mask, double scale, bool seq_first, TensorImpl& out);

}  // namespace kiln::kernels
