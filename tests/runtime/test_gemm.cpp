// sgemm (every ISA path, 1 and 2 threads, transposes, leading dims, alpha/beta, epilogues) and
// the matmul family, each against naive float64 references written here.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../../runtime/src/kernels/gemm_internal.h"  // set_a_in_place: both A paths
#include "kiln/runtime/error.h"
#include "kiln/runtime/kernels/gemm.h"
#include "kiln/runtime/kernels/linalg.h"
#include "kiln/runtime/tensor.h"
#include "kiln/runtime/thread_pool.h"
#include "kiln/runtime/views.h"

using namespace kiln;
using kernels::Activation;
using kernels::Epilogue;
using kernels::GemmIsa;

namespace {

std::vector<float> random_vec(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

double ref_activation(double x, const Epilogue& e) {
  switch (e.activation) {
    case Activation::None:
      return x;
    case Activation::Relu:
      return x > 0 ? x : 0;
    case Activation::Relu6:
      return std::min(std::max(x, 0.0), 6.0);
    case Activation::Clamp:
      return std::min(std::max(x, double(e.clamp_min)), double(e.clamp_max));
    case Activation::Gelu:
      return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case Activation::GeluTanh:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case Activation::Silu:
      return x / (1 + std::exp(-x));
    case Activation::Sigmoid:
      return 1 / (1 + std::exp(-x));
    case Activation::Tanh:
      return std::tanh(x);
  }
  return x;
}

// Restores the ISA and thread count a test changed.
struct IsaThreads {
  GemmIsa isa = kernels::sgemm_isa();
  int threads = num_threads();
  ~IsaThreads() {
    kernels::set_sgemm_isa(isa);
    set_num_threads(threads);
  }
};

std::vector<GemmIsa> isas() {
  std::vector<GemmIsa> out;
  for (GemmIsa i : {GemmIsa::Avx512, GemmIsa::Avx2, GemmIsa::Neon, GemmIsa::Scalar})
    if (kernels::sgemm_isa_available(i)) out.push_back(i);
  return out;
}

constexpr float kPad = 12345.0f;  // fills the gaps of non-unit leading dimensions

struct Case {
  bool ta = false, tb = false;
  int64_t M = 1, N = 1, K = 1;
  int64_t pad_a = 0, pad_b = 0, pad_c = 0;
  float alpha = 1.0f, beta = 0.0f;
  Epilogue e;
  bool residual = false;
  // Which operand is packed once first (sgemm_pack_a / sgemm_pack_b) and then multiplied.
  enum class Packed { None, A, B } packed = Packed::None;
};

// Runs sgemm on random data and compares with a float64 reference. Returns a failure description
// or "" on success.
std::string run_case(const Case& c, uint32_t seed) {
  const int64_t a_rows = c.ta ? c.K : c.M, a_cols = c.ta ? c.M : c.K;
  const int64_t b_rows = c.tb ? c.N : c.K, b_cols = c.tb ? c.K : c.N;
  const int64_t lda = a_cols + c.pad_a, ldb = b_cols + c.pad_b, ldc = c.N + c.pad_c;
  std::vector<float> A = random_vec(a_rows * lda, seed);
  std::vector<float> B = random_vec(b_rows * ldb, seed + 1);
  std::vector<float> C = random_vec(c.M * ldc, seed + 2);
  // Padding is NaN in the inputs (must never be read) and a sentinel in C (must not be written).
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t r = 0; r < a_rows; ++r)
    for (int64_t j = a_cols; j < lda; ++j) A[r * lda + j] = nan;
  for (int64_t r = 0; r < b_rows; ++r)
    for (int64_t j = b_cols; j < ldb; ++j) B[r * ldb + j] = nan;
  for (int64_t r = 0; r < c.M; ++r)
    for (int64_t j = c.N; j < ldc; ++j) C[r * ldc + j] = kPad;
  if (c.beta == 0.0f)  // beta == 0 must not read C
    for (int64_t r = 0; r < c.M; ++r)
      for (int64_t j = 0; j < c.N; ++j) C[r * ldc + j] = nan;
  Epilogue e = c.e;
  std::vector<float> bias, res;
  if (e.bias_kind == Epilogue::Bias::PerRow) bias = random_vec(c.M, seed + 3);
  if (e.bias_kind == Epilogue::Bias::PerCol) bias = random_vec(c.N, seed + 3);
  e.bias = bias.empty() ? nullptr : bias.data();
  const int64_t ldr = c.N + 5;
  if (c.residual) {
    res = random_vec(c.M * ldr, seed + 4);
    e.residual = res.data();
    e.ld_residual = ldr;
  }
  const std::vector<float> C0 = C;
  if (c.packed != Case::Packed::None) {
    // The packed copy is all the product reads of the packed operand: the original is poisoned.
    std::vector<float>& src = c.packed == Case::Packed::A ? A : B;
    const std::vector<float> kept = src;
    if (c.packed == Case::Packed::A) {
      auto packed = kernels::sgemm_pack_a(c.ta, c.M, c.K, A.data(), lda);
      std::fill(src.begin(), src.end(), nan);
      kernels::sgemm_packed_a(*packed, c.tb, c.N, c.alpha, B.data(), ldb, c.beta, C.data(), ldc, e);
    } else {
      auto packed = kernels::sgemm_pack_b(c.tb, c.K, c.N, B.data(), ldb);
      std::fill(src.begin(), src.end(), nan);
      kernels::sgemm_packed_b(c.ta, c.M, c.alpha, A.data(), lda, *packed, c.beta, C.data(), ldc, e);
    }
    src = kept;
  } else {
    kernels::sgemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb, c.beta,
                   C.data(), ldc, e);
  }
  for (int64_t i = 0; i < c.M; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const float got = C[i * ldc + j];
      if (j >= c.N) {
        if (got != kPad)
          return "padding of C written at " + std::to_string(i) + "," + std::to_string(j);
        continue;
      }
      double acc = 0, mag = 0;
      for (int64_t p = 0; p < c.K; ++p) {
        const double a = c.ta ? A[p * lda + i] : A[i * lda + p];
        const double b = c.tb ? B[j * ldb + p] : B[p * ldb + j];
        acc += a * b;
        mag += std::abs(a * b);
      }
      double v = double(c.alpha) * acc;
      if (c.beta != 0.0f) v += double(c.beta) * C0[i * ldc + j];
      if (e.bias_kind == Epilogue::Bias::PerRow) v += bias[i];
      if (e.bias_kind == Epilogue::Bias::PerCol) v += bias[j];
      if (c.residual) v += res[i * ldr + j];
      const double want = ref_activation(v, e);
      const double tol = 1e-6 * (c.K + 4) * (std::abs(c.alpha) * mag + 4) + 1e-5 * std::abs(want);
      if (!(std::abs(got - want) <= tol))
        return "C[" + std::to_string(i) + "," + std::to_string(j) + "] = " + std::to_string(got) +
               ", want " + std::to_string(want);
    }
  }
  return "";
}

std::string describe(const Case& c) {
  return std::string(c.ta ? "T" : "N") + (c.tb ? "T" : "N") + " M=" + std::to_string(c.M) +
         " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K) +
         " alpha=" + std::to_string(c.alpha) + " beta=" + std::to_string(c.beta) +
         " act=" + std::to_string(int(c.e.activation)) +
         " bias=" + std::to_string(int(c.e.bias_kind)) + " res=" + std::to_string(c.residual) +
         (c.packed == Case::Packed::A ? " packed A" : "") +
         (c.packed == Case::Packed::B ? " packed B" : "");
}

// For each available ISA and 1 and 2 threads.
template <typename Fn>
void for_each_config(Fn&& fn) {
  IsaThreads restore;
  for (GemmIsa isa : isas()) {
    for (int threads : {1, 2}) {
      kernels::set_sgemm_isa(isa);
      set_num_threads(threads);
      SCOPED_TRACE(std::string("isa=") + kernels::gemm_isa_name(isa) +
                   " threads=" + std::to_string(threads));
      fn();
    }
  }
}

}  // namespace

TEST(GemmIsa, ReportsAndSelects) {
  IsaThreads restore;
  EXPECT_NE(kernels::sgemm_isa(), GemmIsa::Auto);
  EXPECT_TRUE(kernels::sgemm_isa_available(GemmIsa::Scalar));
  kernels::set_sgemm_isa(GemmIsa::Scalar);
  EXPECT_EQ(kernels::sgemm_isa(), GemmIsa::Scalar);
  kernels::set_sgemm_isa(GemmIsa::Auto);
  EXPECT_NE(kernels::sgemm_isa(), GemmIsa::Auto);
#if defined(__x86_64__)
  EXPECT_FALSE(kernels::sgemm_isa_available(GemmIsa::Neon));
  try {
    kernels::set_sgemm_isa(GemmIsa::Neon);
    FAIL() << "expected an error";
  } catch (const Error& err) {
    EXPECT_EQ(err.op(), "sgemm");
  }
#endif
}

TEST(Gemm, OddSizesAllTransposes) {
  const int64_t sizes[][3] = {{1, 1, 1},      {7, 17, 33},     {17, 7, 1},    {33, 100, 17},
                              {100, 33, 257}, {257, 100, 7},   {1, 257, 100}, {257, 1, 33},
                              {13, 257, 64},  {100, 100, 100}, {3, 50, 20},   {5, 70, 400},
                              {12, 100, 500}};
  for_each_config([&] {
    uint32_t seed = 1;
    for (int t = 0; t < 4; ++t) {
      for (auto& s : sizes) {
        Case c;
        c.ta = t & 1;
        c.tb = t & 2;
        c.M = s[0];
        c.N = s[1];
        c.K = s[2];
        const std::string err = run_case(c, seed++);
        EXPECT_EQ(err, "") << describe(c);
      }
    }
  });
}

TEST(Gemm, LeadingDimsAlphaBeta) {
  const float ab[][2] = {{1, 0}, {2.5f, 0}, {1, 1}, {-0.5f, 0.75f}, {1, -2}};
  for_each_config([&] {
    uint32_t seed = 100;
    for (int t = 0; t < 4; ++t) {
      for (auto& x : ab) {
        Case c;
        c.ta = t & 1;
        c.tb = t & 2;
        c.M = 37;
        c.N = 45;
        c.K = 29;
        c.pad_a = 3;
        c.pad_b = 5;
        c.pad_c = 7;
        c.alpha = x[0];
        c.beta = x[1];
        EXPECT_EQ(run_case(c, seed++), "") << describe(c);
      }
    }
  });
}

// Shapes larger than the cache blocks: several K blocks (beta and the epilogue must apply once),
// several N blocks and several M blocks.
TEST(Gemm, MultipleCacheBlocks) {
  const int64_t sizes[][3] = {{30, 70, 1000}, {40, 1100, 50}, {1700, 24, 40}, {29, 600, 400},
                              {9, 300, 70},   {16, 45, 17},   {3, 20, 4500},  {8, 2000, 100}};
  for_each_config([&] {
    uint32_t seed = 200;
    for (int t = 0; t < 4; ++t) {
      for (auto& s : sizes) {
        Case c;
        c.ta = t & 1;
        c.tb = t & 2;
        c.M = s[0];
        c.N = s[1];
        c.K = s[2];
        c.pad_c = 3;
        c.alpha = 0.5f;
        c.beta = 0.25f;
        c.e.bias_kind = Epilogue::Bias::PerCol;
        c.e.activation = Activation::Relu;
        c.residual = true;
        EXPECT_EQ(run_case(c, seed++), "") << describe(c);
      }
    }
  });
}

// Matrix-vector shapes (M == 1 or N == 1) with strided vectors, beta and epilogues.
TEST(Gemm, MatrixVector) {
  const int64_t sizes[][3] = {{1, 300, 70}, {1, 5, 1000}, {200, 1, 45},
                              {3000, 1, 5}, {1, 1, 33},   {1, 4500, 3}};
  for_each_config([&] {
    uint32_t seed = 500;
    for (int t = 0; t < 4; ++t) {
      for (auto& s : sizes) {
        Case c;
        c.ta = t & 1;
        c.tb = t & 2;
        c.M = s[0];
        c.N = s[1];
        c.K = s[2];
        c.pad_a = 2;
        c.pad_b = 3;
        c.pad_c = 1;
        c.alpha = 1.25f;
        c.beta = (seed & 1) ? 0.5f : 0.0f;
        c.e.bias_kind = (seed & 2) ? Epilogue::Bias::PerRow : Epilogue::Bias::PerCol;
        c.e.activation = Activation::GeluTanh;
        c.residual = seed & 4;
        EXPECT_EQ(run_case(c, seed++), "") << describe(c);
      }
    }
  });
}

TEST(Gemm, EveryEpilogue) {
  const Activation acts[] = {Activation::None,  Activation::Relu,    Activation::Relu6,
                             Activation::Clamp, Activation::Gelu,    Activation::GeluTanh,
                             Activation::Silu,  Activation::Sigmoid, Activation::Tanh};
  const Epilogue::Bias biases[] = {Epilogue::Bias::None, Epilogue::Bias::PerRow,
                                   Epilogue::Bias::PerCol};
  for_each_config([&] {
    uint32_t seed = 300;
    for (Activation act : acts) {
      for (Epilogue::Bias b : biases) {
        for (bool res : {false, true}) {
          Case c;
          c.tb = seed & 1;
          c.M = 19;
          c.N = 41;
          c.K = 23;
          c.pad_c = 2;
          c.beta = (seed & 2) ? 0.5f : 0.0f;
          c.alpha = 1.5f;
          c.e.bias_kind = b;
          c.e.activation = act;
          c.e.clamp_min = -0.3f;
          c.e.clamp_max = 0.4f;
          c.residual = res;
          EXPECT_EQ(run_case(c, seed++), "") << describe(c);
        }
      }
    }
  });
}

// One operand packed once and multiplied by many others: every transpose, ragged slivers and
// panels, several K blocks (K > KC), several B blocks and every epilogue, against the float64
// reference.
TEST(Gemm, PackedOperandMatchesReference) {
  const Activation acts[] = {Activation::None, Activation::Relu, Activation::Relu6,
                             Activation::Clamp, Activation::Silu};
  for_each_config([&] {
    uint32_t seed = 900;
    for (Case::Packed side : {Case::Packed::A, Case::Packed::B}) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          for (auto [M, N, K] : {std::array<int64_t, 3>{1, 1, 1},
                                 {5, 3, 7},
                                 {13, 33, 17},
                                 {64, 200, 576},
                                 {37, 50, 800},
                                 {49, 512, 1152},
                                 {7, 300, 40}}) {
            Case c;
            c.packed = side;
            c.ta = ta, c.tb = tb, c.M = M, c.N = N, c.K = K;
            c.pad_a = seed % 3, c.pad_b = seed % 2, c.pad_c = 1;
            c.beta = (seed & 1) ? 0.25f : 0.0f;
            c.e.activation = acts[seed % 5];
            c.e.clamp_min = -0.5f, c.e.clamp_max = 0.5f;
            c.e.bias_kind = (seed & 2) ? Epilogue::Bias::PerRow : Epilogue::Bias::PerCol;
            c.residual = seed & 4;
            EXPECT_EQ(run_case(c, seed++), "") << describe(c);
          }
        }
      }
    }
  });
}

// A row-major A against a packed B is read in place (KernelSet::kernel_row_rows) unless that is
// switched off: both paths, on ragged slivers, padded rows (NaN past K, never read) and several K
// blocks, and the blocked driver beyond the small-A path, give the float64 reference's values.
TEST(Gemm, PackedBWithARowsInPlaceOrPacked) {
  struct Restore {  // the setting the process started with (KILN_GEMM_PACK_A)
    bool was = kernels::gemm_detail::a_in_place_enabled();
    ~Restore() { kernels::gemm_detail::set_a_in_place(was); }
  } restore_in_place;
  for (bool in_place : {true, false}) {
    kernels::gemm_detail::set_a_in_place(in_place);
    SCOPED_TRACE(in_place ? "A in place" : "A packed");
    for_each_config([&] {
      uint32_t seed = 1300;
      // {13, 40, 1300}: two K blocks of the packed B; {2000, 20, 600}: M past the small-A path,
      // the blocked driver's A blocks shrunk for the packed B's long K block. {30, 64, 1024} and
      // {12, 33, 512} unpadded: rows a multiple of 2 KiB apart, which crowd the same L1 sets (A is
      // packed even where it may be read in place).
      for (auto [M, N, K, pad] : {std::array<int64_t, 4>{1, 17, 5, -1},
                                  {5, 40, 3, -1},
                                  {11, 16, 600, -1},
                                  {13, 40, 1300, -1},
                                  {196, 96, 576, -1},
                                  {49, 330, 160, -1},
                                  {2000, 20, 600, -1},
                                  {30, 64, 1024, 0},
                                  {12, 33, 512, 0}}) {
        Case c;
        c.packed = Case::Packed::B;
        c.M = M, c.N = N, c.K = K;
        c.pad_a = pad >= 0 ? pad : 1 + seed % 5, c.pad_c = 2;
        c.beta = (seed & 1) ? -0.5f : 0.0f;
        c.e.activation = (seed & 2) ? Activation::Relu : Activation::Silu;
        c.e.bias_kind = Epilogue::Bias::PerCol;
        c.residual = seed & 4;
        EXPECT_EQ(run_case(c, seed++), "") << describe(c);
      }
    });
  }
}

// A packed operand keeps the microkernel family it was packed for, whatever is selected later.
TEST(Gemm, PackedOperandOutlivesIsaSwitch) {
  IsaThreads restore;
  const std::vector<GemmIsa> all = isas();
  const int64_t M = 30, N = 45, K = 300;
  const std::vector<float> A = random_vec(M * K, 1), B = random_vec(K * N, 2);
  std::vector<float> want(M * N), got(M * N);
  kernels::sgemm(false, false, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, want.data(), N);
  for (GemmIsa packed_for : all) {
    kernels::set_sgemm_isa(packed_for);
    auto pa = kernels::sgemm_pack_a(false, M, K, A.data(), K);
    auto pb = kernels::sgemm_pack_b(false, K, N, B.data(), N);
    for (GemmIsa run_with : all) {
      kernels::set_sgemm_isa(run_with);
      for (bool side_b : {false, true}) {
        if (side_b)
          kernels::sgemm_packed_b(false, M, 1.0f, A.data(), K, *pb, 0.0f, got.data(), N);
        else
          kernels::sgemm_packed_a(*pa, false, N, 1.0f, B.data(), N, 0.0f, got.data(), N);
        for (int64_t i = 0; i < M * N; ++i)
          ASSERT_NEAR(got[i], want[i], 1e-4)
              << kernels::gemm_isa_name(packed_for) << " then " << kernels::gemm_isa_name(run_with)
              << (side_b ? " (B)" : " (A)") << " at " << i;
      }
    }
  }
}

TEST(Gemm, PackedOperandRejectsBadArguments) {
  const std::vector<float> A(12, 1.0f), B(12, 1.0f);
  std::vector<float> C(16, 0.0f);
  EXPECT_THROW(kernels::sgemm_pack_a(false, -1, 3, A.data(), 3), Error);
  EXPECT_THROW(kernels::sgemm_pack_a(false, 4, 3, A.data(), 2), Error);  // lda < K
  EXPECT_THROW(kernels::sgemm_pack_b(false, 3, 4, B.data(), 3), Error);  // ldb < N
  auto pa = kernels::sgemm_pack_a(false, 4, 3, A.data(), 3);
  auto pb = kernels::sgemm_pack_b(false, 3, 4, B.data(), 4);
  EXPECT_FALSE(pa->is_b());
  EXPECT_TRUE(pb->is_b());
  EXPECT_EQ(pa->outer(), 4);
  EXPECT_EQ(pa->depth(), 3);
  EXPECT_GE(pa->nbytes(), 12 * sizeof(float));
  EXPECT_THROW(kernels::sgemm_packed_a(*pa, false, 4, 1.0f, B.data(), 2, 0.0f, C.data(), 4),
               Error);  // ldb < N
  EXPECT_THROW(kernels::sgemm_packed_a(*pa, false, 4, 1.0f, B.data(), 4, 0.0f, C.data(), 3),
               Error);  // ldc < N
  EXPECT_THROW(kernels::sgemm_packed_b(false, 4, 1.0f, A.data(), 2, *pb, 0.0f, C.data(), 4),
               Error);  // lda < K
  // A packed left operand is not a right one, and vice versa.
  EXPECT_THROW(kernels::sgemm_packed_b(false, 4, 1.0f, A.data(), 3, *pa, 0.0f, C.data(), 4), Error);
  EXPECT_THROW(kernels::sgemm_packed_a(*pb, false, 4, 1.0f, B.data(), 4, 0.0f, C.data(), 4), Error);
}

// The vectorized activations over their whole range (saturation, tiny and huge inputs).
TEST(Gemm, ActivationExtremes) {
  std::vector<float> xs = {-1000, -100,   -88.5f, -87, -30,   -20,   -9,   -5,     -3,    -2, -1,
                           -0.5f, -1e-3f, -1e-6f, 0,   1e-6f, 1e-3f, 0.5f, 1,      2,     3,  5,
                           9,     20,     30,     87,  88.5f, 100,   1000, -0.25f, 0.25f, 7};
  const int64_t N = static_cast<int64_t>(xs.size()), M = 2;
  std::vector<float> A = {1.0f, 1.0f};  // M x 1
  for (Activation act : {Activation::Gelu, Activation::GeluTanh, Activation::Silu,
                         Activation::Sigmoid, Activation::Tanh}) {
    Epilogue e;
    e.activation = act;
    std::vector<float> C(M * N);
    kernels::sgemm(false, false, M, N, 1, 1.0f, A.data(), 1, xs.data(), N, 0.0f, C.data(), N, e);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        const double want = ref_activation(xs[j], e);
        EXPECT_NEAR(C[i * N + j], want, 2e-6 + 2e-6 * std::abs(want))
            << "activation " << int(act) << " x=" << xs[j];
      }
  }
}

TEST(Gemm, AlphaZeroAndEmptyK) {
  for_each_config([&] {
    uint32_t seed = 400;
    for (int64_t K : {int64_t(0), int64_t(9)}) {
      for (float beta : {0.0f, 0.5f}) {
        Case c;
        c.M = 9;
        c.N = 21;
        c.K = K;
        c.alpha = K == 0 ? 1.0f : 0.0f;
        c.beta = beta;
        c.pad_c = 1;
        c.e.bias_kind = Epilogue::Bias::PerRow;
        c.e.activation = Activation::Sigmoid;
        c.residual = true;
        EXPECT_EQ(run_case(c, seed++), "") << describe(c);
      }
    }
  });
}

TEST(Gemm, EmptyOutputIsANoOp) {
  float c = 7.0f;
  kernels::sgemm(false, false, 0, 5, 3, 1.0f, nullptr, 3, nullptr, 5, 0.0f, &c, 5);
  kernels::sgemm(false, false, 5, 0, 3, 1.0f, nullptr, 3, nullptr, 0, 0.0f, &c, 0);
  EXPECT_EQ(c, 7.0f);
}

TEST(Gemm, RejectsBadArguments) {
  float x[16] = {};
  try {
    kernels::sgemm(false, false, -1, 2, 2, 1.0f, x, 2, x, 2, 0.0f, x, 2);
    FAIL() << "expected an error";
  } catch (const Error& err) {
    EXPECT_EQ(err.op(), "sgemm");
  }
  try {
    kernels::sgemm(false, false, 2, 2, 4, 1.0f, x, 3, x, 2, 0.0f, x, 2);  // lda < K
    FAIL() << "expected an error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("lda"), std::string::npos);
  }
}

// ---- The matmul family -----------------------------------------------------------------------

namespace {

double get_elem(const TensorImpl& t, int64_t off) {
  return visit_dtype(t.dtype(), [&](auto v) -> double {
    using T = decltype(v);
    return static_cast<double>(static_cast<float>(t.data_ptr<T>()[off]));
  });
}
double get_f64(const TensorImpl& t, int64_t off) {
  if (t.dtype() == DType::Float64) return t.data_ptr<double>()[off];
  return get_elem(t, off);
}

// Element at a multi-index (strided read).
double at(const TensorImpl& t, const std::vector<int64_t>& idx) {
  int64_t off = 0;
  for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.strides()[d];
  return get_f64(t, off);
}

TensorImplPtr rand_tensor(std::vector<int64_t> sizes, DType dt, uint32_t seed) {
  auto t = empty(Dims(sizes), dt);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  visit_dtype(dt, [&](auto v) {
    using T = decltype(v);
    T* p = t->data_ptr<T>();
    for (int64_t i = 0; i < t->numel(); ++i) p[i] = T(static_cast<float>(dist(gen)));
    if constexpr (std::is_same_v<T, double>)
      for (int64_t i = 0; i < t->numel(); ++i) p[i] = dist(gen);
  });
  return t;
}

// Row-major values of a tensor of any strides.
std::vector<double> values(const TensorImpl& t) {
  std::vector<double> out;
  std::vector<int64_t> idx(t.dim(), 0);
  if (t.numel() == 0) return out;
  for (int64_t n = 0; n < t.numel(); ++n) {
    out.push_back(at(t, idx));
    for (int64_t d = t.dim() - 1; d >= 0; --d) {
      if (++idx[d] < t.size(d)) break;
      idx[d] = 0;
    }
  }
  return out;
}

// torch.matmul written out: returns (shape, row-major values) computed in float64.
std::pair<std::vector<int64_t>, std::vector<double>> ref_matmul(const TensorImpl& a,
                                                                const TensorImpl& b) {
  const int64_t da = a.dim(), db = b.dim();
  const int64_t n = da >= 2 ? a.size(-2) : 1, k = a.size(-1), m = db >= 2 ? b.size(-1) : 1;
  std::vector<int64_t> ab(a.sizes().begin(), a.sizes().end() - std::min<int64_t>(da, 2));
  std::vector<int64_t> bb(b.sizes().begin(), b.sizes().end() - std::min<int64_t>(db, 2));
  const size_t rb = std::max(ab.size(), bb.size());
  std::vector<int64_t> batch(rb);
  for (size_t i = 0; i < rb; ++i) {
    const int64_t x = i < rb - ab.size() ? 1 : ab[i - (rb - ab.size())];
    const int64_t y = i < rb - bb.size() ? 1 : bb[i - (rb - bb.size())];
    batch[i] = x == 1 ? y : x;
  }
  std::vector<int64_t> shape = batch;
  if (da >= 2) shape.push_back(n);
  if (db >= 2) shape.push_back(m);
  int64_t nbatch = 1;
  for (int64_t s : batch) nbatch *= s;
  std::vector<double> vals;
  for (int64_t bi = 0; bi < nbatch; ++bi) {
    std::vector<int64_t> bidx(rb);
    for (int64_t r = bi, d = int64_t(rb) - 1; d >= 0; --d) {
      bidx[d] = r % batch[d];
      r /= batch[d];
    }
    auto a_index = [&](int64_t i, int64_t p) {
      std::vector<int64_t> idx;
      for (size_t d = 0; d < ab.size(); ++d) {
        const int64_t s = ab[d];
        idx.push_back(s == 1 ? 0 : bidx[d + rb - ab.size()]);
      }
      if (da >= 2) idx.push_back(i);
      idx.push_back(p);
      return idx;
    };
    auto b_index = [&](int64_t p, int64_t j) {
      std::vector<int64_t> idx;
      for (size_t d = 0; d < bb.size(); ++d) {
        const int64_t s = bb[d];
        idx.push_back(s == 1 ? 0 : bidx[d + rb - bb.size()]);
      }
      idx.push_back(p);
      if (db >= 2) idx.push_back(j);
      return idx;
    };
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p) acc += at(a, a_index(i, p)) * at(b, b_index(p, j));
        vals.push_back(acc);
      }
  }
  return {shape, vals};
}

double tol_for(DType dt, int64_t k) {
  switch (dt) {
    case DType::Float64:
      return 1e-12 * (k + 1);
    case DType::Float32:
      return 1e-5 * (k + 1);
    case DType::Float16:
      return 2e-3 * (k + 1);
    default:
      return 1e-2 * (k + 1);  // bf16 output rounding
  }
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << what << " at " << i;
}

void check_matmul(const TensorImpl& a, const TensorImpl& b, const std::string& what) {
  auto [shape, want] = ref_matmul(a, b);
  EXPECT_EQ(kernels::matmul_shape(a, b), Dims(shape)) << what;
  auto out = empty(Dims(shape), a.dtype());
  kernels::matmul_out(a, b, *out);
  expect_close(values(*out), want, tol_for(a.dtype(), a.size(-1)), what);
}

std::string shape_str(const TensorImpl& t) {
  return describe(t);
}

}  // namespace

TEST(Linalg, MatmulShapesAndBroadcasting) {
  IsaThreads restore;
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> cases = {
      {{5}, {5}},
      {{3, 5}, {5}},
      {{5}, {5, 4}},
      {{3, 5}, {5, 4}},
      {{5}, {2, 5, 3}},
      {{2, 3, 5}, {5}},
      {{2, 3, 5}, {5, 4}},
      {{2, 1, 3, 5}, {4, 5, 6}},
      {{4, 3, 5}, {4, 5, 2}},
      {{1, 3, 5}, {2, 2, 5, 3}},
      {{2, 2, 3, 5}, {1, 5, 7}},
      {{0, 3, 5}, {5, 4}},
      {{3, 0}, {0, 4}},
      {{2, 3, 0}, {2, 0, 4}},
      {{3, 5}, {5, 0}}};
  uint32_t seed = 1000;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (auto& [sa, sb] : cases) {
      auto a = rand_tensor(sa, DType::Float32, seed++);
      auto b = rand_tensor(sb, DType::Float32, seed++);
      check_matmul(*a, *b, shape_str(*a) + " x " + shape_str(*b));
    }
  }
}

TEST(Linalg, NonContiguousOperandsAndOutputs) {
  IsaThreads restore;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    // Transposed contiguous matrices (no copy) and strided slices (copied).
    auto at_ = rand_tensor({13, 7}, DType::Float32, 1);
    auto bt = rand_tensor({5, 13}, DType::Float32, 2);
    auto a = views::transpose(*at_, 0, 1);  // [7, 13]
    auto b = views::transpose(*bt, 0, 1);   // [13, 5]
    check_matmul(*a, *b, "transposed both");
    auto big = rand_tensor({14, 26}, DType::Float32, 3);
    auto sl = views::slice(*views::slice(*big, 0, 0, 14, 2), 1, 0, 26, 2);  // [7, 13] stride 2
    check_matmul(*sl, *b, "sliced a");
    check_matmul(*a, *views::slice(*rand_tensor({13, 10}, DType::Float32, 4), 1, 1, 10, 2),
                 "sliced b");
    // Batched operand whose batch cannot fold into rows (batch dim innermost in memory).
    auto p = rand_tensor({6, 4, 3}, DType::Float32, 5);
    auto batched = views::permute(*p, Dims{2, 0, 1});  // [3, 6, 4]
    check_matmul(*batched, *rand_tensor({4, 5}, DType::Float32, 6), "permuted batch");
    // Transposed / strided outputs.
    auto out_t = empty(Dims{5, 7}, DType::Float32);
    auto out = views::transpose(*out_t, 0, 1);  // [7, 5]
    kernels::mm_out(*a, *b, *out);
    auto [shape, want] = ref_matmul(*a, *b);
    expect_close(values(*out), want, 1e-4, "transposed out");
    auto o3 = empty(Dims{3, 7, 2}, DType::Float32);
    auto o3v = views::permute(*o3, Dims{1, 0, 2});  // [7, 3, 2]
    auto x3 = rand_tensor({7, 3, 4}, DType::Float32, 7);
    auto w = rand_tensor({4, 2}, DType::Float32, 8);
    kernels::matmul_out(*x3, *w, *o3v);
    expect_close(values(*o3v), ref_matmul(*x3, *w).second, 1e-4, "permuted out");
    // Vectors with strides.
    auto v = views::slice(*rand_tensor({26}, DType::Float32, 9), 0, 0, 26, 2);  // [13]
    check_matmul(*a, *v, "strided mv");
    check_matmul(*v, *views::slice(*rand_tensor({26}, DType::Float32, 10), 0, 1, 26, 2),
                 "strided dot");
    check_matmul(*v, *b, "strided vm");
  }
}

TEST(Linalg, OtherDtypes) {
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> cases = {
      {{7, 13}, {13, 5}}, {{2, 3, 6}, {6, 4}}, {{2, 3, 6}, {2, 6, 4}},
      {{6}, {6}},         {{4, 6}, {6}},       {{70, 300}, {300, 65}}};
  uint32_t seed = 2000;
  for (DType dt : {DType::Float64, DType::Float16, DType::BFloat16}) {
    for (auto& [sa, sb] : cases) {
      auto a = rand_tensor(sa, dt, seed++);
      auto b = rand_tensor(sb, dt, seed++);
      check_matmul(*a, *b,
                   std::string(dtype_name(dt)) + " " + shape_str(*a) + " x " + shape_str(*b));
    }
    auto at_ = rand_tensor({9, 4}, dt, seed++);
    check_matmul(*views::transpose(*at_, 0, 1), *rand_tensor({9, 3}, dt, seed++),
                 std::string(dtype_name(dt)) + " transposed");
  }
}

TEST(Linalg, MmBmmMvDot) {
  auto a = rand_tensor({6, 9}, DType::Float32, 1), b = rand_tensor({9, 4}, DType::Float32, 2);
  auto out = empty(Dims{6, 4}, DType::Float32);
  kernels::mm_out(*a, *b, *out);
  expect_close(values(*out), ref_matmul(*a, *b).second, 1e-4, "mm");
  auto a3 = rand_tensor({3, 6, 9}, DType::Float32, 3),
       b3 = rand_tensor({3, 9, 4}, DType::Float32, 4);
  auto o3 = empty(Dims{3, 6, 4}, DType::Float32);
  kernels::bmm_out(*a3, *b3, *o3);
  expect_close(values(*o3), ref_matmul(*a3, *b3).second, 1e-4, "bmm");
  auto v = rand_tensor({9}, DType::Float32, 5);
  auto ov = empty(Dims{6}, DType::Float32);
  kernels::mv_out(*a, *v, *ov);
  expect_close(values(*ov), ref_matmul(*a, *v).second, 1e-4, "mv");
  auto od = empty(Dims{}, DType::Float32);
  auto w = rand_tensor({9}, DType::Float32, 6);
  kernels::dot_out(*v, *w, *od);
  expect_close(values(*od), ref_matmul(*v, *w).second, 1e-4, "dot");
  // Many small products in a batch (the per-thread batch path) and a long dot product.
  auto sa = rand_tensor({40, 5, 7}, DType::Float32, 7),
       sb = rand_tensor({40, 7, 3}, DType::Float32, 8);
  auto so = empty(Dims{40, 5, 3}, DType::Float32);
  kernels::bmm_out(*sa, *sb, *so);
  expect_close(values(*so), ref_matmul(*sa, *sb).second, 1e-4, "small bmm");
  auto lv = rand_tensor({5000}, DType::Float32, 9), lw = rand_tensor({5000}, DType::Float32, 10);
  kernels::dot_out(*lv, *lw, *od);
  expect_close(values(*od), ref_matmul(*lv, *lw).second, 1e-5, "long dot");
}

TEST(Linalg, Addmm) {
  const int64_t n = 7, k = 11, m = 9;
  const std::vector<std::vector<int64_t>> bias_shapes = {{m}, {1, m}, {n, 1}, {n, m}, {}, {1, 1}};
  uint32_t seed = 3000;
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16}) {
    for (auto& bs : bias_shapes) {
      for (auto [beta, alpha] : {std::pair{1.0, 1.0}, {0.5, -2.0}, {0.0, 1.5}}) {
        auto bias = rand_tensor(bs, dt, seed++);
        auto a = rand_tensor({n, k}, dt, seed++), b = rand_tensor({k, m}, dt, seed++);
        if (beta == 0.0 && dt == DType::Float32)  // beta == 0 ignores the bias, NaN included
          for (int64_t i = 0; i < bias->numel(); ++i)
            bias->data_ptr<float>()[i] = std::numeric_limits<float>::quiet_NaN();
        auto out = empty(Dims{n, m}, dt);
        kernels::addmm_out(*bias, *a, *b, beta, alpha, *out);
        auto prod = ref_matmul(*a, *b).second;
        auto bexp = views::expand(*bias, Dims{n, m});
        auto bvals = values(*bexp);
        std::vector<double> want(prod.size());
        for (size_t i = 0; i < want.size(); ++i)
          want[i] = alpha * prod[i] + (beta == 0.0 ? 0.0 : beta * bvals[i]);
        expect_close(values(*out), want, tol_for(dt, k) * 4,
                     std::string(dtype_name(dt)) + " bias " + describe(*bias) +
                         " beta=" + std::to_string(beta));
      }
    }
  }
  // In place on the bias (addmm_): out is the bias.
  auto c = rand_tensor({n, m}, DType::Float32, 1);
  auto a = rand_tensor({n, k}, DType::Float32, 2), b = rand_tensor({k, m}, DType::Float32, 3);
  auto before = values(*c);
  kernels::addmm_out(*c, *a, *b, 2.0, 1.0, *c);
  auto prod = ref_matmul(*a, *b).second;
  for (size_t i = 0; i < prod.size(); ++i) prod[i] += 2.0 * before[i];
  expect_close(values(*c), prod, 1e-4, "in-place addmm");
}

TEST(Linalg, Linear) {
  IsaThreads restore;
  uint32_t seed = 4000;
  for (DType dt : {DType::Float32, DType::Float64, DType::BFloat16}) {
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      for (std::vector<int64_t> xs :
           {std::vector<int64_t>{2, 3, 20}, {20}, {1, 20}, {0, 20}, {5, 20}}) {
        for (bool transposed_w : {false, true}) {
          for (bool with_bias : {false, true}) {
            auto x = rand_tensor(xs, dt, seed++);
            TensorImplPtr wstore = rand_tensor(
                transposed_w ? std::vector<int64_t>{20, 13} : std::vector<int64_t>{13, 20}, dt,
                seed++);
            auto w = transposed_w ? views::transpose(*wstore, 0, 1) : wstore;  // [13, 20]
            auto bias = rand_tensor({13}, dt, seed++);
            Dims shape = kernels::linear_shape(*x, *w);
            auto out = empty(shape, dt);
            kernels::linear_out(*x, *w, with_bias ? bias.get() : nullptr, *out);
            auto ref = ref_matmul(*x, *views::transpose(*w, 0, 1)).second;
            auto bv = values(*bias);
            if (with_bias)
              for (size_t i = 0; i < ref.size(); ++i) ref[i] += bv[i % 13];
            expect_close(values(*out), ref, tol_for(dt, 20) * 2,
                         std::string(dtype_name(dt)) + " x=" + describe(*x) +
                             (transposed_w ? " wT" : "") + (with_bias ? " bias" : ""));
          }
        }
      }
    }
  }
  // A larger one through the blocked path with the fused per-column bias.
  auto x = rand_tensor({37, 300}, DType::Float32, 1), w = rand_tensor({70, 300}, DType::Float32, 2);
  auto bias = rand_tensor({70}, DType::Float32, 3);
  auto out = empty(Dims{37, 70}, DType::Float32);
  kernels::linear_out(*x, *w, bias.get(), *out);
  auto ref = ref_matmul(*x, *views::transpose(*w, 0, 1)).second;
  auto bv = values(*bias);
  for (size_t i = 0; i < ref.size(); ++i) ref[i] += bv[i % 70];
  expect_close(values(*out), ref, 1e-4, "linear 37x300x70");
}

namespace {
// The float64 product of row-major a [M, K] and b, stored [N, K] (b_nk: a linear's weight) or
// [K, N].
std::vector<double> ref_product(const float* a, const float* b, int64_t M, int64_t N, int64_t K,
                                bool b_nk) {
  std::vector<double> out(static_cast<size_t>(M * N));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k)
        acc += double(a[i * K + k]) * (b_nk ? b[j * K + k] : b[k * N + j]);
      out[static_cast<size_t>(i * N + j)] = acc;
    }
  return out;
}
}  // namespace

// A constant weight packed once (prepare_linear_weight, what artifacts and compiled code do) gives
// act(x Wᵀ + bias + residual) within float32 rounding of a float64 loop, for input rows from one
// (an RNN step at batch 1) to many, on both thread counts; a weight packed for another shape is
// not used; dtypes and layouts the GEMM does not take are left to linear_out (false).
TEST(Linalg, LinearOnAPreparedWeight) {
  IsaThreads restore;
  const std::vector<std::array<int64_t, 3>> shapes{{1, 1024, 256}, {8, 1024, 256}, {3, 5, 7},
                                                   {13, 33, 1},    {128, 100, 64}, {37, 64, 300}};
  const Activation acts[] = {Activation::None, Activation::Relu, Activation::Clamp,
                             Activation::GeluTanh};
  uint32_t seed = 7100;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const auto& [M, N, K] : shapes)
      for (int variant = 0; variant < 4; ++variant) {
        const bool with_bias = variant & 1, with_res = variant & 2;
        auto x = rand_tensor({M, K}, DType::Float32, seed++);
        auto w = rand_tensor({N, K}, DType::Float32, seed++);
        auto bias = rand_tensor({N}, DType::Float32, seed++);
        auto res = rand_tensor({M, N}, DType::Float32, seed++);
        auto packed = kernels::prepare_linear_weight(*w);
        ASSERT_NE(packed, nullptr);
        Epilogue e;
        e.activation = acts[(variant + M) % 4];
        e.clamp_min = -0.5f, e.clamp_max = 0.75f;
        auto out = empty(Dims{M, N}, DType::Float32);
        ASSERT_TRUE(kernels::linear_gemm_out(*x, *w, with_bias ? bias.get() : nullptr,
                                             with_res ? res.get() : nullptr, e, *out,
                                             packed.get()));
        std::vector<double> ref =
            ref_product(x->data_ptr<float>(), w->data_ptr<float>(), M, N, K, /*b_nk=*/true);
        const float *bp = bias->data_ptr<float>(), *rp = res->data_ptr<float>();
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            double& r = ref[static_cast<size_t>(i * N + j)];
            r = ref_activation(r + (with_bias ? bp[j] : 0.0) + (with_res ? rp[i * N + j] : 0.0), e);
          }
        expect_close(values(*out), ref, 1e-4 * std::sqrt(double(K)),
                     "packed linear " + std::to_string(M) + "x" + std::to_string(N) + "x" +
                         std::to_string(K) + " variant " + std::to_string(variant) + " threads " +
                         std::to_string(threads));
      }
  }
  // Packed for another weight shape: ignored, the product is still the right one.
  auto x = rand_tensor({4, 6}, DType::Float32, 1), w = rand_tensor({5, 6}, DType::Float32, 2);
  auto other = kernels::prepare_linear_weight(*rand_tensor({6, 5}, DType::Float32, 3));
  auto out = empty(Dims{4, 5}, DType::Float32);
  ASSERT_TRUE(kernels::linear_gemm_out(*x, *w, nullptr, nullptr, {}, *out, other.get()));
  expect_close(values(*out), ref_matmul(*x, *views::transpose(*w, 0, 1)).second, 1e-5,
               "packed for another shape");
  // Not float32, or a strided weight: nothing to prepare, and the GEMM path declines.
  EXPECT_EQ(kernels::prepare_linear_weight(*rand_tensor({5, 6}, DType::Float64, 4)), nullptr);
  EXPECT_EQ(kernels::prepare_linear_weight(
                *views::transpose(*rand_tensor({6, 5}, DType::Float32, 5), 0, 1)),
            nullptr);
  auto xd = rand_tensor({4, 6}, DType::Float64, 6), wd = rand_tensor({5, 6}, DType::Float64, 7);
  auto outd = empty(Dims{4, 5}, DType::Float64);
  EXPECT_FALSE(kernels::linear_gemm_out(*xd, *wd, nullptr, nullptr, {}, *outd, nullptr));
  // Shapes that do not chain are named.
  auto bad = empty(Dims{4, 7}, DType::Float32);
  try {
    kernels::linear_gemm_out(*x, *w, nullptr, nullptr, {}, *bad, nullptr);
    ADD_FAILURE() << "expected an error for out [4, 7]";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("linear: expected input [..., 6] and out [..., 5]"),
              std::string::npos)
        << err.what();
  }
}

// linear_fused_out off the GEMM path: float64 operands and in_features 0 (out = act(bias +
// residual)) take the unfused steps, with the same result as the formula.
TEST(Linalg, LinearFusedOffTheGemmPath) {
  Epilogue e;
  e.activation = Activation::Clamp;
  e.clamp_min = -0.25f, e.clamp_max = 0.5f;
  for (int64_t K : {0, 5}) {
    for (DType dt : {DType::Float32, DType::Float64}) {
      auto x = rand_tensor({3, K}, dt, 11), w = rand_tensor({4, K}, dt, 12);
      auto bias = rand_tensor({4}, dt, 13), res = rand_tensor({3, 4}, dt, 14);
      auto out = empty(Dims{3, 4}, dt);
      kernels::linear_fused_out(*x, *w, bias.get(), res.get(), e, *out);
      const auto xv = values(*x), wv = values(*w), bv = values(*bias), rv = values(*res);
      std::vector<double> want(12);
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 4; ++j) {
          double acc = bv[j] + rv[i * 4 + j];
          for (int64_t k = 0; k < K; ++k) acc += xv[i * K + k] * wv[j * K + k];
          want[i * 4 + j] = ref_activation(acc, e);
        }
      expect_close(values(*out), want, 1e-6,
                   std::string(dtype_name(dt)) + " K=" + std::to_string(K));
    }
  }
}

// matmul with a constant right operand packed once: a [..., K] (a vector, a matrix, a batch folded
// into rows) times b [K, N], within float32 rounding of a float64 loop; what the packed path does
// not take (non-contiguous a) is declined, and a mismatched inner dim is named.
TEST(Linalg, MatmulOnAPreparedRightOperand) {
  IsaThreads restore;
  uint32_t seed = 7300;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const std::vector<int64_t>& as :
         std::vector<std::vector<int64_t>>{{64}, {1, 64}, {7, 64}, {2, 5, 64}, {3, 40, 64}})
      for (int64_t N : {1, 17, 96}) {
        const int64_t K = 64;
        auto a = rand_tensor(as, DType::Float32, seed++);
        auto b = rand_tensor({K, N}, DType::Float32, seed++);
        auto packed = kernels::prepare_matmul_operand(*b);
        ASSERT_NE(packed, nullptr);
        auto out = empty(kernels::matmul_shape(*a, *b), DType::Float32);
        ASSERT_TRUE(kernels::matmul_packed_out(*a, *b, *packed, *out));
        const int64_t M = a->numel() / K;
        const std::vector<double> ref =
            ref_product(a->data_ptr<float>(), b->data_ptr<float>(), M, N, K, /*b_nk=*/false);
        expect_close(values(*out), ref, 1e-4 * std::sqrt(double(K)),
                     "packed matmul " + describe(*a) + " x [64, " + std::to_string(N) + "]");
      }
  }
  auto b = rand_tensor({6, 5}, DType::Float32, 1);
  auto packed = kernels::prepare_matmul_operand(*b);
  auto at = views::transpose(*rand_tensor({6, 4}, DType::Float32, 2), 0, 1);  // [4, 6], strided
  auto out = empty(Dims{4, 5}, DType::Float32);
  EXPECT_FALSE(kernels::matmul_packed_out(*at, *b, *packed, *out));
  EXPECT_EQ(kernels::prepare_matmul_operand(*views::transpose(*b, 0, 1)), nullptr);
  auto bad = rand_tensor({4, 7}, DType::Float32, 3);
  try {
    kernels::matmul_packed_out(*bad, *b, *packed, *out);
    ADD_FAILURE() << "expected an error for a [4, 7] x [6, 5]";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("matmul"), std::string::npos) << err.what();
  }
}

TEST(Linalg, Errors) {
  auto expect_error = [](auto&& fn, const std::string& op, const std::string& needle) {
    try {
      fn();
      ADD_FAILURE() << "expected an error from " << op;
    } catch (const Error& e) {
      EXPECT_EQ(e.op(), op);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  auto a = rand_tensor({3, 4}, DType::Float32, 1), b = rand_tensor({5, 2}, DType::Float32, 2);
  auto s = rand_tensor({}, DType::Float32, 3);
  auto out = empty(Dims{3, 2}, DType::Float32);
  expect_error([&] { kernels::matmul_shape(*a, *b); }, "matmul", "expected inner dims");
  expect_error([&] { kernels::matmul_shape(*s, *a); }, "matmul", "at least 1 dim");
  expect_error(
      [&] {
        kernels::matmul_shape(*rand_tensor({2, 3, 4}, DType::Float32, 4),
                              *rand_tensor({3, 4, 2}, DType::Float32, 5));
      },
      "matmul", "broadcast");
  expect_error([&] { kernels::mm_out(*a, *b, *out); }, "mm", "expected");
  auto b2 = rand_tensor({4, 2}, DType::Float64, 6);
  expect_error([&] { kernels::matmul_out(*a, *b2, *out); }, "matmul", "same dtype");
  auto b3 = rand_tensor({4, 2}, DType::Float32, 7);
  auto bad_out = empty(Dims{2, 3}, DType::Float32);
  expect_error([&] { kernels::matmul_out(*a, *b3, *bad_out); }, "matmul", "expected out of shape");
  auto ia = empty(Dims{3, 4}, DType::Int32), ib = empty(Dims{4, 2}, DType::Int32);
  auto io = empty(Dims{3, 2}, DType::Int32);
  expect_error([&] { kernels::mm_out(*ia, *ib, *io); }, "mm", "floating");
  expect_error([&] { kernels::bmm_out(*a, *b3, *out); }, "bmm", "3-D");
  auto w = rand_tensor({6, 5}, DType::Float32, 8);
  expect_error([&] { kernels::linear_shape(*a, *w); }, "linear", "expected input");
  auto wb = rand_tensor({2, 4}, DType::Float32, 9), bias = rand_tensor({3}, DType::Float32, 10);
  expect_error([&] { kernels::linear_out(*a, *wb, bias.get(), *out); }, "linear", "bias");
  auto bad_bias = rand_tensor({2, 3}, DType::Float32, 11);
  expect_error([&] { kernels::addmm_out(*bad_bias, *a, *b3, 1.0, 1.0, *out); }, "addmm",
               "broadcast");
}
