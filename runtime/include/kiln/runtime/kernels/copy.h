#pragma once
// copy_: dst[...] = convert(src[...]), src broadcast to dst's shape, any dtypes, any strides.

#include "kiln/runtime/tensor.h"

namespace kiln::kernels {

void copy_(TensorImpl& dst, const TensorImpl& src);
// Broadcast strides of `t` against a target shape (stride 0 on broadcast dims), in elements.
// Throws "op: ..." when the shapes do not broadcast.
Dims broadcast_strides(const TensorImpl& t, std::span<const int64_t> shape, std::string_view op);
// The broadcast shape of two shapes (NumPy rules).
Dims broadcast_shapes(std::span<const int64_t> a, std::span<const int64_t> b, std::string_view op);

}  // namespace kiln::kernels
