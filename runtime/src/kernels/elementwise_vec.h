#pragma once
// Tables of contiguous float32 kernels for the transcendental and activation ops, built from the
// same source (elementwise_vecmath.inc) at two vector widths: AVX2 (8 lanes, baseline) and
// AVX-512 (16 lanes, elementwise_avx512.cpp, chosen at run time from CPUID).

#include <cstdint>

#include "kiln/runtime/kernels/elementwise.h"

namespace kiln::kernels::ew {

inline constexpr int kNumUnaryOps = static_cast<int>(UnaryOp::Hardtanh) + 1;

// out[0..n) = op(in[0..n)); a, b are the op's parameters (slope, min/max). out may equal in.
using VecUnaryFn = void (*)(float* out, const float* in, int64_t n, float a, float b);
// out[0..n) = f(g[i], x[i]) for the backward helpers. out may equal g or x.
using VecBinaryFn = void (*)(float* out, const float* g, const float* x, int64_t n);

struct VecTable {
  VecUnaryFn unary[kNumUnaryOps] = {};  // nullptr: no vector kernel, use the scalar path
  VecBinaryFn gelu_backward = nullptr;
  VecBinaryFn gelu_tanh_backward = nullptr;
  VecBinaryFn silu_backward = nullptr;
  VecBinaryFn sigmoid_backward = nullptr;  // (grad, out)
  VecBinaryFn tanh_backward = nullptr;     // (grad, out)
};

// The table for this machine: AVX-512 when the CPU has it (and KILN_DISABLE_AVX512 is unset),
// else AVX2 (or the portable build on other architectures).
const VecTable& vec_table();
// The individual tables (avx512 may be null when not compiled in); used by tests and dispatch.
const VecTable& vec_table_baseline();
const VecTable* vec_table_avx512();

}  // namespace kiln::kernels::ew
