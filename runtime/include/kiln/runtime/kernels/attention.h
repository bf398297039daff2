#pragma once
// Scaled dot-product attention in one kernel: softmax(scale · q kᵀ + mask) · v, the scores of a
// block of query rows computed, normalized and multiplied into the output while they are in
// cache, never stored as a [B, L, S] tensor (kiln.attention, made by passes/FuseAttention.cpp).

#include "kiln/runtime/tensor.h"

namespace kiln::kernels {

// q [B, L, D], k [B, S, D], v [B, S, Dv] -> out [B, L, Dv], all float32, or with two batch dims
// ([B, H, L, D]: heads apart); seq_first: each of them stored with the sequence before the (inner)
// batch dim ([L, B, D], PyTorch's MultiheadAttention layout; [B, L, H, D], the layout a reshape of
// the projection gives before heads are transposed out). mask (optional, float32, rank <= the
// operands') broadcasts to the scores [(B,) H, L, S] and is added to the scaled scores (-inf: not
// attended; a row with no finite score gives NaN, as softmax does). Operands may be strided
// views; out must not overlap them. Bad shapes or dtypes throw "attention: expected ...".
void attention_out(const TensorImpl& q, const TensorImpl& k, const TensorImpl& v,
                   const TensorImpl* mask, double scale, bool seq_first, TensorImpl& out);

}  // namespace kiln::kernels
