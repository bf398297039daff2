#pragma once
// Single-precision GEMM with a fused epilogue — the one microkernel family that matmul, linear,
// conv (via im2col / 1x1) and generated code all call.
//
//   C[M,N] = act( alpha * op(A)[M,K] · op(B)[K,N] + beta * C + bias + residual )
//
// op(X) is X or Xᵀ; leading dimensions are in elements (row-major storage). The epilogue runs on
// each output tile while it is still in registers/cache.

#include <cstddef>
#include <cstdint>
#include <memory>

namespace kiln::kernels {

enum class Activation : uint8_t { None, Relu, Relu6, Clamp, Gelu, GeluTanh, Silu, Sigmoid, Tanh };

// An elementwise epilogue the compiler generated (the chain that follows a product in the model,
// any chain of elementwise ops), run in place on each finished block of the output after the
// fixed part of the epilogue, while the block is still in cache:
//   fn(ctx, c, offset, ldc, rows, cols)
// c[r * ldc + j] (r < rows, j < cols) hold final values of the product; `offset` is the element
// index of c[0] in the output tensor (dense, row-major), from which the function finds the other
// operands' elements (ctx: their base pointers). The kernel calling the GEMM sets `origin` to the
// output's first element: offset = c - origin.
struct BlockEpilogue {
  using Fn = void (*)(const void* ctx, float* c, int64_t offset, int64_t ldc, int64_t rows,
                      int64_t cols);
  Fn fn = nullptr;
  const void* ctx = nullptr;
  const float* origin = nullptr;
  explicit operator bool() const { return fn != nullptr; }
  void apply(float* c, int64_t ldc, int64_t rows, int64_t cols) const {
    if (fn && rows > 0 && cols > 0) fn(ctx, c, c - origin, ldc, rows, cols);
  }
};

struct Epilogue {
  enum class Bias : uint8_t { None, PerRow, PerCol };
  Bias bias_kind = Bias::None;
  const float* bias = nullptr;      // M values (PerRow) or N values (PerCol)
  const float* residual = nullptr;  // [M,N] added after bias, before the activation
  int64_t ld_residual = 0;
  Activation activation = Activation::None;
  float clamp_min = 0.0f;  // for Activation::Clamp
  float clamp_max = 0.0f;
  BlockEpilogue block;  // after the activation (none: fn null)
};

// alpha == 0 or K == 0 still apply beta and the epilogue. beta == 0 never reads C. The residual
// must not overlap C. Leading dimensions must be at least the row length of their (stored) matrix
// unless that matrix has a single row. Runs on the thread pool (serially inside a parallel region).
void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
           const Epilogue& epilogue = {});

class SgemmPacked;
namespace gemm_detail {
struct KernelSet;
struct PackedView;
PackedView packed_view(const SgemmPacked& p);
std::shared_ptr<SgemmPacked> allocate_packed(const KernelSet& ks, bool is_b, int64_t outer,
                                             int64_t K, float** data);
}  // namespace gemm_detail

// One operand of sgemm packed once for many products with it (a constant weight): the copy
// sgemm makes of it on every call, laid out for the microkernel family active when it was packed
// (its products keep using that family, whatever set_sgemm_isa says later). Immutable: threads
// share one. sgemm_pack_a packs a left operand op(A)[M, K], sgemm_pack_b a right one op(B)[K, N].
class SgemmPacked {
 public:
  SgemmPacked(const SgemmPacked&) = delete;
  SgemmPacked& operator=(const SgemmPacked&) = delete;
  ~SgemmPacked();
  bool is_b() const { return is_b_; }
  int64_t outer() const { return outer_; }  // M of an A, N of a B
  int64_t depth() const { return depth_; }  // K
  size_t nbytes() const { return floats_ * sizeof(float); }

 private:
  SgemmPacked() = default;
  friend gemm_detail::PackedView gemm_detail::packed_view(const SgemmPacked&);
  friend std::shared_ptr<SgemmPacked> gemm_detail::allocate_packed(const gemm_detail::KernelSet&,
                                                                   bool, int64_t, int64_t, float**);
  bool is_b_ = false;
  int64_t outer_ = 0, depth_ = 0;
  const void* kernels_ = nullptr;  // the microkernel family (internal)
  float* data_ = nullptr;
  size_t floats_ = 0;
};

std::shared_ptr<const SgemmPacked> sgemm_pack_a(bool trans_a, int64_t M, int64_t K, const float* A,
                                                int64_t lda);
std::shared_ptr<const SgemmPacked> sgemm_pack_b(bool trans_b, int64_t K, int64_t N, const float* B,
                                                int64_t ldb);

// sgemm with op(A) from sgemm_pack_a: C[M, N] = act(alpha * A · op(B) + beta * C + ...).
void sgemm_packed_a(const SgemmPacked& A, bool trans_b, int64_t N, float alpha, const float* B,
                    int64_t ldb, float beta, float* C, int64_t ldc, const Epilogue& epilogue = {});
// sgemm with op(B) from sgemm_pack_b: C[M, N] = act(alpha * op(A) · B + beta * C + ...).
void sgemm_packed_b(bool trans_a, int64_t M, float alpha, const float* A, int64_t lda,
                    const SgemmPacked& B, float beta, float* C, int64_t ldc,
                    const Epilogue& epilogue = {});

// Microkernel family used by sgemm. Auto picks the best one this CPU supports (CPUID); the
// environment variable KILN_GEMM_ISA=avx512|avx2|neon|scalar overrides it at start-up (tests and
// benchmarks use that, or set_sgemm_isa, to exercise every path on one machine).
enum class GemmIsa : uint8_t { Auto, Avx512, Avx2, Neon, Scalar };
bool sgemm_isa_available(GemmIsa isa);
// Throws kiln::Error ("sgemm: ISA avx512 is not available on this CPU") for an unavailable ISA.
void set_sgemm_isa(GemmIsa isa);
// The ISA in use (never Auto).
GemmIsa sgemm_isa();
const char* gemm_isa_name(GemmIsa isa);

// Applies the activation to one value (shared by the GEMM epilogue and reference tests).
float apply_activation(float x, const Epilogue& e);

}  // namespace kiln::kernels
