#pragma once
// View operations: new TensorImpls that share the input's storage. No data moves. Each validates
// its arguments and names itself in errors.

#include <span>

#include "kiln/runtime/tensor.h"

namespace kiln::views {

// view/reshape share storage only when strides allow; `view` throws otherwise, `reshape` copies.
TensorImplPtr view(const TensorImpl& t, std::span<const int64_t> sizes);
TensorImplPtr reshape(const TensorImpl& t, std::span<const int64_t> sizes);
TensorImplPtr transpose(const TensorImpl& t, int64_t dim0, int64_t dim1);
TensorImplPtr permute(const TensorImpl& t, std::span<const int64_t> order);
// Elements start, start+step, ... < end along dim (end clamped to the size; negative start/end
// count from the end, as in Python).
TensorImplPtr slice(const TensorImpl& t, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
TensorImplPtr narrow(const TensorImpl& t, int64_t dim, int64_t start, int64_t length);
TensorImplPtr select(const TensorImpl& t, int64_t dim, int64_t index);
TensorImplPtr expand(const TensorImpl& t, std::span<const int64_t> sizes);
TensorImplPtr squeeze(const TensorImpl& t);
TensorImplPtr squeeze(const TensorImpl& t, int64_t dim);
TensorImplPtr unsqueeze(const TensorImpl& t, int64_t dim);
TensorImplPtr flatten(const TensorImpl& t, int64_t start_dim = 0, int64_t end_dim = -1);
TensorImplPtr as_strided(const TensorImpl& t, std::span<const int64_t> sizes,
                         std::span<const int64_t> strides, int64_t storage_offset);
// `t` itself when already contiguous, else a contiguous copy.
TensorImplPtr contiguous(const TensorImpl& t);

// Strides for viewing `t` with `sizes` without a copy, or empty Dims when impossible
// (the algorithm of PyTorch's computeStride: match chunks of contiguous dims).
bool compute_view_strides(const TensorImpl& t, std::span<const int64_t> sizes, Dims& strides_out);
// Resolves one -1 in a requested shape against numel.
Dims infer_size(std::span<const int64_t> sizes, int64_t numel, std::string_view op);

}  // namespace kiln::views
