#pragma once
// Reductions (sum, mean, prod, max/min, amax/amin, argmax/argmin, var/std, norm, logsumexp), the
// softmax family (softmax, log_softmax and their backward) and scans (cumsum, cumprod).
//
// Conventions (PyTorch's):
// - `dims` lists the dims to reduce; an empty list reduces every dim. Negative dims count from
//   the end; a repeated dim is an error. keepdim keeps reduced dims as size 1.
// - Outputs are caller-allocated with shape reduce_shape(self.sizes(), dims, keepdim) (any
//   strides) and the dtype named per op below; a mismatch is a kiln::Error naming the op.
// - Accumulation: float32/float16/bfloat16 in float32 with blocked pairwise summation, float64 in
//   float64, integers and bool in int64 (sum/prod of integers give Int64, as in PyTorch).
// - Floating max/min/amax/amin/argmax propagate NaN (the first NaN wins, as in PyTorch); ties
//   give the first index.
// - Results do not depend on the thread count: long reductions are split at fixed boundaries.

#include <optional>
#include <span>
#include <string_view>

#include "kiln/runtime/tensor.h"

namespace kiln::kernels {

// The output shape of reducing `dims` of `sizes` (empty `dims` = all dims).
Dims reduce_shape(std::span<const int64_t> sizes, std::span<const int64_t> dims, bool keepdim,
                  std::string_view op = "reduce");

// Output dtype of sum/prod/cumsum/cumprod: Int64 for integers and bool, else the input dtype.
DType sum_result_dtype(DType in);

// out dtype: sum_result_dtype(self). Sum of an empty reduction is 0, product 1.
void sum_out(const TensorImpl& self, std::span<const int64_t> dims, bool keepdim, TensorImpl& out);
void prod_out(const TensorImpl& self, std::span<const int64_t> dims, bool keepdim, TensorImpl& out);
// Floating only; out dtype = self dtype. Mean of an empty reduction is NaN.
void mean_out(const TensorImpl& self, std::span<const int64_t> dims, bool keepdim, TensorImpl& out);

// out dtype = self dtype; an empty reduction is an error.
void amax_out(const TensorImpl& self, std::span<const int64_t> dims, bool keepdim, TensorImpl& out);
void amin_out(const TensorImpl& self, std::span<const int64_t> dims, bool keepdim, TensorImpl& out);
// Values (self dtype) and Int64 indices along one dim.
void max_out(const TensorImpl& self, int64_t dim, bool keepdim, TensorImpl& values,
             TensorImpl& indices);
void min_out(const TensorImpl& self, int64_t dim, bool keepdim, TensorImpl& values,
             TensorImpl& indices);
// Over all elements; out has one element (0-dim), self dtype.
void max_all_out(const TensorImpl& self, TensorImpl& out);
void min_all_out(const TensorImpl& self, TensorImpl& out);
// Int64 indices; without a dim, the index into the flattened (row-major) tensor.
void argmax_out(const TensorImpl& self, std::optional<int64_t> dim, bool keepdim, TensorImpl& out);
void argmin_out(const TensorImpl& self, std::optional<int64_t> dim, bool keepdim, TensorImpl& out);

// Floating only; out dtype = self dtype. Divisor max(0, N - correction): unbiased = correction 1.
void var_out(const TensorImpl& self, std::span<const int64_t> dims, double correction, bool keepdim,
             TensorImpl& out);
void std_out(const TensorImpl& self, std::span<const int64_t> dims, double correction, bool keepdim,
             TensorImpl& out);

// Vector norm (torch.linalg.vector_norm): p = 2, 1, +-inf (max/min |x|), 0 (count of non-zeros)
// or any other p: (sum |x|^p)^(1/p). Floating only; out dtype = self dtype.
void norm_out(const TensorImpl& self, double p, std::span<const int64_t> dims, bool keepdim,
              TensorImpl& out);

// log(sum(exp(x))), computed stably; floating only. Empty reduction gives -inf.
void logsumexp_out(const TensorImpl& self, std::span<const int64_t> dims, bool keepdim,
                   TensorImpl& out);

// Along one dim; out has self's shape and dtype (floating only). Numerically stable (max
// subtracted). out may alias self.
void softmax_out(const TensorImpl& self, int64_t dim, TensorImpl& out);
void log_softmax_out(const TensorImpl& self, int64_t dim, TensorImpl& out);
// softmax over each row of a contiguous float32 [rows, D] block (D >= 1), in place, on the calling
// thread: softmax_out's row kernel, for fused kernels that normalize a tile they hold in cache.
void softmax_rows_f32_inplace(float* x, int64_t rows, int64_t D);
// grad_input = output * (grad_output - sum(grad_output * output, dim))
void softmax_backward_out(const TensorImpl& grad_output, const TensorImpl& output, int64_t dim,
                          TensorImpl& grad_input);
// grad_input = grad_output - exp(output) * sum(grad_output, dim)
void log_softmax_backward_out(const TensorImpl& grad_output, const TensorImpl& output, int64_t dim,
                              TensorImpl& grad_input);

// Inclusive scans along one dim; out has self's shape, dtype sum_result_dtype(self).
// Floating scans accumulate in float64.
void cumsum_out(const TensorImpl& self, int64_t dim, TensorImpl& out);
void cumprod_out(const TensorImpl& self, int64_t dim, TensorImpl& out);

}  // namespace kiln::kernels
