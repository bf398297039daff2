#pragma once
// The fp32 FMA peak of one thread on this machine, measured once (not a constant tuned to one
// CPU): 12 independent FMA chains in registers at the widest vector width the active target
// description allows (AVX-512 or AVX2), the best of five runs of kRunSeconds each. The
// denominator of the benchmarks' "peak%" counters.

#include <immintrin.h>

#include <algorithm>
#include <chrono>

#include "kiln/runtime/target.h"

namespace kiln::bench {

constexpr double kRunSeconds = 0.02;

// Best FLOP/s of five runs of `step` (kInner iterations of 12 FMAs of `lanes` lanes).
template <typename Step>
double best_rate(Step step, int lanes) {
  constexpr int64_t kInner = 1 << 14;
  double best = 0.0;
  for (int rep = 0; rep < 5; ++rep) {
    int64_t iters = 0;
    const auto t0 = std::chrono::steady_clock::now();
    std::chrono::duration<double> dt{};
    do {
      step(kInner);
      iters += kInner;
      dt = std::chrono::steady_clock::now() - t0;
    } while (dt.count() < kRunSeconds);
    best = std::max(best, double(iters) * 12 * 2 * lanes / dt.count());
  }
  return best;
}

// Twelve independent chains; the asm barrier keeps the compiler from merging or dropping them.
#define KILN_FMA_PEAK_LOOP(V, SET1, FMA)                                                 \
  V a0 = SET1(1.0f), a1 = SET1(1.1f), a2 = SET1(1.2f), a3 = SET1(1.3f), a4 = SET1(1.4f), \
    a5 = SET1(1.5f), a6 = SET1(1.6f), a7 = SET1(1.7f), a8 = SET1(1.8f), a9 = SET1(1.9f), \
    a10 = SET1(2.0f), a11 = SET1(2.1f);                                                  \
  const V b = SET1(0.9999999f), c = SET1(1e-7f);                                         \
  for (int64_t k = 0; k < n; ++k) {                                                      \
    a0 = FMA(a0, b, c), a1 = FMA(a1, b, c), a2 = FMA(a2, b, c), a3 = FMA(a3, b, c);      \
    a4 = FMA(a4, b, c), a5 = FMA(a5, b, c), a6 = FMA(a6, b, c), a7 = FMA(a7, b, c);      \
    a8 = FMA(a8, b, c), a9 = FMA(a9, b, c), a10 = FMA(a10, b, c), a11 = FMA(a11, b, c);  \
    __asm__ volatile("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5));   \
    __asm__ volatile("" : "+x"(a6), "+x"(a7), "+x"(a8), "+x"(a9), "+x"(a10), "+x"(a11)); \
  }

[[gnu::target("avx2,fma")]] inline void fma_loop_avx2(int64_t n) {
  KILN_FMA_PEAK_LOOP(__m256, _mm256_set1_ps, _mm256_fmadd_ps)
}
[[gnu::target("avx512f")]] inline void fma_loop_avx512(int64_t n) {
  KILN_FMA_PEAK_LOOP(__m512, _mm512_set1_ps, _mm512_fmadd_ps)
}
#undef KILN_FMA_PEAK_LOOP

// FLOP/s (2 per FMA lane) of one thread.
inline double measured_fma_peak_per_thread() {
  static const double peak = rt::active_target().isa == rt::VectorIsa::Avx512
                                 ? best_rate(fma_loop_avx512, 16)
                                 : best_rate(fma_loop_avx2, 8);
  return peak;
}

// The int8 peak of one thread where the CPU has AVX-512 VNNI: 12 independent vpdpbusd chains
// on zmm registers (64 uint8 x int8 multiply-adds each), counted as 2 ops per multiply-add like
// the GOP/s of the int8 benchmarks; 0 without AVX-512 VNNI. The instruction is issued through asm
// (the intrinsic's operand constraints make GCC copy registers around it).
[[gnu::target("avx512f,avx512vnni")]] inline void vnni_loop(int64_t n) {
  __m512i a0 = _mm512_set1_epi32(0), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0,
          a8 = a0, a9 = a0, a10 = a0, a11 = a0;
  const __m512i b = _mm512_set1_epi32(0x01010101), c = _mm512_set1_epi32(0x02020202);
  for (int64_t k = 0; k < n; ++k) {
#define KILN_VNNI_STEP(A) __asm__ volatile("vpdpbusd %2, %1, %0" : "+v"(A) : "v"(b), "v"(c));
    KILN_VNNI_STEP(a0) KILN_VNNI_STEP(a1) KILN_VNNI_STEP(a2) KILN_VNNI_STEP(a3)
    KILN_VNNI_STEP(a4) KILN_VNNI_STEP(a5) KILN_VNNI_STEP(a6) KILN_VNNI_STEP(a7)
    KILN_VNNI_STEP(a8) KILN_VNNI_STEP(a9) KILN_VNNI_STEP(a10) KILN_VNNI_STEP(a11)
#undef KILN_VNNI_STEP
  }
}
inline double measured_vnni_peak_per_thread() {
  static const double peak =
      rt::has_feature(rt::host_target(), "avx512vnni") ? best_rate(vnni_loop, 64) : 0.0;
  return peak;
}

}  // namespace kiln::bench
