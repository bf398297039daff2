// sgemm (every ISA path, 1 and 2 threads, transposes, leading dims, alpha/beta, epilogues) and
// the matmul family, each against naive float64 references written here.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kiln/runtime/error.h"
#include "kiln/runtime/kernels/gemm.h"
#include "kiln/runtime/thread_pool.h"

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
  kernels::sgemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb, c.beta, C.data(),
                 ldc, e);
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
         " bias=" + std::to_string(int(c.e.bias_kind)) + " res=" + std::to_string(c.residual);
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
  const int64_t sizes[][3] = {{1, 1, 1},      {7, 17, 33},    {17, 7, 1},    {33, 100, 17},
                              {100, 33, 257}, {257, 100, 7},  {1, 257, 100}, {257, 1, 33},
                              {13, 257, 64},  {100, 100, 100}};
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
  const int64_t sizes[][3] = {{30, 70, 1000}, {40, 1100, 50}, {1700, 24, 20}, {65, 1300, 700}};
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
