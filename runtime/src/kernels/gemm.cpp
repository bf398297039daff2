// Single-precision GEMM: packed, cache-blocked, register-blocked, CPUID-dispatched, threaded.
//
// The structure is the BLIS / GotoBLAS one (Goto & van de Geijn 2008; Van Zee & van de Geijn
// 2015), written for row-major C where the microkernel vectorizes along N:
//
//   for i0 in M step MC            A block  MC x KC   packed once, shared by all threads (L3)
//     for p0 in K step KC
//       pack A block  (parallel over MR slivers)
//       parallel over tasks (N block of NC columns) x (share of the A slivers):
//         pack B block KC x NC into this thread's buffer (L2)
//         for each A sliver (MR x KC, stays in L1)
//           for each B panel (KC x NR, streamed from L2)
//             microkernel: C tile (MR x NR) = alpha * A B + beta' * C       (beta' = 1 after p0 >
//             0) after the last K block: epilogue on the tile while it is in L1
//
// Packing turns every transpose/leading-dimension combination into unit-stride panels, so the
// microkernels see only one layout. The per-ISA kernels live in gemm_avx512.cpp, gemm_avx2.cpp
// and (portable, NEON) below. Skinny products, where the packed B would be read only once, use
// unpacked B or direct dot/axpy loops instead of paying for the copy.
#include "kiln/runtime/kernels/gemm.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string_view>
#include <utility>
#include <vector>

#include "gemm_internal.h"
#include "kiln/runtime/error.h"
#include "kiln/runtime/target.h"
#include "kiln/runtime/thread_pool.h"

#if defined(__aarch64__)
#include <arm_neon.h>
#endif

namespace kiln::kernels {

float apply_activation(float x, const Epilogue& e) {
  switch (e.activation) {
    case Activation::None:
      return x;
    case Activation::Relu:
      return x > 0.0f ? x : 0.0f;
    case Activation::Relu6:
      return std::min(std::max(x, 0.0f), 6.0f);
    case Activation::Clamp:
      return std::min(std::max(x, e.clamp_min), e.clamp_max);
    case Activation::Gelu:
      return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f));
    case Activation::GeluTanh: {
      const float c = 0.79788456080286536f;  // sqrt(2/pi)
      return 0.5f * x * (1.0f + std::tanh(c * (x + 0.044715f * x * x * x)));
    }
    case Activation::Silu:
      return x / (1.0f + std::exp(-x));
    case Activation::Sigmoid:
      return 1.0f / (1.0f + std::exp(-x));
    case Activation::Tanh:
      return std::tanh(x);
  }
  return x;
}

namespace gemm_detail {
namespace {

// ---- Portable kernel: GCC/Clang vector extensions (lowered to whatever SIMD the target has)
// ------
constexpr int kPMR = 4;
constexpr int kPNR = 16;
typedef float pvf8 __attribute__((vector_size(32)));

template <int R>
void portable_rn(int64_t kc, const float* a, const float* b, int64_t ldb, float* c, int64_t ldc,
                 int m, int n, float alpha, float beta) {
  pvf8 acc[R][2] = {};
  for (int64_t p = 0; p < kc; ++p) {
    pvf8 b0, b1;
    std::memcpy(&b0, b, sizeof b0);
    std::memcpy(&b1, b + 8, sizeof b1);
    for (int r = 0; r < R; ++r) {
      const float av = a[r];
      acc[r][0] += av * b0;
      acc[r][1] += av * b1;
    }
    a += kPMR;
    b += ldb;
  }
  for (int r = 0; r < R; ++r) {
    float tile[kPNR];
    std::memcpy(tile, &acc[r][0], sizeof acc[r][0]);
    std::memcpy(tile + 8, &acc[r][1], sizeof acc[r][1]);
    float* cr = c + r * ldc;
    if (beta != 0.0f) {
      for (int j = 0; j < n; ++j) cr[j] = alpha * tile[j] + beta * cr[j];
    } else {
      for (int j = 0; j < n; ++j) cr[j] = alpha * tile[j];
    }
  }
}

void portable_micro(int64_t kc, const float* a, const float* b, int64_t ldb, float* c, int64_t ldc,
                    int m, int n, float alpha, float beta, const TileEpilogue* ep) {
  switch (m) {
    case 1:
      portable_rn<1>(kc, a, b, ldb, c, ldc, m, n, alpha, beta);
      break;
    case 2:
      portable_rn<2>(kc, a, b, ldb, c, ldc, m, n, alpha, beta);
      break;
    case 3:
      portable_rn<3>(kc, a, b, ldb, c, ldc, m, n, alpha, beta);
      break;
    default:
      portable_rn<4>(kc, a, b, ldb, c, ldc, m, n, alpha, beta);
      break;
  }
  if (ep) apply_tile_epilogue(c, ldc, m, n, *ep);
}

void portable_pack_a(bool trans, const float* A, int64_t lda, int64_t m, int64_t k, float* dst) {
  pack_a_generic<kPMR>(trans, A, lda, m, k, dst);
}
void portable_pack_b(bool trans, const float* B, int64_t ldb, int64_t k, int64_t n, float* dst) {
  pack_b_generic<kPNR>(trans, B, ldb, k, n, dst);
}

// Blocking (kc, mc, nc) 0 here: active_kernels() fills it from the target description.
const KernelSet kPortable{
    "scalar", kPMR, kPNR, 0, 0, 0, &portable_micro, &portable_pack_a, &portable_pack_b, nullptr};

#if defined(__aarch64__)
// ---- NEON kernel: 8 x 12 tile, 24 q-register accumulators -------------------------------------
constexpr int kNMR = 8;
constexpr int kNNR = 12;

template <int R>
void neon_rn(int64_t kc, const float* a, const float* b, int64_t ldb, float* c, int64_t ldc, int m,
             int n, float alpha, float beta) {
  float32x4_t acc[R][3];
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < 3; ++v) acc[r][v] = vdupq_n_f32(0.0f);
  }
  for (int64_t p = 0; p < kc; ++p) {
    const float32x4_t b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4), b2 = vld1q_f32(b + 8);
    for (int r = 0; r < R; ++r) {
      const float32x4_t av = vdupq_n_f32(a[r]);
      acc[r][0] = vfmaq_f32(acc[r][0], av, b0);
      acc[r][1] = vfmaq_f32(acc[r][1], av, b1);
      acc[r][2] = vfmaq_f32(acc[r][2], av, b2);
    }
    a += kNMR;
    b += ldb;
  }
  for (int r = 0; r < R; ++r) {
    float* cr = c + r * ldc;
    if (n == kNNR) {
      for (int v = 0; v < 3; ++v) {
        float32x4_t x = vmulq_n_f32(acc[r][v], alpha);
        if (beta != 0.0f) x = vfmaq_n_f32(x, vld1q_f32(cr + 4 * v), beta);
        vst1q_f32(cr + 4 * v, x);
      }
    } else {
      float tile[kNNR];
      for (int v = 0; v < 3; ++v) vst1q_f32(tile + 4 * v, vmulq_n_f32(acc[r][v], alpha));
      for (int j = 0; j < n; ++j) cr[j] = beta != 0.0f ? tile[j] + beta * cr[j] : tile[j];
    }
  }
}

template <int... Rs>
void neon_dispatch(int m, std::integer_sequence<int, Rs...>, int64_t kc, const float* a,
                   const float* b, int64_t ldb, float* c, int64_t ldc, int n, float alpha,
                   float beta) {
  ((m == Rs + 1 ? neon_rn<Rs + 1>(kc, a, b, ldb, c, ldc, m, n, alpha, beta) : void()), ...);
}

void neon_micro(int64_t kc, const float* a, const float* b, int64_t ldb, float* c, int64_t ldc,
                int m, int n, float alpha, float beta, const TileEpilogue* ep) {
  neon_dispatch(m, std::make_integer_sequence<int, kNMR>{}, kc, a, b, ldb, c, ldc, n, alpha, beta);
  if (ep) apply_tile_epilogue(c, ldc, m, n, *ep);
}
void neon_pack_a(bool trans, const float* A, int64_t lda, int64_t m, int64_t k, float* dst) {
  pack_a_generic<kNMR>(trans, A, lda, m, k, dst);
}
void neon_pack_b(bool trans, const float* B, int64_t ldb, int64_t k, int64_t n, float* dst) {
  pack_b_generic<kNNR>(trans, B, ldb, k, n, dst);
}
const KernelSet kNeon{"neon",      kNMR,         kNNR,         0,      0, 0,
                      &neon_micro, &neon_pack_a, &neon_pack_b, nullptr};
#endif

}  // namespace

const KernelSet* portable_kernels() {
  return &kPortable;
}
const KernelSet* neon_kernels() {
#if defined(__aarch64__)
  return &kNeon;
#else
  return nullptr;
#endif
}

}  // namespace gemm_detail

namespace {

using gemm_detail::KernelSet;

// ---- ISA selection ------------------------------------------------------------------------------

// What the host can run, from its target description (one CPU detection for every kernel).
bool cpu_has_avx512() {
  const rt::CpuFeatures& f = rt::host_target().features;
  return f.avx512f && f.avx512bw && f.avx512dq && f.avx512vl;
}

bool cpu_has_avx2() {
  const rt::CpuFeatures& f = rt::host_target().features;
  return f.avx2 && f.fma;
}

// The microkernel family of each vector ISA, both ways (Scalar: the portable family).
GemmIsa isa_for(rt::VectorIsa isa) {
  switch (isa) {
    case rt::VectorIsa::Avx512:
      return GemmIsa::Avx512;
    case rt::VectorIsa::Avx2:
      return GemmIsa::Avx2;
    case rt::VectorIsa::Neon:
      return GemmIsa::Neon;
    case rt::VectorIsa::Scalar:
      break;
  }
  return GemmIsa::Scalar;
}
rt::VectorIsa vector_isa_of(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::Avx512:
      return rt::VectorIsa::Avx512;
    case GemmIsa::Avx2:
      return rt::VectorIsa::Avx2;
    case GemmIsa::Neon:
      return rt::VectorIsa::Neon;
    default:
      return rt::VectorIsa::Scalar;
  }
}

// The family the active target description names (Auto), or the one asked for, where this CPU
// has it.
const KernelSet* kernels_for(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::Avx512:
      return cpu_has_avx512() ? gemm_detail::avx512_kernels() : nullptr;
    case GemmIsa::Avx2:
      return cpu_has_avx2() ? gemm_detail::avx2_kernels() : nullptr;
    case GemmIsa::Neon:
      return gemm_detail::neon_kernels();
    case GemmIsa::Scalar:
      return gemm_detail::portable_kernels();
    case GemmIsa::Auto:
      break;
  }
  if (const KernelSet* k = kernels_for(isa_for(rt::active_target().isa))) return k;
  return gemm_detail::portable_kernels();
}

GemmIsa isa_of(const KernelSet* k) {
  if (k == gemm_detail::avx512_kernels()) return GemmIsa::Avx512;
  if (k == gemm_detail::avx2_kernels()) return GemmIsa::Avx2;
  if (k == gemm_detail::neon_kernels()) return GemmIsa::Neon;
  return GemmIsa::Scalar;
}

// KILN_GEMM_ISA at start-up: a family other than the target description's (tests, benchmarks).
const KernelSet* forced_by_environment() {
  const char* env = std::getenv("KILN_GEMM_ISA");
  if (env == nullptr) return nullptr;
  const std::string_view v(env);
  GemmIsa want = GemmIsa::Auto;
  if (v == "avx512")
    want = GemmIsa::Avx512;
  else if (v == "avx2")
    want = GemmIsa::Avx2;
  else if (v == "neon")
    want = GemmIsa::Neon;
  else if (v == "scalar" || v == "portable")
    want = GemmIsa::Scalar;
  else if (!v.empty() && v != "auto")
    std::fprintf(stderr, "kiln: unknown KILN_GEMM_ISA=%s (avx512|avx2|neon|scalar); using auto\n",
                 env);
  if (want == GemmIsa::Auto) return nullptr;
  if (kernels_for(want) == nullptr) {
    std::fprintf(stderr, "kiln: KILN_GEMM_ISA=%s is not available on this CPU; using auto\n", env);
    return nullptr;
  }
  return kernels_for(want);
}

// The family forced by set_sgemm_isa or KILN_GEMM_ISA; null: the target description's.
std::atomic<const KernelSet*> g_forced{forced_by_environment()};

const KernelSet* base_kernels() {
  if (const KernelSet* k = g_forced.load(std::memory_order_acquire)) return k;
  return kernels_for(GemmIsa::Auto);
}

// A family with the blocking the active target description derives for its register tile.
// Rebuilt when the description changes; never freed (packed operands point at theirs).
struct Blocked {
  const rt::TargetParams* params;
  KernelSet ks;
};
std::atomic<const Blocked*> g_blocked[4] = {};

const KernelSet& active_kernels() {
  const KernelSet* base = base_kernels();
  const GemmIsa isa = isa_of(base);
  const int slot = static_cast<int>(isa) - 1;
  const rt::TargetParams& params = rt::target_params();
  const Blocked* b = g_blocked[slot].load(std::memory_order_acquire);
  if (b != nullptr && b->params == &params && b->ks.kernel == base->kernel) [[likely]]
    return b->ks;
  const rt::GemmBlocking& g = params.gemm(vector_isa_of(isa));
  const rt::MicroTile tile = rt::gemm_micro_tile(vector_isa_of(isa));
  KILN_CHECK(tile.mr == base->mr && tile.nr == base->nr, "sgemm", "expected the ", base->name,
             " microkernel's tile to be ", tile.mr, "x", tile.nr, " (target_params.cpp), got ",
             base->mr, "x", base->nr);
  // Owned for the process by this list (packed operands keep pointing at theirs).
  static std::mutex mu;
  static auto* owned = new std::vector<std::unique_ptr<const Blocked>>();
  auto fresh = std::make_unique<Blocked>(Blocked{&params, *base});
  fresh->ks.kc = g.kc, fresh->ks.mc = g.mc, fresh->ks.nc = g.nc, fresh->ks.kc_b = g.kc_packed_b;
  std::lock_guard<std::mutex> lock(mu);
  owned->push_back(std::move(fresh));
  g_blocked[slot].store(owned->back().get(), std::memory_order_release);
  return owned->back()->ks;
}

// ---- Scratch: per-thread, 64-byte aligned, grows and is kept
// --------------------------------------

struct Scratch {
  float* ptr = nullptr;
  size_t cap = 0;  // floats
  float* get(size_t n) {
    if (n > cap) {
      std::free(ptr);
      const size_t bytes = ((n * sizeof(float) + 63) / 64) * 64;
      ptr = static_cast<float*>(std::aligned_alloc(64, bytes));
      if (ptr == nullptr) {
        cap = 0;
        fail("sgemm", "expected ", bytes, " bytes of packing scratch, got an allocation failure");
      }
      cap = n;
    }
    return ptr;
  }
  ~Scratch() { std::free(ptr); }
};
thread_local Scratch tls_pack_a;
thread_local Scratch tls_pack_b;

// ---- Vector helpers (GCC/Clang vector extensions: AVX2 here, NEON on arm64) ---------------------

typedef float vf8 __attribute__((vector_size(32)));
typedef int32_t vi8 __attribute__((vector_size(32)));

inline vf8 load8(const float* p) {
  vf8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store8(float* p, vf8 v) {
  std::memcpy(p, &v, sizeof v);
}
inline float hsum(vf8 v) {
  return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

inline vf8 splat(float x) {
  return vf8{} + x;
}

// exp(x) for float32: Cody-Waite reduction x = n ln2 + r, a degree-6 polynomial for e^r (the
// Cephes expf coefficients), 2^n added to the exponent bits. Inputs clamped to the normal range.
inline vf8 vexp(vf8 x) {
  x = x < -87.3f ? splat(-87.3f) : x;
  x = x > 88.3f ? splat(88.3f) : x;
  const vf8 magic = splat(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  const vf8 t = x * 1.44269504088896341f + magic;
  const vf8 n = t - magic;
  const vf8 r = x - n * 0.693359375f + n * 2.12194440e-4f;
  vf8 p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const vf8 y = p * r * r + r + 1.0f;
  vi8 yi, ti, mi;
  std::memcpy(&yi, &y, sizeof y);
  std::memcpy(&ti, &t, sizeof t);
  std::memcpy(&mi, &magic, sizeof magic);
  yi += (ti - mi) << 23;
  vf8 out;
  std::memcpy(&out, &yi, sizeof out);
  return out;
}
inline vf8 vsigmoid(vf8 x) {
  return 1.0f / (1.0f + vexp(-x));
}
inline vf8 vtanh(vf8 x) {  // 1 - 2 / (e^2x + 1); exact at the saturated ends
  return 1.0f - 2.0f / (vexp(2.0f * x) + 1.0f);
}
// erf by Abramowitz & Stegun 7.1.26 (absolute error < 1.5e-7).
inline vf8 verf(vf8 x) {
  const vf8 ax = x < 0.0f ? -x : x;
  const vf8 t = 1.0f / (1.0f + 0.3275911f * ax);
  vf8 p = splat(1.061405429f);
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  const vf8 y = 1.0f - p * t * vexp(-ax * ax);
  return x < 0.0f ? -y : y;
}

template <typename F>
void map_row(float* row, int64_t n, const Epilogue& e, F&& f) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) store8(row + j, f(load8(row + j)));
  for (; j < n; ++j) row[j] = apply_activation(row[j], e);
}

// ---- Epilogue -----------------------------------------------------------------------------------

bool has_epilogue(const Epilogue& e) {
  return e.bias_kind != Epilogue::Bias::None || e.residual != nullptr ||
         e.activation != Activation::None || e.block;
}

void activate_row(float* row, int64_t n, const Epilogue& e) {
  switch (e.activation) {
    case Activation::None:
      return;
    case Activation::Relu:
      for (int64_t j = 0; j < n; ++j) row[j] = row[j] > 0.0f ? row[j] : 0.0f;
      return;
    case Activation::Relu6:
      for (int64_t j = 0; j < n; ++j) row[j] = std::min(std::max(row[j], 0.0f), 6.0f);
      return;
    case Activation::Clamp: {
      const float lo = e.clamp_min, hi = e.clamp_max;
      for (int64_t j = 0; j < n; ++j) row[j] = std::min(std::max(row[j], lo), hi);
      return;
    }
    case Activation::Gelu:
      return map_row(row, n, e, [](vf8 x) { return 0.5f * x * (1.0f + verf(x * 0.70710678f)); });
    case Activation::GeluTanh:
      return map_row(row, n, e, [](vf8 x) {
        return 0.5f * x * (1.0f + vtanh(0.79788456f * (x + 0.044715f * x * x * x)));
      });
    case Activation::Silu:
      return map_row(row, n, e, [](vf8 x) { return x * vsigmoid(x); });
    case Activation::Sigmoid:
      return map_row(row, n, e, [](vf8 x) { return vsigmoid(x); });
    case Activation::Tanh:
      return map_row(row, n, e, [](vf8 x) { return vtanh(x); });
  }
}

// bias + residual + activation on C[i0:i0+m, j0:j0+n] (C already holds alpha*AB + beta*C).
void epilogue_block(float* C, int64_t ldc, int64_t i0, int64_t j0, int64_t m, int64_t n,
                    const Epilogue& e) {
  for (int64_t r = 0; r < m; ++r) {
    float* row = C + (i0 + r) * ldc + j0;
    if (e.bias_kind == Epilogue::Bias::PerRow) {
      const float b = e.bias[i0 + r];
      for (int64_t j = 0; j < n; ++j) row[j] += b;
    } else if (e.bias_kind == Epilogue::Bias::PerCol) {
      const float* b = e.bias + j0;
      for (int64_t j = 0; j < n; ++j) row[j] += b[j];
    }
    if (e.residual != nullptr) {
      const float* res = e.residual + (i0 + r) * e.ld_residual + j0;
      for (int64_t j = 0; j < n; ++j) row[j] += res[j];
    }
    activate_row(row, n, e);
  }
  e.block.apply(C + i0 * ldc + j0, ldc, m, n);
}

// C = beta * C, then the epilogue (alpha == 0 or K == 0).
void scale_and_epilogue(int64_t M, int64_t N, float beta, float* C, int64_t ldc,
                        const Epilogue& e) {
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(N, 1));
  parallel_for(0, M, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      float* row = C + i * ldc;
      if (beta == 0.0f) {
        std::fill(row, row + N, 0.0f);
      } else if (beta != 1.0f) {
        for (int64_t j = 0; j < N; ++j) row[j] *= beta;
      }
    }
    if (has_epilogue(e)) epilogue_block(C, ldc, r0, 0, r1 - r0, N, e);
  });
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
int64_t round_up(int64_t a, int64_t b) {
  return ceil_div(a, b) * b;
}

// ---- Matrix-vector products (M == 1 or N == 1) --------------------------------------------------
// Memory-bound: read the matrix once, in its storage order, with several independent partial sums.

inline float finish(float acc, float alpha, float beta, const float* y) {
  return beta == 0.0f ? alpha * acc : alpha * acc + beta * *y;
}

// y[i * incy] = alpha * dot(X[i, :K], v) + beta * y[i * incy] for i < n (rows of X contiguous).
void gemv_dots(int64_t n, int64_t K, float alpha, const float* X, int64_t ldx, const float* v,
               float beta, float* y, int64_t incy) {
  const int64_t grain = std::max<int64_t>(4, 32768 / std::max<int64_t>(K, 1));
  parallel_for(0, n, grain, [&](int64_t i0, int64_t i1) {
    int64_t i = i0;
    for (; i + 4 <= i1; i += 4) {
      const float* x0 = X + i * ldx;
      const float* x1 = x0 + ldx;
      const float* x2 = x1 + ldx;
      const float* x3 = x2 + ldx;
      vf8 s0{}, s1{}, s2{}, s3{}, t0{}, t1{}, t2{}, t3{};
      int64_t k = 0;
      for (; k + 16 <= K; k += 16) {
        const vf8 va = load8(v + k), vb = load8(v + k + 8);
        s0 += load8(x0 + k) * va;
        s1 += load8(x1 + k) * va;
        s2 += load8(x2 + k) * va;
        s3 += load8(x3 + k) * va;
        t0 += load8(x0 + k + 8) * vb;
        t1 += load8(x1 + k + 8) * vb;
        t2 += load8(x2 + k + 8) * vb;
        t3 += load8(x3 + k + 8) * vb;
      }
      float r[4] = {hsum(s0 + t0), hsum(s1 + t1), hsum(s2 + t2), hsum(s3 + t3)};
      for (; k < K; ++k) {
        r[0] += x0[k] * v[k];
        r[1] += x1[k] * v[k];
        r[2] += x2[k] * v[k];
        r[3] += x3[k] * v[k];
      }
      for (int q = 0; q < 4; ++q) y[(i + q) * incy] = finish(r[q], alpha, beta, y + (i + q) * incy);
    }
    for (; i < i1; ++i) {
      const float* x0 = X + i * ldx;
      vf8 s0{}, t0{};
      int64_t k = 0;
      for (; k + 16 <= K; k += 16) {
        s0 += load8(x0 + k) * load8(v + k);
        t0 += load8(x0 + k + 8) * load8(v + k + 8);
      }
      float r = hsum(s0 + t0);
      for (; k < K; ++k) r += x0[k] * v[k];
      y[i * incy] = finish(r, alpha, beta, y + i * incy);
    }
  });
}

// y[j * incy] = alpha * sum_k v[k] X[k, j] + beta * y[j * incy] for j < n: rows of X stream in
// order into an accumulator row (L1/L2 resident); threads split the columns.
void gemv_axpys(int64_t n, int64_t K, float alpha, const float* X, int64_t ldx, const float* v,
                float beta, float* y, int64_t incy) {
  constexpr int64_t kMaxCols = 2048;
  const int nth = in_parallel_region() ? 1 : num_threads();
  const int64_t cw = std::clamp<int64_t>(round_up(ceil_div(n, nth), 16), 16, kMaxCols);
  parallel_for(0, ceil_div(n, cw), 1, [&](int64_t c0, int64_t c1) {
    alignas(64) float acc[kMaxCols];
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t j0 = c * cw, nj = std::min<int64_t>(cw, n - j0);
      std::fill(acc, acc + nj, 0.0f);
      int64_t k = 0;
      for (; k + 4 <= K; k += 4) {
        const float* x0 = X + k * ldx + j0;
        const float* x1 = x0 + ldx;
        const float* x2 = x1 + ldx;
        const float* x3 = x2 + ldx;
        const float v0 = v[k], v1 = v[k + 1], v2 = v[k + 2], v3 = v[k + 3];
        int64_t j = 0;
        for (; j + 8 <= nj; j += 8)
          store8(acc + j, load8(acc + j) + load8(x0 + j) * v0 + load8(x1 + j) * v1 +
                              load8(x2 + j) * v2 + load8(x3 + j) * v3);
        for (; j < nj; ++j) acc[j] += x0[j] * v0 + x1[j] * v1 + x2[j] * v2 + x3[j] * v3;
      }
      for (; k < K; ++k) {
        const float* x0 = X + k * ldx + j0;
        const float v0 = v[k];
        for (int64_t j = 0; j < nj; ++j) acc[j] += x0[j] * v0;
      }
      for (int64_t j = 0; j < nj; ++j)
        y[(j0 + j) * incy] = finish(acc[j], alpha, beta, y + (j0 + j) * incy);
    }
  });
}

// Portable DotTileFn (see gemm_internal.h): up to 2 rows of A at a time against 4 rows of W.
void portable_dot_tile(int m, int n, int64_t K, float alpha, const float* A, int64_t lda,
                       const float* W, int64_t ldw, float beta, float* C, int64_t ldc) {
  const float* w[4];
  for (int q = 0; q < 4; ++q) w[q] = W + std::min(q, n - 1) * ldw;  // repeats the last row
  for (int r0 = 0; r0 < m; r0 += 2) {
    const int mr = std::min(2, m - r0);
    const float* a0 = A + r0 * lda;
    const float* a1 = mr > 1 ? a0 + lda : a0;
    vf8 s[2][4] = {};
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) {
      const vf8 x0 = load8(a0 + k), x1 = load8(a1 + k);
      for (int q = 0; q < 4; ++q) {
        const vf8 wq = load8(w[q] + k);
        s[0][q] += x0 * wq;
        s[1][q] += x1 * wq;
      }
    }
    for (int r = 0; r < mr; ++r) {
      const float* a = r == 0 ? a0 : a1;
      for (int q = 0; q < n; ++q) {
        float acc = hsum(s[r][q]);
        for (int64_t kk = k; kk < K; ++kk) acc += a[kk] * w[q][kk];
        float* c = C + (r0 + r) * ldc + q;
        *c = finish(acc, alpha, beta, c);
      }
    }
  }
}

// op(A) x W^T with few rows (small-batch linear layers): dot products straight from W's rows, W
// read once from memory, 4 rows at a time reused from L1/L2 by all rows of A.
bool try_small_m_dots(const KernelSet& ks, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                      float alpha, const float* A, int64_t lda, const float* B, int64_t ldb,
                      float beta, float* C, int64_t ldc, const Epilogue& e) {
  if (!tb || M > 16 || K < 16) return false;
  if (ta) {  // gather op(A) into M contiguous rows
    float* buf = tls_pack_a.get(static_cast<size_t>(M * K));
    for (int64_t k = 0; k < K; ++k)
      for (int64_t i = 0; i < M; ++i) buf[i * K + k] = A[k * lda + i];
    A = buf;
    lda = K;
  }
  const gemm_detail::DotTileFn tile = ks.dot_tile ? ks.dot_tile : &portable_dot_tile;
  const bool epi = has_epilogue(e);
  const int64_t groups = ceil_div(N, 4);
  const int64_t grain = std::max<int64_t>(1, 8192 / std::max<int64_t>(1, M * K / 4));
  // Long K blocks: W's rows stream from memory best in long runs (measured: blocks of 256..1024
  // that keep A's slice in L1 are slower); very long K is still split to keep A's rows in L2.
  constexpr int64_t kKC = 4096;
  parallel_for(0, groups, grain, [&](int64_t g0, int64_t g1) {
    for (int64_t k0 = 0; k0 < K; k0 += kKC) {
      const int64_t kb = std::min(kKC, K - k0);
      const float beta_k = k0 == 0 ? beta : 1.0f;
      for (int64_t g = g0; g < g1; ++g) {
        const int64_t j = g * 4;
        const int nj = static_cast<int>(std::min<int64_t>(4, N - j));
        for (int64_t i = 0; i < M; i += 4) {
          const int mi = static_cast<int>(std::min<int64_t>(4, M - i));
          tile(mi, nj, kb, alpha, A + i * lda + k0, lda, B + j * ldb + k0, ldb, beta_k,
               C + i * ldc + j, ldc);
        }
      }
    }
    if (epi) epilogue_block(C, ldc, 0, g0 * 4, M, std::min(N, g1 * 4) - g0 * 4, e);
  });
  return true;
}

// M == 1 or N == 1. Returns false when the shape is not a matrix-vector product.
bool try_gemv(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
              int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
              const Epilogue& e) {
  if (M != 1 && N != 1) return false;
  auto contiguous = [&](const float* p, int64_t inc) -> const float* {
    if (inc == 1 || K == 1) return p;
    float* buf = tls_pack_a.get(static_cast<size_t>(K));
    for (int64_t k = 0; k < K; ++k) buf[k] = p[k * inc];
    return buf;
  };
  if (M == 1) {
    // c[j] = sum_k a[k] op(B)(k, j); a = A row 0 (stride lda when A is stored K x 1).
    const float* a = contiguous(A, ta ? lda : 1);
    if (tb)
      gemv_dots(N, K, alpha, B, ldb, a, beta, C, 1);
    else
      gemv_axpys(N, K, alpha, B, ldb, a, beta, C, 1);
    if (has_epilogue(e)) epilogue_block(C, ldc, 0, 0, 1, N, e);
  } else {
    // c[i] = sum_k op(A)(i, k) b[k]; b = column 0 of op(B) (stride ldb unless B is stored 1 x K).
    const float* b = contiguous(B, tb ? 1 : ldb);
    if (!ta)
      gemv_dots(M, K, alpha, A, lda, b, beta, C, ldc);
    else
      gemv_axpys(M, K, alpha, A, lda, b, beta, C, ldc);
    if (has_epilogue(e)) epilogue_block(C, ldc, 0, 0, M, 1, e);
  }
  return true;
}

// ---- The packed, blocked driver ---------------------------------------------------------------

bool simple_activation(Activation a) {
  return a == Activation::None || a == Activation::Relu || a == Activation::Relu6 ||
         a == Activation::Clamp;
}

// The part of `e` the microkernel applies to the tile at C[row, col].
gemm_detail::TileEpilogue tile_epilogue(const Epilogue& e, int64_t row, int64_t col) {
  using gemm_detail::TileEpilogue;
  TileEpilogue t;
  if (e.bias_kind == Epilogue::Bias::PerRow) t.row_bias = e.bias + row;
  if (e.bias_kind == Epilogue::Bias::PerCol) t.col_bias = e.bias + col;
  if (e.residual) {
    t.residual = e.residual + row * e.ld_residual + col;
    t.ld_residual = e.ld_residual;
  }
  switch (e.activation) {
    case Activation::Relu:
      t.act = TileEpilogue::Act::Relu;
      break;
    case Activation::Relu6:
      t.act = TileEpilogue::Act::Clamp, t.lo = 0.0f, t.hi = 6.0f;
      break;
    case Activation::Clamp:
      t.act = TileEpilogue::Act::Clamp, t.lo = e.clamp_min, t.hi = e.clamp_max;
      break;
    default:  // None, or one the driver applies after the kernel
      break;
  }
  return t;
}

// C[row : row + m, col : col + n] from one A sliver against consecutive B panels (panel q at
// b + q * b_next, row stride bld): one ks.kernel_row call, or ks.kernel per tile. The sliver is
// packed, or with a_ld > 0 rows of A in place (ks.kernel_row_rows). `e`: the epilogue, on the last
// K block only (nullptr before it).
void sliver_row(const KernelSet& ks, int64_t kb, const float* ap, int64_t a_ld, const float* b,
                int64_t b_next, int64_t bld, float* C, int64_t ldc, int64_t row, int m, int64_t col,
                int64_t n, float alpha, float beta, const Epilogue* e, bool late_activation) {
  using gemm_detail::TileEpilogue;
  float* c = C + row * ldc + col;
  if (a_ld > 0) {
    const TileEpilogue te = e ? tile_epilogue(*e, row, col) : TileEpilogue{};
    ks.kernel_row_rows(kb, ap, a_ld, b, b_next, bld, c, ldc, m, n, alpha, beta, e ? &te : nullptr);
  } else if (ks.kernel_row) {
    const TileEpilogue te = e ? tile_epilogue(*e, row, col) : TileEpilogue{};
    ks.kernel_row(kb, ap, b, b_next, bld, c, ldc, m, n, alpha, beta, e ? &te : nullptr);
  } else {
    for (int64_t j = 0; j < n; j += ks.nr, b += b_next) {
      const int nt = static_cast<int>(std::min<int64_t>(ks.nr, n - j));
      const TileEpilogue te = e ? tile_epilogue(*e, row, col + j) : TileEpilogue{};
      ks.kernel(kb, ap, b, bld, c + j, ldc, m, nt, alpha, beta, e ? &te : nullptr);
    }
  }
  if (e && late_activation)
    for (int r = 0; r < m; ++r) activate_row(c + r * ldc, n, *e);
  if (e) e->block.apply(c, ldc, m, n);
}

// Whether `rows` rows of floats `ld` apart, read side by side, crowd into the same L1 sets. x86
// L1s are indexed by address bits within the 4 KiB page (a way is at most a page: 32 KiB 8-way,
// 48 KiB 12-way), so rows whose starts share their page offset share sets; more than four of them
// (half of an 8-way set: a power-of-two row length of 512 or more floats) leave too few ways for
// B's panel and C. (A way larger than a page, as on arm64 cores, only spreads such rows further.)
// Measured in bench/README.md (Zen 4, seventh session).
bool rows_crowd_l1_sets(int64_t ld, int64_t rows) {
  constexpr int64_t kPage = 4096, kLine = 64;
  int per_line[kPage / kLine] = {};
  const int64_t stride = ld * int64_t(sizeof(float)) % kPage;
  for (int64_t r = 0; r < rows; ++r)
    if (++per_line[r * stride % kPage / kLine] > 4) return true;
  return false;
}

// `packed_a` / `packed_b`: an operand already in the layout this driver packs it into, for all of
// K (sgemm_pack_a / sgemm_pack_b; see gemm_detail::PackedView); A / B are then not read.
void gemm_packed(const KernelSet& ks, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                 float alpha, const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                 float* C, int64_t ldc, const Epilogue& e, const float* packed_a = nullptr,
                 const float* packed_b = nullptr) {
  const int64_t MR = ks.mr, NR = ks.nr;
  const bool epi = has_epilogue(e);
  const bool late_activation = epi && !simple_activation(e.activation);
  const rt::TargetParams& params = rt::target_params();
  // A packed B (weights) larger than one core's L2 block against one sliver of rows (an RNN step,
  // a small-batch linear) is a stream of B: the threads split its columns into one contiguous
  // share each, so each core streams half (a third, ...) of B, and a core that takes the same
  // share again (the caller claims first, so it usually does) finds it in its L2 (the LSTM step's
  // 1 MB weight on 1 MB L2s). Otherwise, below ~1M multiply-adds (a few microseconds) waking
  // another thread costs more than it saves.
  const bool stream_b = packed_b && M <= ks.mr &&
                        round_up(N, ks.nr) * K * int64_t(sizeof(float)) > params.l2_block_bytes;
  const int nth =
      in_parallel_region() || (M * N * K < (int64_t(1) << 20) && !stream_b) ? 1 : num_threads();
  auto pfor = [nth](int64_t begin, int64_t end, int64_t grain, auto&& fn) {
    if (nth == 1)
      fn(begin, end);
    else
      parallel_for(begin, end, grain, fn);
  };

  const int64_t kc = gemm_detail::k_block(ks, K, packed_b != nullptr);
  const int64_t Mp = round_up(M, MR), Np = round_up(N, NR);
  // Equal A blocks no larger than MC, in whole slivers. A K block longer than KC (a packed B's,
  // kc_b) shrinks MC in proportion: the packed A block keeps its MC x KC floats (its scratch and
  // its share of L3).
  const int64_t mc_max = std::max<int64_t>(MR, ks.mc * ks.kc / std::max(kc, ks.kc) / MR * MR);
  const int64_t mblocks = ceil_div(M, mc_max);
  const int64_t mc = round_up(ceil_div(M, mblocks), MR);
  // B blocks no wider than NC. With several threads, several blocks per thread so that the
  // dynamic task queue balances threads slowed by other load (blocks stay >= 4 panels wide).
  int64_t nblocks = ceil_div(N, ks.nc);
  if (stream_b && nth > 1) {
    nblocks = nth;
  } else if (nth > 1) {
    nblocks = std::max(nblocks, std::min<int64_t>(4 * nth, N / (4 * NR)));
    if (nblocks > 1) nblocks = round_up(nblocks, nth);
  }
  // Blocks of whole panels, their counts differing by at most one (rounding one width up to NR
  // would leave a short last block: 576 columns in 4 blocks of 5,5,5,3 panels).
  const int64_t panels_n = ceil_div(N, NR);
  nblocks = std::min(nblocks, panels_n);
  const int64_t nc = ceil_div(panels_n, nblocks) * NR;  // the widest block
  auto block_cols = [&](int64_t t, int64_t& j0, int64_t& j1) {
    j0 = panels_n * t / nblocks * NR;
    j1 = std::min(N, panels_n * (t + 1) / nblocks * NR);
  };
  // A few A slivers with row-major B: the kernel reads B in place (packing would only add a
  // second pass over B); only a ragged last panel is packed. Beyond one sliver each panel is read
  // once per sliver, so it must stay in L1 (K x NR floats): MobileNetV2's projections to 16-32
  // channels run 12-19% faster than with B packed.
  const bool direct_b =
      !packed_b && !tb && (M <= MR || (M <= 3 * MR && K * NR * 4 <= params.l1_panel_bytes));
  // One B block: its packed copy is shared by all threads, which split the A slivers instead.
  const bool shared_b = !packed_b && !direct_b && nblocks == 1 && nth > 1;

  // B packed and A small (few rows: convs over small feature maps): pack all of A first, then each
  // thread runs every K block over its own columns: two synchronizations instead of two per K
  // block.
  if (packed_b && !packed_a && Mp * K <= (int64_t(1) << 20)) {
    // A row-major A is read in place where the kernels can (its sliver's rows stay in L1 across
    // the row of tiles): packing it was 8-11% of a channels-last mbconv block on one thread.
    // Not when the sliver's rows would crowd into the same L1 sets.
    const bool a_in_place = !ta && lda > 0 && ks.kernel_row_rows &&
                            gemm_detail::a_in_place_enabled() &&
                            !rows_crowd_l1_sets(lda, std::min<int64_t>(MR, M));
    float* all_a = a_in_place ? nullptr : tls_pack_a.get(static_cast<size_t>(Mp * K));
    const int64_t slivers = Mp / MR;
    if (!a_in_place)
      pfor(0, slivers, 1, [&](int64_t s0, int64_t s1) {
        const int64_t r0 = s0 * MR, r1 = std::min(s1 * MR, M);
        for (int64_t p0 = 0; p0 < K; p0 += kc) {
          const int64_t kb = std::min(kc, K - p0);
          const float* Ablk = ta ? A + p0 * lda + r0 : A + r0 * lda + p0;
          ks.pack_a(ta, Ablk, lda, r1 - r0, kb, all_a + p0 * Mp + r0 * kb);
        }
      });
    // One thread and a B larger than L2: sliver by sliver, each would stream all of B from
    // memory again (ResNet-18's 512 -> 512 3x3 at 7x7: 9.4 MB per sliver). Column blocks of
    // half the L2 block instead: each K block's B block is read once, by every sliver from L2.
    const bool by_cols = nblocks > 1 || (nth == 1 && slivers > 1 &&
                                         Np * K * int64_t(sizeof(float)) > params.l2_block_bytes);
    if (by_cols && nblocks == 1) {
      const int64_t panel_bytes = kc * NR * int64_t(sizeof(float));
      nblocks = std::max<int64_t>(
          1, panels_n / std::max<int64_t>(1, params.l2_block_bytes / 2 / panel_bytes));
    }
    const int64_t units = by_cols ? nblocks : slivers;  // column blocks, else slivers
    pfor(0, units, 1, [&](int64_t u0, int64_t u1) {
      for (int64_t u = u0; u < u1; ++u) {
        const int64_t s_lo = by_cols ? 0 : u, s_hi = by_cols ? slivers : u + 1;
        int64_t j_lo = 0, j_hi = N;
        if (by_cols) block_cols(u, j_lo, j_hi);
        for (int64_t p0 = 0; p0 < K; p0 += kc) {
          const int64_t kb = std::min(kc, K - p0);
          const bool last = p0 + kb == K;
          for (int64_t s = s_lo; s < s_hi; ++s) {
            const int m = static_cast<int>(std::min(MR, M - s * MR));
            const float* ap = a_in_place ? A + s * MR * lda + p0 : all_a + p0 * Mp + s * MR * kb;
            sliver_row(ks, kb, ap, a_in_place ? lda : 0, packed_b + p0 * Np + j_lo * kb, NR * kb,
                       NR, C, ldc, s * MR, m, j_lo, j_hi - j_lo, alpha, p0 == 0 ? beta : 1.0f,
                       last && epi ? &e : nullptr, late_activation);
          }
        }
      }
    });
    return;
  }

  float* apack_own = packed_a ? nullptr : tls_pack_a.get(static_cast<size_t>(mc * kc));
  float* bshared = shared_b || direct_b ? tls_pack_b.get(static_cast<size_t>(nc * kc)) : nullptr;

  for (int64_t i0 = 0; i0 < M; i0 += mc) {
    const int64_t mb = std::min(mc, M - i0);
    const int64_t slivers = ceil_div(mb, MR);
    for (int64_t p0 = 0; p0 < K; p0 += kc) {
      const int64_t kb = std::min(kc, K - p0);
      const float* apack = packed_a ? packed_a + p0 * Mp + i0 * kb : apack_own;
      if (!packed_a) {
        const float* Ablk = ta ? A + p0 * lda + i0 : A + i0 * lda + p0;
        const int64_t pack_grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, kb * MR / 16));
        pfor(0, slivers, pack_grain, [&](int64_t s0, int64_t s1) {
          const int64_t r0 = s0 * MR, r1 = std::min(s1 * MR, mb);
          ks.pack_a(ta, ta ? Ablk + r0 : Ablk + r0 * lda, lda, r1 - r0, kb, apack_own + r0 * kb);
        });
      }
      const float beta_k = p0 == 0 ? beta : 1.0f;
      const bool last = p0 + kb == K;
      const float* Bblk = tb ? B + p0 : B + p0 * ldb;

      // C[i0 + s * MR : +MR, j : j + n] for sliver s and the B panels from bp (panel q at
      // bp + q * b_next, row stride bld).
      auto row = [&](int64_t s, int64_t j, int64_t n, const float* bp, int64_t b_next,
                     int64_t bld) {
        const int64_t i = s * MR;
        const int m = static_cast<int>(std::min(MR, mb - i));
        sliver_row(ks, kb, apack + i * kb, 0, bp, b_next, bld, C, ldc, i0 + i, m, j, n, alpha,
                   beta_k, last && epi ? &e : nullptr, late_activation);
      };
      auto tile = [&](int64_t s, int64_t j, const float* bp, int64_t bld) {
        row(s, j, std::min(NR, N - j), bp, 0, bld);
      };

      if (packed_b) {
        const float* bp = packed_b + p0 * Np;  // this K block's panels, NR * kb floats apart
        if (nblocks > 1) {
          pfor(0, nblocks, 1, [&](int64_t t0, int64_t t1) {
            for (int64_t t = t0; t < t1; ++t) {
              int64_t j0, j1;
              block_cols(t, j0, j1);
              for (int64_t s = 0; s < slivers; ++s) row(s, j0, j1 - j0, bp + j0 * kb, NR * kb, NR);
            }
          });
        } else {
          pfor(0, slivers, 1, [&](int64_t s0, int64_t s1) {
            for (int64_t s = s0; s < s1; ++s) row(s, 0, N, bp, NR * kb, NR);
          });
        }
      } else if (direct_b) {
        const int64_t panels = ceil_div(N, NR);
        const int64_t full = N / NR;
        if (full < panels)  // ragged last panel, zero padded
          ks.pack_b(false, Bblk + full * NR, ldb, kb, N - full * NR, bshared);
        // Runs of up to 4 whole panels (K x 4NR floats: L1 for the K this path takes), each row of
        // tiles read by every sliver from L1.
        pfor(0, panels, 4, [&](int64_t q0, int64_t q1) {
          for (int64_t q = q0; q < std::min(q1, full); q += 4) {
            const int64_t qn = std::min({q + 4, q1, full}) - q;
            for (int64_t s = 0; s < slivers; ++s) row(s, q * NR, qn * NR, Bblk + q * NR, NR, ldb);
          }
          if (q1 > full)
            for (int64_t s = 0; s < slivers; ++s) tile(s, full * NR, bshared, NR);
        });
      } else if (shared_b) {
        const int64_t panels = ceil_div(N, NR);
        pfor(0, panels, 1, [&](int64_t q0, int64_t q1) {
          const int64_t j0 = q0 * NR, j1 = std::min(q1 * NR, N);
          ks.pack_b(tb, tb ? Bblk + j0 * ldb : Bblk + j0, ldb, kb, j1 - j0, bshared + j0 * kb);
        });
        pfor(0, slivers, 1, [&](int64_t s0, int64_t s1) {
          for (int64_t s = s0; s < s1; ++s) row(s, 0, N, bshared, NR * kb, NR);
        });
      } else {
        pfor(0, nblocks, 1, [&](int64_t t0, int64_t t1) {
          float* bpack = tls_pack_b.get(static_cast<size_t>(nc * kb));
          for (int64_t t = t0; t < t1; ++t) {
            int64_t j0, j1;
            block_cols(t, j0, j1);
            const int64_t nw = j1 - j0;
            ks.pack_b(tb, tb ? Bblk + j0 * ldb : Bblk + j0, ldb, kb, nw, bpack);
            for (int64_t s = 0; s < slivers; ++s) row(s, j0, nw, bpack, NR * kb, NR);
          }
        });
      }
    }
  }
}

}  // namespace

bool sgemm_isa_available(GemmIsa isa) {
  return isa == GemmIsa::Auto || kernels_for(isa);
}

void set_sgemm_isa(GemmIsa isa) {
  const KernelSet* k = kernels_for(isa);
  KILN_CHECK(k != nullptr, "sgemm", "expected an ISA available on this CPU, got ",
             gemm_isa_name(isa), " (not available)");
  g_forced.store(isa == GemmIsa::Auto ? nullptr : k, std::memory_order_release);
}

GemmIsa sgemm_isa() {
  return isa_of(base_kernels());
}

const char* gemm_isa_name(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::Auto:
      return "auto";
    case GemmIsa::Avx512:
      return "avx512";
    case GemmIsa::Avx2:
      return "avx2";
    case GemmIsa::Neon:
      return "neon";
    case GemmIsa::Scalar:
      return "scalar";
  }
  return "?";
}

namespace {

// The checks every sgemm entry point makes, and the products with nothing to multiply (C empty,
// or only beta and the epilogue to apply). Returns whether a product remains to compute.
bool gemm_prologue(int64_t M, int64_t N, int64_t K, float alpha, float beta, float* C, int64_t ldc,
                   const Epilogue& e) {
  KILN_CHECK(M >= 0 && N >= 0 && K >= 0, "sgemm", "expected non-negative sizes, got M=", M,
             " N=", N, " K=", K);
  if (M == 0 || N == 0) return false;
  KILN_CHECK(M == 1 || ldc >= N, "sgemm", "expected ldc >= N (", N, "), got ", ldc);
  if (e.bias_kind != Epilogue::Bias::None)
    KILN_CHECK(e.bias != nullptr, "sgemm", "expected a bias pointer, got nullptr");
  if (e.residual != nullptr)
    KILN_CHECK(M == 1 || e.ld_residual >= N, "sgemm", "expected ld_residual >= N (", N, "), got ",
               e.ld_residual);
  if (e.block)
    KILN_CHECK(e.block.origin != nullptr, "sgemm",
               "expected the output's origin for a generated epilogue, got nullptr");
  if (K == 0 || alpha == 0.0f) {
    scale_and_epilogue(M, N, beta, C, ldc, e);
    return false;
  }
  return true;
}

// A stored rows x cols matrix needs ld >= cols unless it has a single row.
void check_ld(std::string_view op, const char* name, int64_t rows, int64_t cols, int64_t ld) {
  KILN_CHECK(rows <= 1 || ld >= cols, op, "expected ", name, " >= ", cols, ", got ", ld);
}

}  // namespace

SgemmPacked::~SgemmPacked() {
  std::free(data_);
}

namespace {

// op(X) packed as the left operand ([outer = M, K]) or the right one ([K, outer = N]), in
// (K block, range of slivers or panels) items on the pool: packing is a one-time cost per weight.
std::shared_ptr<const SgemmPacked> pack_operand(bool is_b, bool trans, int64_t outer, int64_t K,
                                                const float* X, int64_t ld) {
  const KernelSet& ks = active_kernels();
  float* data = nullptr;
  std::shared_ptr<SgemmPacked> p = gemm_detail::allocate_packed(ks, is_b, outer, K, &data);
  if (outer == 0 || K == 0) return p;
  const int64_t unit = is_b ? ks.nr : ks.mr, padded = round_up(outer, unit);
  const int64_t kc = gemm_detail::k_block(ks, K, is_b), kblocks = ceil_div(K, kc);
  const bool outer_major = is_b == trans;  // stored [outer, K]: A as is, or B transposed
  const int64_t groups = padded / unit;
  const int64_t per_item = std::max<int64_t>(1, ceil_div(groups * kblocks, 4 * num_threads()));
  const int64_t chunks = ceil_div(groups, per_item);
  parallel_for(0, kblocks * chunks, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t p0 = (i / chunks) * kc, kb = std::min(kc, K - p0);
      const int64_t o0 = (i % chunks) * per_item * unit;
      const int64_t n = std::min(outer, o0 + per_item * unit) - o0;
      const float* src = outer_major ? X + o0 * ld + p0 : X + p0 * ld + o0;
      float* dst = data + p0 * padded + o0 * kb;
      if (is_b)
        ks.pack_b(trans, src, ld, kb, n, dst);
      else
        ks.pack_a(trans, src, ld, n, kb, dst);
    }
  });
  return p;
}

}  // namespace

std::shared_ptr<const SgemmPacked> sgemm_pack_a(bool trans_a, int64_t M, int64_t K, const float* A,
                                                int64_t lda) {
  KILN_CHECK(M >= 0 && K >= 0, "sgemm_pack_a", "expected non-negative sizes, got M=", M, " K=", K);
  check_ld("sgemm_pack_a", "lda", trans_a ? K : M, trans_a ? M : K, lda);
  return pack_operand(false, trans_a, M, K, A, lda);
}

std::shared_ptr<const SgemmPacked> sgemm_pack_b(bool trans_b, int64_t K, int64_t N, const float* B,
                                                int64_t ldb) {
  KILN_CHECK(N >= 0 && K >= 0, "sgemm_pack_b", "expected non-negative sizes, got K=", K, " N=", N);
  check_ld("sgemm_pack_b", "ldb", trans_b ? N : K, trans_b ? K : N, ldb);
  return pack_operand(true, trans_b, N, K, B, ldb);
}

namespace gemm_detail {
const KernelSet& active_kernel_set() {
  return active_kernels();
}

namespace {
// KILN_GEMM_PACK_A=1 starts with A always packed (to compare both with bench/paired.py).
std::atomic<bool> g_a_in_place{[] {
  const char* e = std::getenv("KILN_GEMM_PACK_A");
  return !(e && std::string_view(e) == "1");
}()};
}  // namespace

bool a_in_place_enabled() {
  return g_a_in_place.load(std::memory_order_relaxed);
}

void set_a_in_place(bool enabled) {
  g_a_in_place.store(enabled, std::memory_order_relaxed);
}

int64_t k_block(const KernelSet& ks, int64_t K, bool packed_b) {
  // Equal blocks no larger than KC: no sliver of a last block.
  const int64_t kc = packed_b && ks.kc_b > 0 ? ks.kc_b : ks.kc;
  const int64_t blocks = std::max<int64_t>(1, (K + kc - 1) / kc);
  return ((K + blocks - 1) / blocks + 3) / 4 * 4;
}

std::shared_ptr<SgemmPacked> allocate_packed(const KernelSet& ks, bool is_b, int64_t outer,
                                             int64_t K, float** data) {
  std::shared_ptr<SgemmPacked> p(new SgemmPacked);
  p->is_b_ = is_b, p->outer_ = outer, p->depth_ = K, p->kernels_ = &ks;
  const int64_t padded = round_up(outer, is_b ? ks.nr : ks.mr);
  p->floats_ = static_cast<size_t>(std::max<int64_t>(padded * K, 1));
  p->data_ = static_cast<float*>(std::aligned_alloc(64, round_up(p->floats_ * 4, 64)));
  KILN_CHECK(p->data_ != nullptr, "sgemm_pack", "expected ", p->floats_ * 4,
             " bytes for a packed matrix, got an allocation failure");
  *data = p->data_;
  return p;
}

PackedView packed_view(const SgemmPacked& p) {
  const auto* ks = static_cast<const KernelSet*>(p.kernels_);
  const int64_t unit = p.is_b_ ? ks->nr : ks->mr;
  return {ks,
          p.data_,
          p.outer_,
          p.depth_,
          (p.outer_ + unit - 1) / unit * unit,
          k_block(*ks, p.depth_, p.is_b_),
          p.is_b_};
}

int b_panel_width(const SgemmPacked& A) {
  const PackedView v = packed_view(A);
  // One K block both as A was packed (kc) and as the driver cuts K against a packed B (kc_b).
  return !v.is_b && v.K <= v.ks->kc ? v.ks->nr : 0;
}

void sgemm_packed_ab(const SgemmPacked& A, const float* b_panels, int64_t N, float* C, int64_t ldc,
                     const Epilogue& e) {
  const PackedView v = packed_view(A);
  KILN_CHECK(b_panel_width(A) > 0, "sgemm_packed_ab",
             "expected a left operand packed in one K block (K <= ", v.ks->kc, "), got K=", v.K);
  if (!gemm_prologue(v.outer, N, v.K, 1.0f, 0.0f, C, ldc, e)) return;
  gemm_packed(*v.ks, false, false, v.outer, N, v.K, 1.0f, nullptr, 0, nullptr, 0, 0.0f, C, ldc, e,
              v.data, b_panels);
}
}  // namespace gemm_detail

void sgemm_packed_a(const SgemmPacked& A, bool trans_b, int64_t N, float alpha, const float* B,
                    int64_t ldb, float beta, float* C, int64_t ldc, const Epilogue& e) {
  const gemm_detail::PackedView v = gemm_detail::packed_view(A);
  KILN_CHECK(!v.is_b, "sgemm_packed_a", "expected a left operand (sgemm_pack_a), got a right one");
  if (!gemm_prologue(v.outer, N, v.K, alpha, beta, C, ldc, e)) return;
  check_ld("sgemm", "ldb", trans_b ? N : v.K, trans_b ? v.K : N, ldb);
  gemm_packed(*v.ks, false, trans_b, v.outer, N, v.K, alpha, nullptr, 0, B, ldb, beta, C, ldc, e,
              v.data);
}

void sgemm_packed_b(bool trans_a, int64_t M, float alpha, const float* A, int64_t lda,
                    const SgemmPacked& B, float beta, float* C, int64_t ldc, const Epilogue& e) {
  const gemm_detail::PackedView v = gemm_detail::packed_view(B);
  KILN_CHECK(v.is_b, "sgemm_packed_b", "expected a right operand (sgemm_pack_b), got a left one");
  if (!gemm_prologue(M, v.outer, v.K, alpha, beta, C, ldc, e)) return;
  check_ld("sgemm", "lda", trans_a ? v.K : M, trans_a ? M : v.K, lda);
  gemm_packed(*v.ks, trans_a, false, M, v.outer, v.K, alpha, A, lda, nullptr, 0, beta, C, ldc, e,
              nullptr, v.data);
}

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
           const Epilogue& e) {
  if (!gemm_prologue(M, N, K, alpha, beta, C, ldc, e)) return;
  // Stored shapes: A is M x K (K x M when transposed), B is K x N (N x K when transposed).
  check_ld("sgemm", "lda", trans_a ? K : M, trans_a ? M : K, lda);
  check_ld("sgemm", "ldb", trans_b ? N : K, trans_b ? K : N, ldb);

  if (try_gemv(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, e)) return;
  const KernelSet& ks = active_kernels();
  if (try_small_m_dots(ks, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, e))
    return;
  gemm_packed(ks, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, e);
}

}  // namespace kiln::kernels
