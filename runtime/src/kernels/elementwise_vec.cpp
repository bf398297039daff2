// The baseline (AVX2+FMA) build of the vectorized float32 elementwise kernels, and the run-time
// choice between it and the AVX-512 build.
#include "elementwise_vec.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "kiln/runtime/target.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace kiln::kernels::ew {

// Defined in elementwise_avx512.cpp (nullptr when that file was built without AVX-512). Only
// called after the CPUID check below.
const VecTable* vec_table_avx512_unchecked();

namespace base {
#if defined(__AVX2__) && defined(__FMA__)
constexpr int W = 8;
typedef float vf __attribute__((vector_size(32)));
typedef int32_t vi __attribute__((vector_size(32)));
static inline vf v_sqrt(vf x) {
  return _mm256_sqrt_ps(x);
}
static inline vf v_floor(vf x) {
  return _mm256_round_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
}
static inline vf v_ceil(vf x) {
  return _mm256_round_ps(x, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC);
}
static inline vf v_rint(vf x) {
  return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
static inline vf v_fma(vf a, vf b, vf c) {
  return _mm256_fmadd_ps(a, b, c);
}
#else
// Portable build: 4 lanes, per-lane library calls where there is no generic vector operation.
constexpr int W = 4;
typedef float vf __attribute__((vector_size(16)));
typedef int32_t vi __attribute__((vector_size(16)));
#define KILN_LANEWISE(name, fn)                  \
  static inline vf name(vf x) {                  \
    for (int i = 0; i < W; ++i) x[i] = fn(x[i]); \
    return x;                                    \
  }
KILN_LANEWISE(v_sqrt, std::sqrt)
KILN_LANEWISE(v_floor, std::floor)
KILN_LANEWISE(v_ceil, std::ceil)
KILN_LANEWISE(v_rint, std::nearbyint)
#undef KILN_LANEWISE
static inline vf v_fma(vf a, vf b, vf c) {
  for (int i = 0; i < W; ++i) a[i] = std::fma(a[i], b[i], c[i]);
  return a;
}
#endif
#include "elementwise_vecmath.inc"
}  // namespace base

const VecTable& vec_table_baseline() {
  static const VecTable t = [] {
    VecTable v;
    base::fill_table(v);
    return v;
  }();
  return t;
}

const VecTable* vec_table_avx512() {
#if defined(__x86_64__) || defined(_M_X64)
  const rt::CpuFeatures& f = rt::host_target().features;
  if (!f.avx512f || !f.avx512dq || !f.avx512bw || !f.avx512vl) return nullptr;
  return vec_table_avx512_unchecked();
#else
  return nullptr;
#endif
}

// The active target description's ISA decides (a description without AVX-512 on an AVX-512 CPU
// gets the baseline table).
const VecTable& vec_table() {
  static const bool off = [] {
    const char* e = std::getenv("KILN_DISABLE_AVX512");
    return e && *e && *e != '0';
  }();
  const VecTable* wide =
      off || rt::active_target().isa != rt::VectorIsa::Avx512 ? nullptr : vec_table_avx512();
  return wide ? *wide : vec_table_baseline();
}

}  // namespace kiln::kernels::ew
