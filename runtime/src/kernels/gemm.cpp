// Reference GEMM (correct, slow). Replaced by the packed, blocked, CPUID-dispatched GEMM.
#include "kiln/runtime/kernels/gemm.h"

#include <algorithm>
#include <cmath>

namespace kiln::kernels {

float apply_activation(float x, const Epilogue& e) {
  switch (e.activation) {
    case Activation::None: return x;
    case Activation::Relu: return x > 0.0f ? x : 0.0f;
    case Activation::Relu6: return std::min(std::max(x, 0.0f), 6.0f);
    case Activation::Clamp: return std::min(std::max(x, e.clamp_min), e.clamp_max);
    case Activation::Gelu: return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f));
    case Activation::GeluTanh: {
      const float c = 0.79788456080286536f;  // sqrt(2/pi)
      return 0.5f * x * (1.0f + std::tanh(c * (x + 0.044715f * x * x * x)));
    }
    case Activation::Silu: return x / (1.0f + std::exp(-x));
    case Activation::Sigmoid: return 1.0f / (1.0f + std::exp(-x));
    case Activation::Tanh: return std::tanh(x);
  }
  return x;
}

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
           const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
           int64_t ldc, const Epilogue& e) {
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      float acc = 0.0f;
      for (int64_t k = 0; k < K; ++k) {
        const float a = trans_a ? A[k * lda + i] : A[i * lda + k];
        const float b = trans_b ? B[j * ldb + k] : B[k * ldb + j];
        acc += a * b;
      }
      float v = alpha * acc + (beta == 0.0f ? 0.0f : beta * C[i * ldc + j]);
      if (e.bias_kind == Epilogue::Bias::PerRow) v += e.bias[i];
      if (e.bias_kind == Epilogue::Bias::PerCol) v += e.bias[j];
      if (e.residual) v += e.residual[i * e.ld_residual + j];
      C[i * ldc + j] = apply_activation(v, e);
    }
  }
}

}  // namespace kiln::kernels
