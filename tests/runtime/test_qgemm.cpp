// qlinear / qconv2d (kernels/qgemm.h): the reference kernels against the formula evaluated here
// (exact integer sums by direct indexing, the float32 requantization, and within one step of the
// real-valued result in double); every microkernel family
// (AVX-512 VNNI and AVX2 where the CPU has them, portable) equal to the reference bit for bit over
// edge shapes, dtypes, zero points, per-channel weights, relu, groups, strides, padding and
// dilation; the byte-quad families over both activation dtypes, K remainders and the largest K;
// the family Auto picks on arm64; saturation; the errors bad parameters give.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <utility>

#include "kiln/runtime/kernels/qgemm.h"
#include "kiln/runtime/target.h"
#include "kiln/runtime/thread_pool.h"
#include "nn_test_util.h"
#include "qgemm_test_util.h"

using namespace kiln;
using namespace kiln::kernels;
using namespace nn_test;

namespace {

int64_t lo_of(DType d) {
  return d == DType::Int8 ? -128 : 0;
}
int64_t hi_of(DType d) {
  return d == DType::Int8 ? 127 : 255;
}

// Random integers of dtype d in its whole range.
TensorImplPtr rand_int(Dims sizes, DType d) {
  std::uniform_int_distribution<int> u(int(lo_of(d)), int(hi_of(d)));
  std::vector<double> v(size_t(numel(sizes)));
  for (auto& x : v) x = u(rng());
  return from_vec(v, sizes, d);
}

TensorImplPtr scalar(double v, DType d) {
  return from_vec({v}, Dims{}, d);
}

// One product's quantization parameters as numbers and as the tensors the kernel takes.
struct Case {
  DType x_dtype = DType::UInt8, w_dtype = DType::Int8, y_dtype = DType::UInt8;
  double x_scale = 0.02, y_scale = 0.5;
  int64_t x_zp = 3, y_zp = 7;
  std::vector<double> w_scale;  // 1 value: per tensor
  std::vector<int64_t> w_zp;
  std::vector<int64_t> bias;  // empty: none
  bool relu = false;

  TensorImplPtr xs, xz, ws, wz, b, ys, yz;
  QuantizedOperands operands() {
    xs = scalar(x_scale, DType::Float32);
    xz = scalar(double(x_zp), DType::Int32);
    const bool per_channel = w_scale.size() > 1;
    const Dims wd = per_channel ? Dims{int64_t(w_scale.size())} : Dims{};
    ws = from_vec(w_scale, wd, DType::Float32);
    wz = from_vec(std::vector<double>(w_zp.begin(), w_zp.end()), wd, DType::Int64);
    ys = scalar(y_scale, DType::Float32);
    yz = scalar(double(y_zp), DType::Int32);
    QuantizedOperands q{xs.get(), xz.get(), ws.get(), wz.get(), nullptr, ys.get(), yz.get(), relu};
    if (!bias.empty()) {
      b = from_vec(std::vector<double>(bias.begin(), bias.end()), Dims{int64_t(bias.size())},
                   DType::Int32);
      q.bias = b.get();
    }
    return q;
  }
  size_t ch(int64_t o) const { return w_scale.size() == 1 ? 0 : size_t(o); }

  // The formula of kernels/qgemm.h for one output: float32 multiplier, half-to-even rounding
  // done here by hand, clamp.
  int64_t requantize(int64_t acc, int64_t o) const {
    const float m = float(x_scale) * float(w_scale[ch(o)]) / float(y_scale);
    const int64_t sum = acc + (bias.empty() ? 0 : bias[o]);
    const double v = double(float(sum) * m);
    const double f = std::floor(v);
    double r = v - f < 0.5 ? f : v - f > 0.5 ? f + 1 : (std::fmod(f, 2.0) == 0 ? f : f + 1);
    int64_t y = int64_t(r) + y_zp;
    const int64_t lo = relu ? std::max(y_zp, lo_of(y_dtype)) : lo_of(y_dtype);
    return std::clamp(y, lo, hi_of(y_dtype));
  }
  // The real-valued result: within one step of requantize() (the float32 rounding of the
  // multiplier and of the sum may move an exact tie).
  double real(int64_t acc, int64_t o) const {
    const double sum = double(acc + (bias.empty() ? 0 : bias[o]));
    double y = std::nearbyint(sum * x_scale * w_scale[ch(o)] / y_scale) + double(y_zp);
    const double lo = relu ? std::max<double>(y_zp, lo_of(y_dtype)) : lo_of(y_dtype);
    return std::clamp(y, lo, double(hi_of(y_dtype)));
  }
};

// Weights' zero points are 0 (the symmetric scheme, which the VNNI kernels take) in every other
// case, and drawn from the dtype's middle otherwise.
Case random_case(int64_t channels, bool per_channel, DType x, DType w, DType y, bool bias,
                 bool relu) {
  static int calls = 0;
  const bool symmetric = calls++ % 2 == 0;
  Case c;
  c.x_dtype = x, c.w_dtype = w, c.y_dtype = y, c.relu = relu;
  std::uniform_int_distribution<int> zp_x(int(lo_of(x)), int(hi_of(x)));
  std::uniform_int_distribution<int> zp_y(int(lo_of(y)), int(hi_of(y)));
  std::uniform_int_distribution<int> zp_w(int(lo_of(w)) / 4, int(hi_of(w)) / 4);
  std::uniform_real_distribution<double> s(0.004, 0.05);
  c.x_zp = zp_x(rng()), c.y_zp = zp_y(rng());
  c.x_scale = s(rng()), c.y_scale = s(rng()) * 40;
  const int64_t n = per_channel ? channels : 1;
  for (int64_t i = 0; i < n; ++i) {
    c.w_scale.push_back(s(rng()));
    c.w_zp.push_back(symmetric ? 0 : zp_w(rng()));
  }
  if (bias) {
    std::uniform_int_distribution<int> b(-20000, 20000);
    for (int64_t i = 0; i < channels; ++i) c.bias.push_back(b(rng()));
  }
  return c;
}

using qgemm_test::IsaGuard;
using qgemm_test::isas;

// Runs `fn(out)` under every ISA and checks each output equals `want` exactly.
template <typename Fn>
void expect_every_isa(const std::vector<double>& want, Dims shape, DType dt, Fn&& fn,
                      const std::string& what) {
  IsaGuard guard;
  for (QGemmIsa isa : isas()) {
    set_qgemm_isa(isa);
    auto out = empty(shape, dt);
    fn(*out);
    const std::vector<double> got = to_vec(*out);
    int64_t bad = 0;
    for (size_t i = 0; i < want.size(); ++i) bad += got[i] != want[i];
    EXPECT_EQ(bad, 0) << what << " isa " << qgemm_isa_name(isa) << ": " << bad << " of "
                      << want.size() << " differ";
  }
}

std::string dt(DType d) {
  return std::string(dtype_name(d));
}

// A case the byte-quad families take (int8 weights, zero points 0) with activations of dtype x:
// the activations' zero point cycles through the ends of x's range, 0 and a random value.
Case quad_case(int64_t channels, DType x, DType y, int variant) {
  Case c = random_case(channels, variant % 2 == 0, x, DType::Int8, y, variant % 3 != 2,
                       variant % 4 == 3);
  std::fill(c.w_zp.begin(), c.w_zp.end(), 0);
  const int64_t zps[] = {lo_of(x), hi_of(x), 0, c.x_zp};
  c.x_zp = zps[variant % 4];
  return c;
}

}  // namespace

TEST(QLinear, ReferenceIsTheFormula) {
  const int64_t M = 7, K = 37, N = 19;
  Case c = random_case(N, true, DType::UInt8, DType::Int8, DType::UInt8, true, false);
  auto x = rand_int({M, K}, c.x_dtype), w = rand_int({N, K}, c.w_dtype);
  auto out = empty(Dims{M, N}, c.y_dtype);
  qlinear_reference_out(*x, *w, c.operands(), *out);
  const auto xv = to_vec(*x), wv = to_vec(*w), got = to_vec(*out);
  int64_t off_by_one = 0;
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t o = 0; o < N; ++o) {
      int64_t acc = 0;
      for (int64_t k = 0; k < K; ++k)
        acc += (int64_t(xv[i * K + k]) - c.x_zp) * (int64_t(wv[o * K + k]) - c.w_zp[o]);
      ASSERT_EQ(got[i * N + o], double(c.requantize(acc, o))) << i << "," << o;
      const double diff = std::abs(got[i * N + o] - c.real(acc, o));
      ASSERT_LE(diff, 1.0);
      off_by_one += diff != 0;
    }
  }
  EXPECT_LE(off_by_one, 2);  // only near-exact ties may move
}

TEST(QLinear, EveryIsaEqualsReferenceAcrossShapesAndDtypes) {
  const DType ints[] = {DType::UInt8, DType::Int8};
  int combo = 0;
  for (int64_t M : {1, 5, 6, 13})
    for (int64_t N : {1, 16, 17, 40})
      for (int64_t K : {1, 2, 3, 64, 129}) {
        const DType xd = ints[combo % 2], wd = ints[(combo / 2) % 2], yd = ints[(combo / 4) % 2];
        const bool per_channel = combo % 3 != 0, bias = combo % 5 != 0, relu = combo % 7 < 3;
        ++combo;
        Case c = random_case(N, per_channel, xd, wd, yd, bias, relu);
        auto x = rand_int({M, K}, xd), w = rand_int({N, K}, wd);
        auto ref = empty(Dims{M, N}, yd);
        auto q = c.operands();
        qlinear_reference_out(*x, *w, q, *ref);
        expect_every_isa(
            to_vec(*ref), {M, N}, yd, [&](TensorImpl& out) { qlinear_out(*x, *w, q, out); },
            "M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
                " x " + dt(xd) + " w " + dt(wd) + " y " + dt(yd));
      }
}

// The byte-quad families (A the activations, B the int8 weights) over both activation dtypes and
// every K remainder of a quad, at tile edges: equal to the reference. The sweep above gives these
// weights to one activation dtype only (its zero points alternate with the combinations).
TEST(QLinear, ByteQuadsEqualReferenceForEitherActivationDtype) {
  const std::pair<int64_t, int64_t> tiles[] = {{1, 1}, {7, 9}, {8, 8}, {9, 23}, {17, 16}};
  int variant = 0;
  for (DType xd : {DType::UInt8, DType::Int8})
    for (int64_t K : {1, 2, 3, 4, 5, 7, 8, 31, 33, 129})
      for (auto [M, N] : tiles) {
        const DType yd = variant % 2 ? DType::Int8 : DType::UInt8;
        Case c = quad_case(N, xd, yd, variant++);
        auto x = rand_int({M, K}, xd), w = rand_int({N, K}, DType::Int8);
        auto q = c.operands();
        auto ref = empty(Dims{M, N}, yd);
        qlinear_reference_out(*x, *w, q, *ref);
        expect_every_isa(
            to_vec(*ref), {M, N}, yd, [&](TensorImpl& out) { qlinear_out(*x, *w, q, out); },
            "M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
                " x " + dt(xd) + " x_zp " + std::to_string(c.x_zp));
      }
}

TEST(QLinear, BatchedInputsStridedInputsAndThreads) {
  Case c = random_case(24, true, DType::UInt8, DType::Int8, DType::Int8, true, true);
  auto x = rand_int({3, 4, 50}, c.x_dtype), w = rand_int({24, 50}, c.w_dtype);
  auto q = c.operands();
  auto ref = empty(Dims{3, 4, 24}, c.y_dtype);
  qlinear_reference_out(*x, *w, q, *ref);
  auto xs = noncontig(*x);
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    expect_every_isa(
        to_vec(*ref), {3, 4, 24}, c.y_dtype, [&](TensorImpl& out) { qlinear_out(*xs, *w, q, out); },
        "threads " + std::to_string(threads));
  }
  set_num_threads(2);
}

TEST(QLinear, SaturatesAndReluClampsAtTheZeroPoint) {
  // x - x_zp = 255 and w = 127 over K = 8: acc = 259080, times 1 -> far above 255; the negated
  // weights far below 0 (relu: the zero point).
  Case c;
  c.x_zp = 0, c.x_scale = 1.0, c.y_scale = 1.0, c.y_zp = 10;
  c.w_scale = {1.0}, c.w_zp = {0};
  auto x = from_vec(std::vector<double>(8, 255.0), {1, 8}, DType::UInt8);
  std::vector<double> wv(16, 127.0);
  for (int k = 8; k < 16; ++k) wv[k] = -127.0;
  auto w = from_vec(wv, {2, 8}, DType::Int8);
  for (bool relu : {false, true}) {
    c.relu = relu;
    auto q = c.operands();
    expect_every_isa(
        {255.0, relu ? 10.0 : 0.0}, {1, 2}, DType::UInt8,
        [&](TensorImpl& out) { qlinear_out(*x, *w, q, out); }, relu ? "relu" : "plain");
  }
}

TEST(QConv2d, ReferenceIsTheFormula) {
  const int64_t N = 2, C = 3, H = 6, W = 5, O = 4, KH = 3, KW = 2;
  Conv2dParams p;
  p.stride_h = 2, p.pad_h = 1, p.pad_w = 1, p.dilation_w = 2;
  const int64_t Ho = (H + 2 - 3) / 2 + 1, Wo = (W + 2 - 2 * (KW - 1) - 1) + 1;
  Case c = random_case(O, true, DType::Int8, DType::Int8, DType::UInt8, true, false);
  auto x = rand_int({N, C, H, W}, c.x_dtype), w = rand_int({O, C, KH, KW}, c.w_dtype);
  auto out = empty(Dims{N, O, Ho, Wo}, c.y_dtype);
  qconv2d_reference_out(*x, *w, c.operands(), p, *out);
  const auto xv = to_vec(*x), wv = to_vec(*w), got = to_vec(*out);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          int64_t acc = 0;
          for (int64_t ci = 0; ci < C; ++ci)
            for (int64_t kh = 0; kh < KH; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw) {
                const int64_t ih = oh * 2 - 1 + kh, iw = ow - 1 + 2 * kw;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;  // x_zp: contributes 0
                acc += (int64_t(xv[((n * C + ci) * H + ih) * W + iw]) - c.x_zp) *
                       (int64_t(wv[((o * C + ci) * KH + kh) * KW + kw]) - c.w_zp[o]);
              }
          ASSERT_EQ(got[((n * O + o) * Ho + oh) * Wo + ow], double(c.requantize(acc, o)));
        }
}

TEST(QConv2d, EveryIsaEqualsReference) {
  struct Geometry {
    int64_t N, C, H, W, O, KH, KW, stride, pad, dilation, groups;
  };
  const Geometry shapes[] = {
      {1, 3, 9, 9, 8, 3, 3, 1, 1, 1, 1},
      {2, 16, 7, 7, 24, 3, 3, 2, 1, 1, 1},
      {1, 8, 6, 5, 8, 3, 3, 1, 1, 1, 8},
      {1, 12, 5, 6, 6, 1, 1, 1, 0, 1, 3},
      {1, 5, 11, 7, 7, 5, 3, 2, 2, 2, 1},
      {3, 4, 4, 4, 17, 2, 2, 1, 0, 1, 1},
      {1, 32, 14, 14, 19, 1, 1, 2, 0, 1, 1},
      // Depthwise (the direct kernel for int8 weights): strides, dilation, wide padding.
      {2, 16, 13, 12, 16, 3, 3, 2, 1, 1, 16},
      {1, 6, 9, 10, 6, 5, 5, 1, 4, 2, 6},
      {1, 4, 3, 3, 4, 3, 3, 1, 2, 1, 4},
      {1, 24, 28, 28, 24, 3, 3, 1, 1, 1, 24}};
  const DType ints[] = {DType::UInt8, DType::Int8};
  int combo = 0;
  for (const Geometry& s : shapes) {
    Conv2dParams p;
    p.stride_h = p.stride_w = s.stride;
    p.pad_h = p.pad_w = s.pad;
    p.dilation_h = p.dilation_w = s.dilation;
    p.groups = s.groups;
    const int64_t Ho = (s.H + 2 * s.pad - s.dilation * (s.KH - 1) - 1) / s.stride + 1;
    const int64_t Wo = (s.W + 2 * s.pad - s.dilation * (s.KW - 1) - 1) / s.stride + 1;
    for (int variant = 0; variant < 2; ++variant, ++combo) {
      const DType xd = ints[combo % 2], wd = ints[(combo / 2) % 2], yd = ints[(combo / 3) % 2];
      Case c = random_case(s.O, variant == 0, xd, wd, yd, combo % 3 != 1, variant == 1);
      auto x = rand_int({s.N, s.C, s.H, s.W}, xd),
           w = rand_int({s.O, s.C / s.groups, s.KH, s.KW}, wd);
      auto q = c.operands();
      auto ref = empty(Dims{s.N, s.O, Ho, Wo}, yd);
      qconv2d_reference_out(*x, *w, q, p, *ref);
      expect_every_isa(
          to_vec(*ref), {s.N, s.O, Ho, Wo}, yd,
          [&](TensorImpl& out) { qconv2d_out(*x, *w, q, p, out); },
          "conv C=" + std::to_string(s.C) + " O=" + std::to_string(s.O) + " groups " +
              std::to_string(s.groups) + " x " + dt(xd) + " w " + dt(wd));
    }
  }
}

// The byte-quad families on convolutions (A the int8 weights, B the activations' columns, the
// padding their zero point) over both activation dtypes, zero points at the ends of the range and
// K = C * KH * KW of every remainder of a quad, output channels and columns at tile edges.
TEST(QConv2d, ByteQuadsEqualReferenceForEitherActivationDtype) {
  struct Geometry {
    int64_t C, H, W, O, KH, KW, stride, pad, groups;
  };
  const Geometry shapes[] = {{1, 5, 5, 8, 1, 1, 1, 0, 1},    // K = 1
                             {2, 4, 5, 9, 1, 1, 1, 1, 1},    // K = 2, padded 1x1
                             {3, 6, 6, 7, 1, 1, 2, 0, 1},    // K = 3
                             {1, 7, 6, 16, 3, 3, 1, 1, 1},   // K = 9
                             {3, 9, 9, 17, 3, 3, 2, 1, 1},   // K = 27, the stem's shape
                             {5, 6, 7, 1, 1, 2, 1, 1, 1},    // K = 10, one channel
                             {4, 5, 5, 12, 2, 2, 1, 0, 1},   // K = 16
                             {6, 6, 5, 10, 3, 3, 1, 2, 2}};  // K = 27 per group
  int variant = 0;
  for (const Geometry& s : shapes) {
    Conv2dParams p;
    p.stride_h = p.stride_w = s.stride;
    p.pad_h = p.pad_w = s.pad;
    p.groups = s.groups;
    const int64_t Ho = (s.H + 2 * s.pad - s.KH) / s.stride + 1;
    const int64_t Wo = (s.W + 2 * s.pad - s.KW) / s.stride + 1;
    for (DType xd : {DType::UInt8, DType::Int8})
      for (int rep = 0; rep < 2; ++rep) {
        const DType yd = variant % 2 ? DType::Int8 : DType::UInt8;
        Case c = quad_case(s.O, xd, yd, variant++);
        auto x = rand_int({2, s.C, s.H, s.W}, xd),
             w = rand_int({s.O, s.C / s.groups, s.KH, s.KW}, DType::Int8);
        auto q = c.operands();
        auto ref = empty(Dims{2, s.O, Ho, Wo}, yd);
        qconv2d_reference_out(*x, *w, q, p, *ref);
        expect_every_isa(
            to_vec(*ref), {2, s.O, Ho, Wo}, yd,
            [&](TensorImpl& out) { qconv2d_out(*x, *w, q, p, out); },
            "conv C=" + std::to_string(s.C) + " O=" + std::to_string(s.O) +
                " K=" + std::to_string(s.C / s.groups * s.KH * s.KW) + " x " + dt(xd) + " x_zp " +
                std::to_string(c.x_zp));
      }
  }
}

// Weights the byte-quad families take run the family chosen (a family falling back to another
// would still equal the reference): prepared weights name it.
TEST(QConv2d, QuadWeightsRunTheFamilyChosen) {
  IsaGuard guard;
  Conv2dParams p;
  Case c = quad_case(8, DType::UInt8, DType::UInt8, 0);
  auto w = rand_int({8, 3, 3, 3}, DType::Int8), w2 = rand_int({8, 27}, DType::Int8);
  auto q = c.operands();
  for (QGemmIsa isa : isas()) {
    set_qgemm_isa(isa);
    const PreparedQWeightPtr conv = prepare_qconv2d_weight(*w, q, p, DType::UInt8, DType::UInt8);
    const std::string family = prepared_family(*conv);  // "amx-int8" or "amx-int8-direct"
    EXPECT_EQ(family.substr(0, family.find("-direct")), qgemm_isa_name(isa));
    const PreparedQWeightPtr linear = prepare_qlinear_weight(*w2, q, DType::UInt8, DType::UInt8);
    EXPECT_STREQ(prepared_family(*linear), qgemm_isa_name(isa));
  }
}

#if defined(__aarch64__)
// Auto on arm64 follows the active target and the host: I8MM where both have it, else the dot
// products where both have them, else the portable kernel; the host's own description picks the
// best the CPU has (qemu -cpu cortex-a76: the dot products).
TEST(QConv2d, AutoPicksTheArm64Family) {
  IsaGuard guard;
  set_qgemm_isa(QGemmIsa::Auto);
  const rt::TargetDescription saved = rt::active_target();
  const rt::CpuFeatures& host = rt::host_target().features;
  for (const char* name : {"host", "generic-arm64", "cortex-a76", "neoverse-n1", "neoverse-v1"}) {
    rt::set_active_target(rt::parse_target(name));
    const rt::CpuFeatures& f = rt::active_target().features;
    const QGemmIsa want = f.i8mm && host.i8mm         ? QGemmIsa::NeonI8mm
                          : f.dotprod && host.dotprod ? QGemmIsa::NeonDot
                                                      : QGemmIsa::Portable;
    EXPECT_EQ(qgemm_isa_name(qgemm_isa()), std::string(qgemm_isa_name(want))) << name;
  }
  rt::set_active_target(saved);
}
#endif

TEST(QLinear, BadParametersAreRefusedNamingTheValue) {
  Case c = random_case(4, true, DType::UInt8, DType::Int8, DType::UInt8, true, false);
  auto x = rand_int({2, 8}, DType::UInt8), w = rand_int({4, 8}, DType::Int8);
  auto out = empty(Dims{2, 4}, DType::UInt8);
  auto q = c.operands();
  EXPECT_NE(error_of([&] {
              qlinear_out(*rand_tensor({2, 8}), *w, q, *out);
            }).find("qlinear: expected input of dtype uint8 or int8, got float32"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              qlinear_out(*x, *rand_int({4, 7}, DType::Int8), q, *out);
            }).find("expected weight with 8 in_features"),
            std::string::npos);
  auto wrong_scales = from_vec({0.1, 0.2}, {2}, DType::Float32);
  auto wrong_zps = from_vec({0, 0}, {2}, DType::Int8);
  QuantizedOperands bad = q;
  bad.w_scale = wrong_scales.get();
  bad.w_zero_point = wrong_zps.get();
  EXPECT_NE(error_of([&] { qlinear_out(*x, *w, bad, *out); }).find("expected 4 scales"),
            std::string::npos);
  auto zero = scalar(0.0, DType::Float32);
  bad = q;
  bad.y_scale = zero.get();
  EXPECT_NE(error_of([&] {
              qlinear_out(*x, *w, bad, *out);
            }).find("expected a positive finite output scale, got 0"),
            std::string::npos);
  auto far = scalar(300.0, DType::Int32);
  bad = q;
  bad.x_zero_point = far.get();
  EXPECT_NE(error_of([&] {
              qlinear_out(*x, *w, bad, *out);
            }).find("expected input zero point in [0, 255], got 300"),
            std::string::npos);
  auto short_bias = from_vec({1, 2}, {2}, DType::Int32);
  bad = q;
  bad.bias = short_bias.get();
  EXPECT_NE(error_of([&] { qlinear_out(*x, *w, bad, *out); }).find("expected bias of shape [4]"),
            std::string::npos);
  // K whose worst-case products overflow int32: 255 * 128 * 70000 > 2^31.
  Case wide;
  wide.x_zp = 0, wide.w_scale = {0.1}, wide.w_zp = {0};
  auto xw = rand_int({1, 70000}, DType::UInt8), ww = rand_int({1, 70000}, DType::Int8);
  auto ow = empty(Dims{1, 1}, DType::UInt8);
  EXPECT_NE(error_of([&] {
              qlinear_out(*xw, *ww, wide.operands(), *ow);
            }).find("products per output (int32 accumulation at these zero points), got 70000"),
            std::string::npos);
}

// Weights prepared once (each family, the active one switched afterwards: prepared weights keep
// theirs) give the reference's values; a prepared weight of another geometry is refused.
// Depthwise int8 weights run the direct kernel, whose prepared weights pack nothing.
TEST(QConv2d, PreparedDepthwiseEqualsReference) {
  Conv2dParams p;
  p.pad_h = p.pad_w = 1;
  p.stride_h = p.stride_w = 2;
  p.groups = 6;
  Case c = random_case(6, true, DType::UInt8, DType::Int8, DType::Int8, true, false);
  std::fill(c.w_zp.begin(), c.w_zp.end(), 0);
  auto x = rand_int({2, 6, 9, 8}, DType::UInt8), w = rand_int({6, 1, 3, 3}, DType::Int8);
  auto q = c.operands();
  auto ref = empty(Dims{2, 6, 5, 4}, DType::Int8), out = empty(Dims{2, 6, 5, 4}, DType::Int8);
  qconv2d_reference_out(*x, *w, q, p, *ref);
  const PreparedQWeightPtr pw = prepare_qconv2d_weight(*w, q, p, DType::UInt8, DType::Int8);
  EXPECT_EQ(prepared_nbytes(*pw), 0u);
  qconv2d_out(*x, *w, q, p, *out, pw.get());
  EXPECT_EQ(to_vec(*out), to_vec(*ref));
}

// The direct depthwise kernel's paths (3x3 stride 1 in one pass, other stride-1 windows tap by
// tap, 3x3 stride 2, the general loop) each on rows shorter and longer than one vector (short
// planes are converted and requantized whole), both activation dtypes, per-channel weights with
// zero points, relu and int8 outputs.
TEST(QConv2d, DepthwiseEveryPathAndRowLength) {
  struct Geometry {
    int64_t H, W, K, stride, pad, dilation;
    int64_t N = 2, C = 0;  // C 0: 27 and 5 channels in turn
  };
  const Geometry shapes[] = {{7, 7, 3, 1, 1, 1},
                             {9, 20, 3, 1, 1, 1},
                             {6, 6, 5, 1, 2, 1},
                             {11, 18, 5, 1, 2, 1},
                             {9, 9, 3, 2, 1, 1},
                             {12, 33, 3, 2, 1, 1},
                             {10, 10, 3, 2, 2, 2},
                             {13, 21, 3, 1, 2, 2},
                             {5, 17, 1, 1, 0, 1},
                             // Past the channel-interleaved path's widths: per-plane loops.
                             {6, 40, 5, 1, 2, 1},
                             {4, 140, 3, 1, 1, 1},
                             {5, 75, 3, 2, 1, 1},
                             // A 6-byte input: rows read byte by byte (no 8 bytes to load).
                             {1, 3, 3, 1, 1, 1, 1, 2}};
  int variant = 0;
  for (const Geometry& s : shapes)
    for (DType xd : {DType::UInt8, DType::Int8}) {
      // One partial block of 8 channels, then two whole ones and a partial one.
      const int64_t C = s.C > 0 ? s.C : variant % 2 ? 5 : 27;
      Conv2dParams p;
      p.stride_h = p.stride_w = s.stride;
      p.pad_h = p.pad_w = s.pad;
      p.dilation_h = p.dilation_w = s.dilation;
      p.groups = C;
      const int64_t Ho = (s.H + 2 * s.pad - s.dilation * (s.K - 1) - 1) / s.stride + 1;
      const int64_t Wo = (s.W + 2 * s.pad - s.dilation * (s.K - 1) - 1) / s.stride + 1;
      const DType yd = variant % 2 ? DType::Int8 : DType::UInt8;
      Case c = random_case(C, true, xd, DType::Int8, yd, variant % 3 != 0, variant % 4 == 1);
      ++variant;
      auto x = rand_int({s.N, C, s.H, s.W}, xd), w = rand_int({C, 1, s.K, s.K}, DType::Int8);
      auto q = c.operands();
      auto ref = empty(Dims{s.N, C, Ho, Wo}, yd), out = empty(Dims{s.N, C, Ho, Wo}, yd);
      qconv2d_reference_out(*x, *w, q, p, *ref);
      qconv2d_out(*x, *w, q, p, *out);
      EXPECT_EQ(to_vec(*out), to_vec(*ref)) << s.H << "x" << s.W << " k" << s.K << " s" << s.stride
                                            << " d" << s.dilation << " x " << dt(xd);
    }
}

TEST(QConv2d, PreparedWeightsEqualReference) {
  IsaGuard guard;
  Conv2dParams p;
  p.pad_h = p.pad_w = 1;
  p.groups = 2;
  for (QGemmIsa isa : isas()) {
    for (bool symmetric : {true, false}) {
      Case c = random_case(8, true, DType::UInt8, DType::Int8, DType::UInt8, true, true);
      if (symmetric) std::fill(c.w_zp.begin(), c.w_zp.end(), 0);
      auto x = rand_int({2, 6, 5, 7}, DType::UInt8), w = rand_int({8, 3, 3, 3}, DType::Int8);
      auto q = c.operands();
      auto ref = empty(Dims{2, 8, 5, 7}, DType::UInt8);
      qconv2d_reference_out(*x, *w, q, p, *ref);
      set_qgemm_isa(isa);
      const PreparedQWeightPtr pw = prepare_qconv2d_weight(*w, q, p, DType::UInt8, DType::UInt8);
      set_qgemm_isa(QGemmIsa::Portable);
      auto out = empty(Dims{2, 8, 5, 7}, DType::UInt8);
      qconv2d_out(*x, *w, q, p, *out, pw.get());
      EXPECT_EQ(to_vec(*out), to_vec(*ref)) << prepared_family(*pw);
      Conv2dParams other = p;
      other.groups = 1;
      auto w1 = rand_int({8, 6, 3, 3}, DType::Int8);
      EXPECT_NE(error_of([&] {
                  qconv2d_out(*x, *w1, q, other, *out, pw.get());
                }).find("qconv2d: expected weights prepared for 8 channels of 54 values"),
                std::string::npos);
    }
  }
}

// The direct convolution (AMX's and AVX-512 VNNI's implicit GEMM: no im2col, the image read
// channels-last in place, its rows split into phases at stride > 1), per call and prepared, equals
// the reference over both activation dtypes and zero points at the ends of their range, padding
// (the zero point), dilated rows, filter rows padded to whole K blocks (3 x 60 channels, 48
// channels, the stem's 7 x 3), strides 2 and 3, output channels and flattened rows at tile edges,
// one-pixel images, batches, and images wide enough for the transposes' 16x16 blocks and their
// edges. Every family runs them; where AMX is, forcing it prepares them direct (and the
// dilated-column, expanding and strided 1x1 shapes not); AVX-512 VNNI's tile takes those with whole
// tiles of output channels.
TEST(QConv2d, DirectConvolutionEqualsReference) {
  IsaGuard guard;
  struct Geometry {
    int64_t N, C, H, W, O, KH, KW, stride, pad, dh, dw;
    bool direct;  // taken direct where the family has the direct tile
  };
  const Geometry shapes[] = {
      {2, 64, 7, 7, 33, 3, 3, 1, 1, 1, 1, true},
      {1, 128, 5, 9, 64, 3, 3, 1, 1, 1, 1, true},
      {1, 60, 6, 6, 17, 3, 3, 1, 0, 1, 1, true},   // filter rows of 180 bytes: 3 blocks
      {1, 64, 9, 8, 40, 3, 3, 1, 2, 2, 1, true},   // dilated rows
      {1, 64, 9, 8, 40, 3, 3, 1, 2, 2, 2, false},  // dilated columns: im2col
      {3, 64, 4, 5, 32, 1, 1, 1, 0, 1, 1, true},
      {1, 48, 12, 20, 16, 1, 1, 1, 0, 1, 1, true},   // 48 channels in a 64-byte block
      {1, 16, 12, 20, 96, 1, 1, 1, 0, 1, 1, false},  // an expansion: im2col
      {1, 24, 10, 10, 8, 3, 3, 1, 1, 1, 1, true},
      {1, 192, 1, 1, 31, 3, 3, 1, 1, 1, 1, true},
      {1, 64, 13, 11, 32, 1, 3, 1, 0, 1, 1, true},
      {1, 64, 2, 3, 8, 2, 2, 1, 1, 1, 1, true},
      {2, 112, 18, 35, 48, 3, 3, 1, 1, 1, 1, true},  // whole 16x16 byte blocks too
      // Strided: the row phases (even and odd sizes, 2x2 patches, dilation, stride 3, a stem).
      {2, 64, 14, 14, 40, 3, 3, 2, 1, 1, 1, true},
      {1, 64, 15, 13, 32, 3, 3, 2, 1, 1, 1, true},
      {1, 128, 14, 14, 64, 2, 2, 2, 0, 1, 1, true},
      {1, 64, 11, 12, 16, 3, 3, 2, 2, 2, 1, true},
      {1, 64, 10, 11, 24, 3, 3, 3, 1, 1, 1, true},
      {1, 64, 34, 33, 16, 3, 3, 2, 1, 1, 1, true},
      {1, 3, 30, 31, 16, 7, 7, 2, 3, 1, 1, true},
      {1, 64, 12, 12, 16, 1, 1, 2, 0, 1, 1, false},  // a strided 1x1: im2col
      // Whole 32-column tiles (what VNNI's direct tile takes): padded rows, dilation, 16x16
      // blocks, strides 2 and 3.
      {1, 60, 6, 6, 32, 3, 3, 1, 0, 1, 1, true},
      {1, 64, 9, 8, 64, 3, 3, 1, 2, 2, 1, true},
      {2, 112, 18, 35, 64, 3, 3, 1, 1, 1, 1, true},
      {1, 64, 11, 12, 32, 3, 3, 2, 2, 2, 1, true},
      {1, 64, 10, 11, 32, 3, 3, 3, 1, 1, 1, true},
      // A batch in one loop of tiles: three strided images.
      {3, 64, 9, 10, 32, 3, 3, 2, 1, 1, 1, true}};
  int variant = 0, vnni_direct = 0;
  for (const Geometry& s : shapes) {
    Conv2dParams p;
    p.stride_h = p.stride_w = s.stride;
    p.pad_h = p.pad_w = s.pad;
    p.dilation_h = s.dh;
    p.dilation_w = s.dw;
    const int64_t Ho = (s.H + 2 * s.pad - s.dh * (s.KH - 1) - 1) / s.stride + 1;
    const int64_t Wo = (s.W + 2 * s.pad - s.dw * (s.KW - 1) - 1) / s.stride + 1;
    for (DType xd : {DType::UInt8, DType::Int8}) {
      const DType yd = variant % 2 ? DType::Int8 : DType::UInt8;
      Case c = quad_case(s.O, xd, yd, variant++);
      auto x = rand_int({s.N, s.C, s.H, s.W}, xd),
           w = rand_int({s.O, s.C, s.KH, s.KW}, DType::Int8);
      auto q = c.operands();
      auto ref = empty(Dims{s.N, s.O, Ho, Wo}, yd);
      qconv2d_reference_out(*x, *w, q, p, *ref);
      const std::string what =
          "C=" + std::to_string(s.C) + " O=" + std::to_string(s.O) + " " + std::to_string(s.H) +
          "x" + std::to_string(s.W) + " k" + std::to_string(s.KH) + "x" + std::to_string(s.KW) +
          " s" + std::to_string(s.stride) + " x " + dt(xd) + " x_zp " + std::to_string(c.x_zp);
      expect_every_isa(
          to_vec(*ref), {s.N, s.O, Ho, Wo}, yd,
          [&](TensorImpl& out) { qconv2d_out(*x, *w, q, p, out); }, what);
      for (QGemmIsa isa : isas()) {
        set_qgemm_isa(isa);
        const PreparedQWeightPtr pw = prepare_qconv2d_weight(*w, q, p, xd, yd);
        if (isa == QGemmIsa::Amx) {
          EXPECT_STREQ(prepared_family(*pw), s.direct ? "amx-int8-direct" : "amx-int8") << what;
        }
        if (isa == QGemmIsa::Avx512Vnni)
          vnni_direct += std::string(prepared_family(*pw)) == "avx512-vnni-direct";
        auto out = empty(Dims{s.N, s.O, Ho, Wo}, yd);
        qconv2d_out(*x, *w, q, p, *out, pw.get());
        EXPECT_EQ(to_vec(*out), to_vec(*ref)) << what << " prepared " << prepared_family(*pw);
      }
      set_qgemm_isa(QGemmIsa::Auto);
    }
  }
  // Which shapes VNNI takes direct is its cost rule's business; that the tile ran is this test's.
  if (qgemm_isa_available(QGemmIsa::Avx512Vnni)) {
    EXPECT_GT(vnni_direct, 0);
  }
  // Direct weights are refused for a call they were not prepared for.
  if (qgemm_isa_available(QGemmIsa::Amx)) {
    set_qgemm_isa(QGemmIsa::Amx);
    Conv2dParams p;
    p.pad_h = p.pad_w = 1;
    Case c = quad_case(16, DType::UInt8, DType::UInt8, 0);
    auto q = c.operands();
    auto w = rand_int({16, 64, 3, 3}, DType::Int8), w5 = rand_int({16, 64, 5, 5}, DType::Int8);
    const PreparedQWeightPtr pw = prepare_qconv2d_weight(*w, q, p, DType::UInt8, DType::UInt8);
    auto x = rand_int({1, 64, 6, 6}, DType::UInt8);
    auto out = empty(Dims{1, 16, 4, 4}, DType::UInt8);
    EXPECT_NE(error_of([&] {
                qconv2d_out(*x, *w5, q, p, *out, pw.get());
              }).find("qconv2d: expected direct weights prepared for 16 channels of 64x25"),
              std::string::npos);
  }
}

TEST(QLinear, PreparedWeightsEqualReference) {
  IsaGuard guard;
  for (QGemmIsa isa : isas()) {
    Case c = random_case(21, true, DType::Int8, DType::Int8, DType::Int8, true, false);
    auto x = rand_int({5, 33}, DType::Int8), w = rand_int({21, 33}, DType::Int8);
    auto q = c.operands();
    auto ref = empty(Dims{5, 21}, DType::Int8);
    qlinear_reference_out(*x, *w, q, *ref);
    set_qgemm_isa(isa);
    const PreparedQWeightPtr pw = prepare_qlinear_weight(*w, q, DType::Int8, DType::Int8);
    auto out = empty(Dims{5, 21}, DType::Int8);
    qlinear_out(*x, *w, q, *out, pw.get());
    EXPECT_EQ(to_vec(*out), to_vec(*ref)) << prepared_family(*pw);
  }
}

// Sums whose raw uint8 x int8 products overflow int32 while the zero-point-corrected result fits:
// x = 255 with zero point 128, w = 127, K = 100000: sum x * w = 3.2e9 wraps, the true
// sum (x - 128) * w = 1.6e9 does not; every family (VNNI sums raw bytes and corrects by the
// bias, exact modulo 2^32) must give the reference's value.
TEST(QLinear, WrappedRawSumsStillExact) {
  const int64_t K = 100000;
  Case c;
  c.x_zp = 128, c.x_scale = 1.0, c.y_scale = 1e7, c.y_zp = 0;
  c.w_scale = {1.0, 1.0}, c.w_zp = {0, 0};
  c.y_dtype = DType::UInt8;
  auto x = from_vec(std::vector<double>(K, 255.0), {1, K}, DType::UInt8);
  std::vector<double> wv(2 * K, 127.0);
  for (int64_t k = K; k < 2 * K; ++k) wv[k] = k % 2 ? 127.0 : -128.0;
  auto w = from_vec(wv, {2, K}, DType::Int8);
  auto q = c.operands();
  auto ref = empty(Dims{1, 2}, DType::UInt8);
  qlinear_reference_out(*x, *w, q, *ref);
  // 127 * 127 * 1e5 / 1e7 = 161.29 -> 161; the second row sums to -127 * 5e4 / 1e7 -> 0.
  EXPECT_EQ(to_vec(*ref), (std::vector<double>{161.0, 0.0}));
  expect_every_isa(
      to_vec(*ref), {1, 2}, DType::UInt8, [&](TensorImpl& out) { qlinear_out(*x, *w, q, out); },
      "K=100000");
}

// The largest K the int32 bound admits at |x - x_zp| <= 128 and int8 weights: 131071 products of
// (-128 - (-1)) * -128 sum to 2130690176, just below 2^31; the same through uint8 activations
// (0 - 127). The byte-quad families see raw sums and zero-point corrections near the bound too.
TEST(QLinear, LargestKAtTheBoundExact) {
  const int64_t K = std::numeric_limits<int32_t>::max() / (128 * 128);
  for (DType xd : {DType::Int8, DType::UInt8}) {
    Case c;
    c.x_dtype = xd;
    c.x_zp = xd == DType::Int8 ? -1 : 127, c.x_scale = 1.0, c.y_scale = 1e8, c.y_zp = 0;
    c.w_scale = {1.0, 1.0}, c.w_zp = {0, 0};
    c.y_dtype = DType::UInt8;
    auto x = from_vec(std::vector<double>(K, double(lo_of(xd))), {1, K}, xd);
    std::vector<double> wv(2 * K, -128.0);
    for (int64_t k = K; k < 2 * K; ++k) wv[k] = k % 2 ? 127.0 : -128.0;
    auto w = from_vec(wv, {2, K}, DType::Int8);
    auto q = c.operands();
    auto ref = empty(Dims{1, 2}, DType::UInt8);
    qlinear_reference_out(*x, *w, q, *ref);
    // 127 * 128 * 131071 / 1e8 = 21.3 -> 21; the second row to 0.08 -> 0.
    EXPECT_EQ(to_vec(*ref), (std::vector<double>{21.0, 0.0}));
    expect_every_isa(
        to_vec(*ref), {1, 2}, DType::UInt8, [&](TensorImpl& out) { qlinear_out(*x, *w, q, out); },
        "K=" + std::to_string(K) + " x " + dt(xd));
  }
}
