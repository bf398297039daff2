#pragma once
// Single-precision GEMM with a fused epilogue — the one microkernel family that matmul, linear,
// conv (via im2col / 1x1) and generated code all call.
//
//   C[M,N] = act( alpha * op(A)[M,K] · op(B)[K,N] + beta * C + bias + residual )
//
// op(X) is X or Xᵀ; leading dimensions are in elements (row-major storage). The epilogue runs on
// each output tile while it is still in registers/cache.

#include <cstdint>

namespace kiln::kernels {

enum class Activation : uint8_t { None, Relu, Relu6, Clamp, Gelu, GeluTanh, Silu, Sigmoid, Tanh };

struct Epilogue {
  enum class Bias : uint8_t { None, PerRow, PerCol };
  Bias bias_kind = Bias::None;
  const float* bias = nullptr;      // M values (PerRow) or N values (PerCol)
  const float* residual = nullptr;  // [M,N] added after bias, before the activation
  int64_t ld_residual = 0;
  Activation activation = Activation::None;
  float clamp_min = 0.0f;  // for Activation::Clamp
  float clamp_max = 0.0f;
};

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
           const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
           int64_t ldc, const Epilogue& epilogue = {});

// Applies the activation to one value (shared by the GEMM epilogue and reference tests).
float apply_activation(float x, const Epilogue& e);

}  // namespace kiln::kernels
