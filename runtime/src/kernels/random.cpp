// Philox4x32-10 and the random fill kernels. See random.h for the counter layout that makes the
// values independent of the thread count.
#include "kiln/runtime/kernels/random.h"

#include "kiln/runtime/cuda/random.h"

#include <cmath>
#if defined(__AVX2__)
#include <immintrin.h>
#endif
#include <limits>
#include <vector>

#include "kiln/runtime/kernels/copy.h"
#include "kiln/runtime/thread_pool.h"
#include "reduce_common.h"

namespace kiln {

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // round multipliers
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // Weyl key increments
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += kW0;
      key[1] += kW1;
    }
    const uint64_t p0 = static_cast<uint64_t>(kM0) * ctr[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * ctr[2];
    ctr = {static_cast<uint32_t>(p1 >> 32) ^ ctr[1] ^ key[0], static_cast<uint32_t>(p1),
           static_cast<uint32_t>(p0 >> 32) ^ ctr[3] ^ key[1], static_cast<uint32_t>(p0)};
  }
  return ctr;
}

Generator& default_generator() {
  static Generator g;
  return g;
}

void manual_seed(uint64_t seed) {
  default_generator().manual_seed(seed);
}

namespace kernels {

using namespace red;

namespace {

constexpr double kTwoPi = 6.283185307179586476925286766559;

Generator& gen_or_default(Generator* g) {
  return g ? *g : default_generator();
}

// [0, 1) from 24 bits / 53 bits.
inline float u24(uint32_t w) {
  return static_cast<float>(w >> 8) * 0x1.0p-24f;
}
inline double u53(uint32_t hi, uint32_t lo) {
  return static_cast<double>(((static_cast<uint64_t>(hi) << 32) | lo) >> 11) * 0x1.0p-53;
}

// Eight consecutive blocks first_block .. first_block + 7 at once.
#if defined(__AVX2__)
void philox_x8(uint64_t first_block, uint64_t seed, std::array<uint32_t, 4>* out) {
  alignas(32) uint32_t lo[8], hi[8];
  for (int l = 0; l < 8; ++l) {
    const uint64_t b = first_block + static_cast<uint64_t>(l);
    lo[l] = static_cast<uint32_t>(b);
    hi[l] = static_cast<uint32_t>(b >> 32);
  }
  __m256i c0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(lo));
  __m256i c1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(hi));
  __m256i c2 = _mm256_setzero_si256(), c3 = _mm256_setzero_si256();
  const __m256i m0 = _mm256_set1_epi32(static_cast<int>(0xD2511F53u));
  const __m256i m1 = _mm256_set1_epi32(static_cast<int>(0xCD9E8D57u));
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  // 32x32 -> 64-bit products of every lane: even lanes directly, odd lanes shifted down; then
  // the high and low halves are blended back into lane order.
  auto mulhilo = [](__m256i a, __m256i m, __m256i& h, __m256i& l) {
    const __m256i pe = _mm256_mul_epu32(a, m);
    const __m256i po = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
    h = _mm256_blend_epi32(_mm256_srli_epi64(pe, 32), po, 0xAA);
    l = _mm256_blend_epi32(pe, _mm256_slli_epi64(po, 32), 0xAA);
  };
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    __m256i h0, l0, h1, l1;
    mulhilo(c0, m0, h0, l0);
    mulhilo(c2, m1, h1, l1);
    const __m256i n0 =
        _mm256_xor_si256(_mm256_xor_si256(h1, c1), _mm256_set1_epi32(static_cast<int>(k0)));
    const __m256i n2 =
        _mm256_xor_si256(_mm256_xor_si256(h0, c3), _mm256_set1_epi32(static_cast<int>(k1)));
    c0 = n0;
    c1 = l1;
    c2 = n2;
    c3 = l0;
  }
  alignas(32) uint32_t w[4][8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(w[0]), c0);
  _mm256_store_si256(reinterpret_cast<__m256i*>(w[1]), c1);
  _mm256_store_si256(reinterpret_cast<__m256i*>(w[2]), c2);
  _mm256_store_si256(reinterpret_cast<__m256i*>(w[3]), c3);
  for (int l = 0; l < 8; ++l) out[l] = {w[0][l], w[1][l], w[2][l], w[3][l]};
}
#else
void philox_x8(uint64_t first_block, uint64_t seed, std::array<uint32_t, 4>* out) {
  const std::array<uint32_t, 2> key{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  for (int l = 0; l < 8; ++l) {
    const uint64_t b = first_block + static_cast<uint64_t>(l);
    out[l] = philox4x32_10({static_cast<uint32_t>(b), static_cast<uint32_t>(b >> 32), 0, 0}, key);
  }
}
#endif

// Runs gen(words, out, count) for every block of `per_block` consecutive elements, in parallel,
// writing into t (through a contiguous buffer when t is not contiguous).
template <typename T, typename Gen>
void fill_blocks(TensorImpl& t, Generator& g, int64_t per_block, Gen&& gen) {
  const int64_t n = t.numel();
  if (n == 0) return;
  const int64_t nblocks = (n + per_block - 1) / per_block;
  const uint64_t base = g.reserve(static_cast<uint64_t>(nblocks));
  TensorImplPtr buf = t.is_contiguous() ? TensorImplPtr() : empty(t.sizes(), t.dtype());
  T* out = buf ? buf->data_ptr<T>() : t.data_ptr<T>();
  const int64_t ngroups = (nblocks + 7) / 8;
  const uint64_t seed = g.seed();
  parallel_for(0, ngroups, 256, [&](int64_t b, int64_t e) {
    std::array<uint32_t, 4> w[8];
    for (int64_t grp = b; grp < e; ++grp) {
      philox_x8(base + static_cast<uint64_t>(grp * 8), seed, w);
      for (int64_t l = 0; l < 8; ++l) {
        const int64_t blk = grp * 8 + l;
        if (blk >= nblocks) break;
        const int64_t first = blk * per_block;
        gen(w[l], out + first, std::min<int64_t>(per_block, n - first));
      }
    }
  });
  if (buf) copy_(t, *buf);
}

void check_floating(const TensorImpl& t, std::string_view op) {
  KILN_CHECK(is_floating(t.dtype()), op, "expected a floating point tensor, got ",
             dtype_name(t.dtype()));
}

void check_prob(double p, std::string_view op) {
  KILN_CHECK(p >= 0 && p <= 1, op, "expected p in [0, 1], got ", p);
}

// 1 with probability p from one 32-bit word (exact threshold: p = 1 always, p = 0 never).
inline uint64_t threshold(double p) {
  return static_cast<uint64_t>(std::ldexp(p, 32));
}

}  // namespace

void uniform_(TensorImpl& t, double lo, double hi, Generator* gen) {
  constexpr std::string_view op = "uniform_";
  check_floating(t, op);
  KILN_CHECK(lo <= hi && std::isfinite(lo) && std::isfinite(hi), op,
             "expected finite lo <= hi, got [", lo, ", ", hi, ")");
  Generator& g = gen_or_default(gen);
  if (t.device() == Device::CUDA) return cuda::uniform_(t, lo, hi, g);
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, double>) {
      fill_blocks<T>(t, g, 2, [&](const std::array<uint32_t, 4>& w, T* out, int64_t cnt) {
        for (int64_t k = 0; k < cnt; ++k) {
          double x = lo + (hi - lo) * u53(w[2 * k], w[2 * k + 1]);
          if (x >= hi && hi > lo) x = std::nextafter(hi, lo);
          out[k] = x;
        }
      });
    } else if constexpr (is_fp_v<T>) {
      const float flo = static_cast<float>(lo), fhi = static_cast<float>(hi);
      fill_blocks<T>(t, g, 4, [&](const std::array<uint32_t, 4>& w, T* out, int64_t cnt) {
        for (int64_t k = 0; k < cnt; ++k) {
          float x = flo + (fhi - flo) * u24(w[k]);
          if (x >= fhi && fhi > flo) x = std::nextafter(fhi, flo);
          out[k] = from<T>(x);
        }
      });
    }
  });
}

void normal_(TensorImpl& t, double mean, double std, Generator* gen) {
  constexpr std::string_view op = "normal_";
  check_floating(t, op);
  KILN_CHECK(std >= 0 && std::isfinite(std) && std::isfinite(mean), op,
             "expected finite mean and std >= 0, got mean ", mean, ", std ", std);
  Generator& g = gen_or_default(gen);
  if (t.device() == Device::CUDA) return cuda::normal_(t, mean, std, g);
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, double>) {
      // Box-Muller on two 53-bit uniforms: u1 in (0, 1] (no log(0)), angle from u2.
      fill_blocks<T>(t, g, 2, [&](const std::array<uint32_t, 4>& w, T* out, int64_t cnt) {
        const double u1 = 1.0 - u53(w[0], w[1]);
        const double u2 = u53(w[2], w[3]);
        const double r = std::sqrt(-2.0 * std::log(u1));
        const double th = kTwoPi * u2;
        out[0] = mean + std * r * std::cos(th);
        if (cnt > 1) out[1] = mean + std * r * std::sin(th);
      });
    } else if constexpr (is_fp_v<T>) {
      // float math, one word per uniform: u1 = (w + 1) / 2^32 in (0, 1] (tails to 6.6 sigma).
      const float fm = static_cast<float>(mean), fs = static_cast<float>(std);
      fill_blocks<T>(t, g, 4, [&](const std::array<uint32_t, 4>& w, T* out, int64_t cnt) {
        for (int64_t k = 0; k < cnt; k += 2) {
          const float u1 = static_cast<float>((static_cast<double>(w[k]) + 1.0) * 0x1.0p-32);
          const float r = std::sqrt(-2.0f * std::log(u1));
          const float th = static_cast<float>(kTwoPi) * u24(w[k + 1]);
          out[k] = from<T>(fm + fs * r * std::cos(th));
          if (k + 1 < cnt) out[k + 1] = from<T>(fm + fs * r * std::sin(th));
        }
      });
    }
  });
}

void bernoulli_(TensorImpl& t, double p, Generator* gen) {
  check_prob(p, "bernoulli_");
  Generator& g = gen_or_default(gen);
  if (t.device() == Device::CUDA) return cuda::bernoulli_(t, p, g);
  const uint64_t thr = threshold(p);
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    fill_blocks<T>(t, g, 4, [&](const std::array<uint32_t, 4>& w, T* out, int64_t cnt) {
      for (int64_t k = 0; k < cnt; ++k) out[k] = from<T>(static_cast<int>(w[k] < thr));
    });
  });
}

void dropout_mask_out(double p, TensorImpl& mask, Generator* gen) {
  constexpr std::string_view op = "dropout_mask";
  check_prob(p, op);
  KILN_CHECK(mask.dtype() == DType::Bool || mask.dtype() == DType::UInt8, op,
             "expected mask of dtype bool or uint8, got ", dtype_name(mask.dtype()));
  Generator& g = gen_or_default(gen);
  if (mask.device() == Device::CUDA) return cuda::dropout_mask_out(p, mask, g);
  const uint64_t thr = threshold(p);
  visit_dtype(mask.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, uint8_t>) {
      fill_blocks<T>(mask, g, 4, [&](const std::array<uint32_t, 4>& w, T* out, int64_t cnt) {
        for (int64_t k = 0; k < cnt; ++k) out[k] = static_cast<T>(w[k] >= thr);
      });
    }
  });
}

void randint_(TensorImpl& t, int64_t lo, int64_t hi, Generator* gen) {
  constexpr std::string_view op = "randint_";
  KILN_CHECK(lo < hi, op, "expected lo < hi, got [", lo, ", ", hi, ")");
  Generator& g = gen_or_default(gen);
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_integral_v<T>) {
      using L = std::numeric_limits<std::conditional_t<std::is_same_v<T, bool>, uint8_t, T>>;
      const int64_t tmin = std::is_same_v<T, bool> ? 0 : static_cast<int64_t>(L::lowest());
      const int64_t tmax = std::is_same_v<T, bool>
                               ? 1
                               : static_cast<int64_t>(std::min<uint64_t>(L::max(), INT64_MAX));
      KILN_CHECK(lo >= tmin && hi - 1 <= tmax, op, "range [", lo, ", ", hi, ") does not fit dtype ",
                 dtype_name(t.dtype()));
    }
    const uint64_t range = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo);
    if (range <= (uint64_t{1} << 32)) {
      fill_blocks<T>(t, g, 4, [&](const std::array<uint32_t, 4>& w, T* out, int64_t cnt) {
        for (int64_t k = 0; k < cnt; ++k) {
          const int64_t v = lo + static_cast<int64_t>((static_cast<uint64_t>(w[k]) * range) >> 32);
          out[k] = from<T>(v);
        }
      });
    } else {
      fill_blocks<T>(t, g, 2, [&](const std::array<uint32_t, 4>& w, T* out, int64_t cnt) {
        for (int64_t k = 0; k < cnt; ++k) {
          const uint64_t r = (static_cast<uint64_t>(w[2 * k]) << 32) | w[2 * k + 1];
          const uint64_t off =
              static_cast<uint64_t>((static_cast<unsigned __int128>(r) * range) >> 64);
          out[k] = from<T>(static_cast<int64_t>(static_cast<uint64_t>(lo) + off));
        }
      });
    }
  });
}

void randperm_out(int64_t n, TensorImpl& out, Generator* gen) {
  constexpr std::string_view op = "randperm";
  KILN_CHECK(n >= 0, op, "expected n >= 0, got ", n);
  KILN_CHECK(out.dim() == 1 && out.sizes()[0] == n, op, "expected out of shape [", n, "], got ",
             out.sizes());
  KILN_CHECK(out.dtype() != DType::Bool, op, "expected a numeric out dtype, got bool");
  if (is_integral(out.dtype())) {
    const int64_t tmax = out.dtype() == DType::Int8    ? 127
                         : out.dtype() == DType::UInt8 ? 255
                         : out.dtype() == DType::Int32 ? INT32_MAX
                                                       : INT64_MAX;
    KILN_CHECK(n == 0 || n - 1 <= tmax, op, "n = ", n, " does not fit dtype ",
               dtype_name(out.dtype()));
  }
  if (n == 0) return;
  Generator& g = gen_or_default(gen);
  // Fisher-Yates; step k (swap position n-1-k) uses a 64-bit word pair of block base + k / 2.
  std::vector<int64_t> perm(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) perm[i] = i;
  const int64_t steps = n - 1;
  const uint64_t base = g.reserve(static_cast<uint64_t>((steps + 1) / 2));
  std::array<uint32_t, 4> w{};
  for (int64_t k = 0; k < steps; ++k) {
    if (k % 2 == 0) w = g.block(base + static_cast<uint64_t>(k / 2));
    const int64_t i = n - 1 - k;
    const uint64_t r = (static_cast<uint64_t>(w[2 * (k % 2)]) << 32) | w[2 * (k % 2) + 1];
    const auto j = static_cast<int64_t>(
        (static_cast<unsigned __int128>(r) * static_cast<uint64_t>(i + 1)) >> 64);
    std::swap(perm[i], perm[j]);
  }
  auto src = from_blob(perm.data(), Dims{n}, DType::Int64);
  copy_(out, *src);
}

}  // namespace kernels
}  // namespace kiln
