#pragma once
// Internal helpers shared by reduce*.cpp: dtype casts, portable SIMD vectors (GCC/Clang vector
// extensions: AVX2/AVX-512 on x86, NEON on ARM), blocked pairwise sums and a vectorized exp.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kiln/runtime/dtype.h"

namespace kiln::kernels::red {

template <typename T>
inline constexpr bool is_half_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
template <typename T>
inline constexpr bool is_fp_v = std::is_floating_point_v<T> || is_half_v<T>;
// The type arithmetic happens in: float for f16/bf16, else T itself.
template <typename T>
using compute_t = std::conditional_t<is_half_v<T>, float, T>;
// Accumulator of sums: float for f32/f16/bf16, double for f64, int64 for integers and bool.
template <typename T>
using sum_acc_t =
    std::conditional_t<is_fp_v<T>, std::conditional_t<std::is_same_v<T, double>, double, float>,
                       int64_t>;
// Output element type of sum/prod: the input type for floats, int64 for integers.
template <typename T>
using sum_out_t = std::conditional_t<is_fp_v<T>, T, int64_t>;

template <typename A, typename T>
inline A to(T x) {
  if constexpr (is_half_v<T>) {
    return static_cast<A>(static_cast<float>(x));
  } else {
    return static_cast<A>(x);
  }
}
template <typename O, typename A>
inline O from(A a) {
  if constexpr (is_half_v<O>) {
    return O(static_cast<float>(a));
  } else if constexpr (std::is_same_v<O, bool>) {
    return a != A(0);
  } else {
    return static_cast<O>(a);
  }
}

// 32-byte vectors: native on the AVX2 baseline (64-byte ones get lowered element by element when
// they hold comparisons/selects without AVX-512).
typedef float vf __attribute__((vector_size(32)));
typedef double vd __attribute__((vector_size(32)));
typedef int32_t vi __attribute__((vector_size(32)));
template <typename S>
struct VecOf;
template <>
struct VecOf<float> {
  using type = vf;
};
template <>
struct VecOf<double> {
  using type = vd;
};
template <typename S>
using vec_t = typename VecOf<S>::type;
template <typename S>
inline constexpr int64_t kLanes = static_cast<int64_t>(sizeof(vec_t<S>) / sizeof(S));

template <typename V, typename S>
inline V vload(const S* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}
template <typename V, typename S>
inline void vstore(S* p, V v) {
  std::memcpy(p, &v, sizeof(V));
}
template <typename V>
inline V vsplat(decltype(V{}[0]) s) {
  V v;
  for (size_t i = 0; i < sizeof(V) / sizeof(s); ++i) v[i] = s;
  return v;
}

// Element transforms usable on scalars and vectors.
struct Ident {
  template <typename V>
  V operator()(V v) const {
    return v;
  }
};
struct Square {
  template <typename V>
  V operator()(V v) const {
    return v * v;
  }
};
struct Abs {
  template <typename V>
  V operator()(V v) const {
    return v < (v - v) ? -v : v;  // NaN stays NaN
  }
  float operator()(float v) const { return std::fabs(v); }
  double operator()(double v) const { return std::fabs(v); }
};

// Sum of the lanes of v, pairwise.
template <typename V>
inline auto hsum(V v) {
  using S = std::remove_reference_t<decltype(v[0])>;
  constexpr int L = static_cast<int>(sizeof(V) / sizeof(S));
  S t[L];
  std::memcpy(t, &v, sizeof(V));
  for (int w = L / 2; w >= 1; w /= 2)
    for (int k = 0; k < w; ++k) t[k] += t[k + w];
  return t[0];
}

// Sum of f(p[i]) over a block: 8 vector accumulators, lanes combined pairwise.
template <typename S, typename F>
inline S block_sum(const S* p, int64_t n, F f) {
  using V = vec_t<S>;
  constexpr int64_t L = kLanes<S>;
  constexpr int kAcc = 8;
  int64_t i = 0;
  S head = 0;
  if (n >= kAcc * L) {
    V a[kAcc] = {};
    for (; i + kAcc * L <= n; i += kAcc * L) {
      for (int k = 0; k < kAcc; ++k) a[k] += f(vload<V>(p + i + k * L));
    }
    for (int w = kAcc / 2; w >= 1; w /= 2)
      for (int k = 0; k < w; ++k) a[k] += a[k + w];
    head = hsum(a[0]);
  }
  if (i + L <= n) {
    V a{};
    for (; i + L <= n; i += L) a += f(vload<V>(p + i));
    head += hsum(a);
  }
  S tail = 0;
  for (; i < n; ++i) tail += f(p[i]);
  return head + tail;
}

// Pairwise (cascade) sum: error grows with log(n), speed of a plain vector loop.
template <typename S, typename F>
S pairwise_sum(const S* p, int64_t n, F f) {
  constexpr int64_t kBlock = 4096;
  if (n <= kBlock) return block_sum(p, n, f);
  const int64_t half = (n / 2 + kBlock - 1) / kBlock * kBlock;
  return pairwise_sum(p, half, f) + pairwise_sum(p + half, n - half, f);
}

// NaN-propagating max/min (the NaN sticks once seen).
template <bool Max, typename V>
inline V sticky_pick(V acc, V x) {
  if constexpr (Max) {
    return (x > acc) | (x != x) ? x : acc;
  } else {
    return (x < acc) | (x != x) ? x : acc;
  }
}
template <bool Max, typename S>
inline S sticky_pick_scalar(S acc, S x) {
  if constexpr (Max) {
    return (x > acc || x != x) ? x : acc;
  } else {
    return (x < acc || x != x) ? x : acc;
  }
}

// max/min of f(p[i]) over n elements with NaN propagation, starting from `acc`.
template <bool Max, typename S, typename F>
inline S vec_extreme(S acc, const S* p, int64_t n, F f) {
  using V = vec_t<S>;
  constexpr int64_t L = kLanes<S>;
  constexpr int kAcc = 4;
  int64_t i = 0;
  if (n >= kAcc * L) {
    V a[kAcc];
    for (int k = 0; k < kAcc; ++k) a[k] = vsplat<V>(acc);
    for (; i + kAcc * L <= n; i += kAcc * L) {
      for (int k = 0; k < kAcc; ++k) a[k] = sticky_pick<Max>(a[k], f(vload<V>(p + i + k * L)));
    }
    a[0] = sticky_pick<Max>(sticky_pick<Max>(a[0], a[1]), sticky_pick<Max>(a[2], a[3]));
    for (int64_t k = 0; k < L; ++k) acc = sticky_pick_scalar<Max>(acc, a[0][k]);
  }
  for (; i < n; ++i) acc = sticky_pick_scalar<Max>(acc, f(p[i]));
  return acc;
}

// exp on 8 floats: Cody-Waite range reduction and a degree-6 polynomial (about 1 ulp over the
// normal range; overflow gives inf, underflow 0, NaN stays NaN).
inline vf vexp(vf x) {
  const vf hi = vsplat<vf>(88.7228394f), lo = vsplat<vf>(-103.972084f);
  vf xc = x > hi ? hi : x;
  xc = xc < lo ? lo : xc;
  const vf log2e = vsplat<vf>(1.44269504088896341f);
  vf fx = xc * log2e;
  // round to nearest
  vf n = __builtin_convertvector(__builtin_convertvector(fx + (fx < 0 ? -0.5f : 0.5f), vi), vf);
  vf r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  vf p = vsplat<vf>(1.9875691500E-4f);
  p = p * r + 1.3981999507E-3f;
  p = p * r + 8.3334519073E-3f;
  p = p * r + 4.1665795894E-2f;
  p = p * r + 1.6666665459E-1f;
  p = p * r + 5.0000001201E-1f;
  p = p * (r * r) + r + 1.0f;
  // 2^n split in two factors so that n down to -150 and up to 128 stay representable.
  vi ni = __builtin_convertvector(n, vi);
  vi n1 = ni >> 1;
  vi n2 = ni - n1;
  vi b1 = (n1 + 127) << 23, b2 = (n2 + 127) << 23;
  vf s1, s2;
  std::memcpy(&s1, &b1, sizeof s1);
  std::memcpy(&s2, &b2, sizeof s2);
  vf res = p * s1 * s2;
  res = x > hi ? vsplat<vf>(std::numeric_limits<float>::infinity()) : res;
  res = x < lo ? vf{} : res;
  return x != x ? x : res;
}

}  // namespace kiln::kernels::red
