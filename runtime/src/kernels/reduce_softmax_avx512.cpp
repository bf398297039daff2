// AVX-512 row kernel for float32 softmax / log_softmax (16 lanes). Compiled with -mavx512*; only
// called after a CPUID check (reduce_softmax.cpp). Self-contained: it includes no shared inline
// helpers, so no AVX-512 copy of an inline function can be picked up by other files.
#include <cmath>
#include <cstdint>
#include <cstring>

namespace kiln::kernels::red {

namespace {

typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));
constexpr int64_t L = 16;

inline v16f load(const float* p) {
  v16f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, v16f v) {
  std::memcpy(p, &v, sizeof v);
}
inline v16f splat(float s) {
  return v16f{} + s;
}

inline v16f vexp16(v16f x) {
  const v16f hi = splat(88.7228394f), lo = splat(-103.972084f);
  v16f xc = x > hi ? hi : x;
  xc = xc < lo ? lo : xc;
  v16f fx = xc * 1.44269504088896341f;
  v16f n =
      __builtin_convertvector(__builtin_convertvector(fx + (fx < 0 ? -0.5f : 0.5f), v16i), v16f);
  v16f r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  v16f p = splat(1.9875691500E-4f);
  p = p * r + 1.3981999507E-3f;
  p = p * r + 8.3334519073E-3f;
  p = p * r + 4.1665795894E-2f;
  p = p * r + 1.6666665459E-1f;
  p = p * r + 5.0000001201E-1f;
  p = p * (r * r) + r + 1.0f;
  v16i ni = __builtin_convertvector(n, v16i);
  v16i n1 = ni >> 1;
  v16i n2 = ni - n1;
  v16i b1 = (n1 + 127) << 23, b2 = (n2 + 127) << 23;
  v16f s1, s2;
  std::memcpy(&s1, &b1, sizeof s1);
  std::memcpy(&s2, &b2, sizeof s2);
  v16f res = p * s1 * s2;
  res = x > hi ? splat(INFINITY) : res;
  res = x < lo ? v16f{} : res;
  return x != x ? x : res;
}

inline v16f pick_max(v16f acc, v16f x) {
  return (x > acc) | (x != x) ? x : acc;
}

float row_max(const float* x, int64_t n) {
  float m = -INFINITY;
  int64_t i = 0;
  if (n >= 2 * L) {
    v16f a0 = splat(-INFINITY), a1 = a0;
    for (; i + 2 * L <= n; i += 2 * L) {
      a0 = pick_max(a0, load(x + i));
      a1 = pick_max(a1, load(x + i + L));
    }
    a0 = pick_max(a0, a1);
    for (int64_t k = 0; k < L; ++k) m = (a0[k] > m || a0[k] != a0[k]) ? a0[k] : m;
  }
  for (; i < n; ++i) m = (x[i] > m || x[i] != x[i]) ? x[i] : m;
  return m;
}

// y = exp(x - m) (when y), returns the sum.
float exp_sum(const float* x, float* y, int64_t n, float m) {
  const v16f vm = splat(m);
  v16f a0{}, a1{};
  int64_t i = 0;
  for (; i + 2 * L <= n; i += 2 * L) {
    const v16f e0 = vexp16(load(x + i) - vm);
    const v16f e1 = vexp16(load(x + i + L) - vm);
    if (y) {
      store(y + i, e0);
      store(y + i + L, e1);
    }
    a0 += e0;
    a1 += e1;
  }
  for (; i < n; i += L) {
    float buf[L];
    const int64_t cnt = n - i < L ? n - i : L;
    for (int64_t k = 0; k < L; ++k) buf[k] = k < cnt ? x[i + k] : -INFINITY;
    const v16f e = vexp16(load(buf) - vm);
    store(buf, e);
    if (y)
      for (int64_t k = 0; k < cnt; ++k) y[i + k] = buf[k];
    a0 += e;
  }
  a0 += a1;
  float s = 0;
  for (int64_t k = 0; k < L; ++k) s += a0[k];
  return s;
}

}  // namespace

// Rows [row_begin, row_end) of a contiguous [rows, D] float tensor.
void softmax_rows_f32_avx512(const float* x, float* y, int64_t row_begin, int64_t row_end,
                             int64_t D, bool log) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    const float* xr = x + r * D;
    float* yr = y + r * D;
    const float m = row_max(xr, D);
    if (log) {
      const float c = m + std::log(exp_sum(xr, nullptr, D, m));
      const v16f vc = splat(c);
      int64_t i = 0;
      for (; i + L <= D; i += L) store(yr + i, load(xr + i) - vc);
      for (; i < D; ++i) yr[i] = xr[i] - c;
    } else {
      const float inv = 1.0f / exp_sum(xr, yr, D, m);
      const v16f vi = splat(inv);
      int64_t i = 0;
      for (; i + L <= D; i += L) store(yr + i, load(yr + i) * vi);
      for (; i < D; ++i) yr[i] *= inv;
    }
  }
}

}  // namespace kiln::kernels::red
