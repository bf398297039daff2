#pragma once
// Matrix products on CUDA through cuBLASLt (loaded with dlopen), with its bias and ReLU epilogue.

#include "kiln/runtime/cuda/caching_allocator.h"
#include "kiln/runtime/tensor.h"

namespace kiln::cuda {

struct MatmulOptions {
  // TF32 tensor cores for float32 (10-bit mantissa products); off by default, as PyTorch's
  // torch.backends.cuda.matmul.allow_tf32.
  bool allow_tf32 = false;
};

// The options eager matmuls on CUDA tensors use (kernels::matmul_out); set once at start-up.
MatmulOptions& matmul_options();

// out[M, N] = a[M, K] @ b[K, N] (+ bias[N]) (then relu): float32 2-D tensors on the device. a and
// b may be row-major or transposed views (strides (1, rows)), so x @ w.t() copies nothing; out
// contiguous. Ordered on `stream`.
void matmul_out(const TensorImpl& a, const TensorImpl& b, const TensorImpl* bias, bool relu,
                TensorImpl& out, const MatmulOptions& options, StreamId stream);

}  // namespace kiln::cuda
