// The AVX-512 (16-lane) build of the vectorized float32 elementwise kernels. Compiled with
// -mavx512f/bw/dq/vl; only reached through vec_table_avx512() after a CPUID check.
#include <cmath>
#include <cstring>

#include "elementwise_vec.h"

#if defined(__AVX512F__)
#include <immintrin.h>
// GCC 12 flags _mm512_undefined_ps() inside its own intrinsics (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace kiln::kernels::ew {

#if defined(__AVX512F__)
namespace wide {
constexpr int W = 16;
typedef float vf __attribute__((vector_size(64)));
typedef int32_t vi __attribute__((vector_size(64)));
static inline vf v_sqrt(vf x) {
  return _mm512_sqrt_ps(x);
}
static inline vf v_floor(vf x) {
  return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
}
static inline vf v_ceil(vf x) {
  return _mm512_roundscale_ps(x, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC);
}
static inline vf v_rint(vf x) {
  return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
static inline vf v_fma(vf a, vf b, vf c) {
  return _mm512_fmadd_ps(a, b, c);
}
#include "elementwise_vecmath.inc"
}  // namespace wide

const VecTable* vec_table_avx512_unchecked() {
  static const VecTable t = [] {
    VecTable v;
    wide::fill_table(v);
    return v;
  }();
  return &t;
}
#else
const VecTable* vec_table_avx512_unchecked() {
  return nullptr;
}
#endif

}  // namespace kiln::kernels::ew
