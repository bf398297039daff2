#pragma once
// The matmul family over TensorImpl (PyTorch names and semantics). Float32 runs on sgemm (with
// fused bias epilogues for addmm/linear); float64 on a blocked loop; float16/bfloat16 are converted
// to float32 and back. All operands (and `out`) share one dtype. Operands may be non-contiguous:
// a 2-D operand that is a transposed contiguous matrix is passed to the GEMM as such (no copy);
// other layouts are copied. `out` must already have the result shape (see the *_shape helpers) and
// may be any strided view; it must not overlap the inputs (except addmm's bias, which may be
// `out`).

#include <memory>

#include "kiln/runtime/kernels/gemm.h"
#include "kiln/runtime/tensor.h"

namespace kiln::kernels {

// torch.matmul: 1-D x 1-D -> dot (0-dim); 2-D x 2-D -> mm; 1-D x 2-D and 2-D x 1-D -> vector;
// otherwise batched, with a 1-D operand promoted to a matrix (and that dim removed afterwards) and
// the batch dims (all but the last two) broadcast.
// Throws "matmul: expected ..." for 0-dim operands, mismatched inner dims or unbroadcastable
// batches.
Dims matmul_shape(const TensorImpl& a, const TensorImpl& b);
void matmul_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out);

// a [n, k] x b [k, m] -> out [n, m]
void mm_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out);
// a [B, n, k] x b [B, k, m] -> out [B, n, m] (no broadcasting, as torch.bmm)
void bmm_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out);
// a [n, k] x v [k] -> out [n]
void mv_out(const TensorImpl& a, const TensorImpl& v, TensorImpl& out);
// a [n] . b [n] -> out [] (0-dim)
void dot_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out);
// out [n, m] = beta * bias + alpha * (a [n, k] x b [k, m]); bias broadcasts to [n, m]. beta == 0
// ignores bias (NaN there does not propagate), as torch.addmm.
void addmm_out(const TensorImpl& bias, const TensorImpl& a, const TensorImpl& b, double beta,
               double alpha, TensorImpl& out);

// A matmul's constant right operand b [K, N] packed once as sgemm's right operand: null unless a
// contiguous float32 matrix on the CPU. matmul_packed_out: out = a · b for a [..., K] (or [K])
// and out contiguous float32 on the CPU, on `packed` (from prepare_matmul_operand(b)); false, with
// nothing done, when those do not hold (then matmul_out).
std::shared_ptr<const SgemmPacked> prepare_matmul_operand(const TensorImpl& b);
bool matmul_packed_out(const TensorImpl& a, const TensorImpl& b, const SgemmPacked& packed,
                       TensorImpl& out, const BlockEpilogue& block = {});

// matmul_out, then `block` (an epilogue generated code runs in place, gemm.h) on the result: on
// each block an sgemm finishes where the product is one GEMM or a batch of them, else (a dot, a
// matrix-vector product) over the whole result once it is computed. `out` must be dense float32
// on the CPU ("matmul: expected a dense float32 out ..."). `packed`: b from
// prepare_matmul_operand, or null.
void matmul_epilogue_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out,
                         const BlockEpilogue& block, const SgemmPacked* packed = nullptr);

// torch.nn.functional.linear: out [..., out_features] = input [..., in] x weight [out, in]^T +
// bias.
Dims linear_shape(const TensorImpl& input, const TensorImpl& weight);
void linear_out(const TensorImpl& input, const TensorImpl& weight, const TensorImpl* bias,
                TensorImpl& out);

// A linear layer's constant weight [out, in] packed once as sgemm's right operand (its transpose,
// sgemm_pack_b): every call would otherwise pack it again, or (a few rows of input: an RNN step)
// take dot products that reduce across vector lanes. Null unless a contiguous float32 matrix on
// the CPU.
std::shared_ptr<const SgemmPacked> prepare_linear_weight(const TensorImpl& weight);

// out = act(input Wᵀ + bias + residual) as one sgemm with its epilogue (e: activation and clamp;
// its bias and residual fields are set here), for contiguous float32 CPU operands (residual shaped
// like out); false, with nothing done, for other dtypes and layouts. `packed`: the weight from
// prepare_linear_weight, used when it was packed for this weight's shape. Bad shapes throw
// "linear: expected ...".
bool linear_gemm_out(const TensorImpl& input, const TensorImpl& weight, const TensorImpl* bias,
                     const TensorImpl* residual, Epilogue e, TensorImpl& out,
                     const SgemmPacked* packed = nullptr);
// The fused linear for any operands: linear_gemm_out where it applies, else linear_out, the
// residual added and the activation applied as separate steps.
void linear_fused_out(const TensorImpl& input, const TensorImpl& weight, const TensorImpl* bias,
                      const TensorImpl* residual, const Epilogue& e, TensorImpl& out,
                      const SgemmPacked* packed = nullptr);

// linear_fused_out whose input x (of shape `x_shape`) is not computed: `prologue` (generated code,
// gemm.h's BlockEpilogue signature) writes x's elements, at the flat offsets it is given, into a
// scratch block of rows, and the product takes each block right after it is written, while it is
// in cache; x is never stored whole. `out` must be dense float32 on the CPU and `res` (or null)
// shaped like it; e.block, when set, runs as in linear_fused_out. A weight without `packed` is
// packed once per call when the input takes several blocks. Shapes are checked as linear's
// ("linear: expected ...").
void linear_prologue_out(const Dims& x_shape, const BlockEpilogue& prologue, const TensorImpl& w,
                         const TensorImpl* bias, const TensorImpl* res, const Epilogue& e,
                         TensorImpl& o, const SgemmPacked* packed = nullptr);

// matmul_out of an input x (of `x_shape`, computed by `prologue` as for linear_prologue_out)
// and a [K, N] right operand b, with `block` (or none) as matmul_epilogue_out's; `packed`: b from
// prepare_matmul_operand, or null.
void matmul_prologue_out(const Dims& x_shape, const BlockEpilogue& prologue, const TensorImpl& b,
                         TensorImpl& o, const BlockEpilogue& block = {},
                         const SgemmPacked* packed = nullptr);

}  // namespace kiln::kernels
