// qlinear_dynamic (dynamic quantization's linear): hand-computed values, the input parameters and
// the result against the formula evaluated here in double, every microkernel family bit for bit
// against the reference loops, prepared weights, closeness to the float linear, and the errors
// bad operands give.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/runtime/kernels/qgemm.h"
#include "kiln/runtime/kernels/quantize.h"
#include "nn_test_util.h"
#include "qgemm_test_util.h"

using namespace kiln;
using namespace kiln::kernels;
using namespace nn_test;
using qgemm_test::IsaGuard;
using qgemm_test::isas;

namespace {

struct Weight {
  TensorImplPtr w, scale, zero_point;
};

// y = sum_k (xq - zp) (w - w_zp) * x_scale * w_scale[o] + bias[o] in double, with the input's
// parameters from its range written out here.
std::vector<double> reference(const std::vector<double>& x, int64_t M, int64_t K, int64_t N,
                              const std::vector<double>& w, const std::vector<double>& ws,
                              const std::vector<double>& wz, const std::vector<double>& bias) {
  // The range of the float32 input, its width in float32 (as the kernel rounds it: a width
  // taken in double can differ by an ulp, and an element near a rounding tie then quantizes one
  // step apart, moving its whole row).
  float lo = 0, hi = 0;
  for (double v : x) lo = std::min(lo, float(v)), hi = std::max(hi, float(v));
  const float scale = std::max((hi - lo) / 255.0f, std::numeric_limits<float>::epsilon());
  const double zp = std::clamp(0.0 - round_half_even(double(lo / scale)), 0.0, 255.0);
  std::vector<double> y(size_t(M * N));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t o = 0; o < N; ++o) {
      const size_t c = ws.size() == 1 ? 0 : size_t(o);
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double q =
            std::clamp(round_half_even(double(float(x[i * K + k]) / scale)) + zp, 0.0, 255.0);
        acc += (q - zp) * (w[o * K + k] - wz[c]);
      }
      y[i * N + o] = acc * double(scale) * ws[c] + (bias.empty() ? 0.0 : bias[o]);
    }
  return y;
}

}  // namespace

TEST(QLinearDynamic, HandComputedValues) {
  // x [-1, 0.5, 2]: range [-1, 2], scale 3 / 255, zero point 85; x quantizes to 0, 127 (42.5
  // rounds to 42), 255. Row 0 of w [1, -2, 3] at scale 0.5: (-85 - 84 + 510) = 341 -> 341 *
  // (3 / 255) * 0.5 + 0.1; row 1 [0, 4, -1] at 0.25: 168 - 170 = -2 -> -2 * (3 / 255) * 0.25 - 0.2.
  auto x = from_vec({-1.0, 0.5, 2.0}, Dims{1, 3}, DType::Float32);
  auto w = from_vec({1, -2, 3, 0, 4, -1}, Dims{2, 3}, DType::Int8);
  auto ws = from_vec({0.5, 0.25}, Dims{2}, DType::Float32);
  auto wz = from_vec({0, 0}, Dims{2}, DType::Int32);
  auto b = from_vec({0.1, -0.2}, Dims{2}, DType::Float32);
  auto y = empty(Dims{1, 2}, DType::Float32);
  qlinear_dynamic_out(*x, *w, *ws, *wz, b.get(), *y);
  const double s = double(3.0f / 255.0f);
  expect_close(to_vec(*y), {341 * s * 0.5 + 0.1, -2 * s * 0.25 - 0.2}, 1e-6, 1e-6);
}

TEST(QLinearDynamic, EveryFamilyEqualsTheReferenceAndTheFormula) {
  IsaGuard guard;
  struct Shape {
    Dims x;
    int64_t N;
  };
  for (const Shape& sh : {Shape{{1, 7}, 5}, Shape{{3, 64}, 33}, Shape{{2, 5, 129}, 70},
                          Shape{{17, 31}, 16}, Shape{{4, 0}, 3}}) {
    const int64_t K = sh.x.back();
    int64_t M = 1;
    for (size_t d = 0; d + 1 < sh.x.size(); ++d) M *= sh.x[d];
    for (bool per_channel : {true, false})
      for (DType wd : {DType::Int8, DType::UInt8}) {
        SCOPED_TRACE(testing::Message() << "K " << K << " N " << sh.N << " per_channel "
                                        << per_channel << " " << dtype_name(wd));
        const int64_t C = per_channel ? sh.N : 1;
        std::vector<double> wv(static_cast<size_t>(sh.N * K)), ws(static_cast<size_t>(C)),
            wz(static_cast<size_t>(C));
        std::uniform_int_distribution<int> wu(wd == DType::Int8 ? -127 : 0,
                                              wd == DType::Int8 ? 127 : 255);
        for (auto& v : wv) v = wu(rng());
        for (int64_t c = 0; c < C; ++c) {
          ws[size_t(c)] = 0.001 + 0.01 * double(c % 7);
          wz[size_t(c)] = wd == DType::Int8 ? 0 : 100 + double(c % 5);  // uint8: int16 pairs
        }
        const std::vector<double> xv = rand_vec(numel(sh.x), -3.0, 5.0), bv = rand_vec(sh.N);
        auto x = from_vec(xv, sh.x, DType::Float32);
        auto w = from_vec(wv, Dims{sh.N, K}, wd);
        auto s = from_vec(ws, per_channel ? Dims{C} : Dims{}, DType::Float32);
        auto z = from_vec(wz, per_channel ? Dims{C} : Dims{}, DType::Int32);
        auto b = from_vec(bv, Dims{sh.N}, DType::Float32);
        Dims out_shape = sh.x;
        out_shape.back() = sh.N;
        auto want = empty(out_shape, DType::Float32);
        qlinear_dynamic_reference_out(*x, *w, *s, *z, b.get(), *want);
        // The float32 result within rounding of the formula in double.
        const std::vector<double> r = reference(xv, M, K, sh.N, wv, ws, wz, bv);
        expect_close(to_vec(*want), r, 1e-5, 1e-5);
        for (QGemmIsa isa : isas()) {
          set_qgemm_isa(isa);
          SCOPED_TRACE(qgemm_isa_name(isa));
          auto got = empty(out_shape, DType::Float32);
          qlinear_dynamic_out(*noncontig(*x), *w, *s, *z, b.get(), *got);
          EXPECT_EQ(to_vec(*got), to_vec(*want));
          auto prepared = prepare_qlinear_dynamic_weight(*w, *s, *z);
          auto again = empty(out_shape, DType::Float32);
          qlinear_dynamic_out(*x, *w, *s, *z, nullptr, *again, prepared.get());
          auto no_bias = empty(out_shape, DType::Float32);
          qlinear_dynamic_reference_out(*x, *w, *s, *z, nullptr, *no_bias);
          EXPECT_EQ(to_vec(*again), to_vec(*no_bias));
        }
      }
  }
}

// Quantizing the weights per channel and the input per call stays close to the float linear.
TEST(QLinearDynamic, CloseToTheFloatLinear) {
  const int64_t M = 8, K = 256, N = 64;
  const std::vector<double> xv = rand_vec(M * K), wf = rand_vec(N * K, -0.2, 0.2);
  std::vector<double> wq(wf.size()), ws(N);
  for (int64_t o = 0; o < N; ++o) {
    double amax = 0;
    for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::abs(wf[o * K + k]));
    ws[o] = amax / 127.0;
    for (int64_t k = 0; k < K; ++k) wq[o * K + k] = round_half_even(wf[o * K + k] / ws[o]);
  }
  auto y = empty(Dims{M, N}, DType::Float32);
  qlinear_dynamic_out(*from_vec(xv, Dims{M, K}, DType::Float32),
                      *from_vec(wq, Dims{N, K}, DType::Int8),
                      *from_vec(ws, Dims{N}, DType::Float32),
                      *from_vec(std::vector<double>(N, 0.0), Dims{N}, DType::Int32), nullptr, *y);
  const std::vector<double> got = to_vec(*y);
  double signal = 0, noise = 0;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t o = 0; o < N; ++o) {
      double ref = 0;
      for (int64_t k = 0; k < K; ++k) ref += xv[i * K + k] * wf[o * K + k];
      signal += ref * ref;
      noise += (got[i * N + o] - ref) * (got[i * N + o] - ref);
    }
  EXPECT_GT(10 * std::log10(signal / noise), 35.0);
}

TEST(QLinearDynamic, BadOperandsAreNamed) {
  auto w = from_vec({1, 2, 3, 4}, Dims{2, 2}, DType::Int8);
  auto ws = from_vec({0.1}, Dims{}, DType::Float32);
  auto wz = from_vec({0}, Dims{}, DType::Int32);
  auto y = empty(Dims{1, 2}, DType::Float32);
  auto expect = [](const std::function<void()>& fn, const std::string& what) {
    const std::string msg = error_of(fn);
    EXPECT_NE(msg.find(what), std::string::npos) << "got: " << msg;
  };
  auto nan = from_vec({1.0, std::nan("")}, Dims{1, 2}, DType::Float32);
  expect([&] { qlinear_dynamic_out(*nan, *w, *ws, *wz, nullptr, *y); },
         "qlinear_dynamic: expected finite input values");
  auto xi = from_vec({1, 2}, Dims{1, 2}, DType::UInt8);
  expect([&] { qlinear_dynamic_out(*xi, *w, *ws, *wz, nullptr, *y); },
         "qlinear_dynamic: expected input of dtype float32, got uint8");
  auto x = from_vec({1, 2}, Dims{1, 2}, DType::Float32);
  auto b3 = from_vec({1, 2, 3}, Dims{3}, DType::Float32);
  expect([&] { qlinear_dynamic_out(*x, *w, *ws, *wz, b3.get(), *y); },
         "qlinear_dynamic: expected bias of shape [2], got [3]");
  auto bi = from_vec({1, 2}, Dims{2}, DType::Int32);
  expect([&] { qlinear_dynamic_out(*x, *w, *ws, *wz, bi.get(), *y); },
         "qlinear_dynamic: expected bias of dtype float32, got int32");
  auto x3 = from_vec({1, 2, 3}, Dims{1, 3}, DType::Float32);
  expect([&] { qlinear_dynamic_out(*x3, *w, *ws, *wz, nullptr, *y); },
         "qlinear_dynamic: expected weight with 3 in_features");
}
