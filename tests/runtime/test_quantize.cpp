// quantize / dequantize / fake_quantize and its gradient against the formulas evaluated here in
// double (q = clamp(round_half_even(x / s) + zp)), hand-computed ties and saturations, per tensor
// and per channel along every axis, strided inputs, and the errors bad parameters give.
#include <gtest/gtest.h>

#include <cfenv>
#include <limits>

#include "kiln/runtime/kernels/quantize.h"
#include "kiln/runtime/thread_pool.h"
#include "nn_test_util.h"

using namespace kiln;
using namespace kiln::kernels;
using namespace nn_test;

namespace {

struct Ref {
  std::vector<double> scale;
  std::vector<int64_t> zp;
  int64_t inner = 1, channels = 1;
  int64_t channel(int64_t i) const { return (i / inner) % channels; }
};

Ref make_ref(const Dims& shape, int64_t axis, std::vector<double> scale, std::vector<int64_t> zp) {
  Ref r{std::move(scale), std::move(zp)};
  if (r.scale.size() > 1) {
    const int64_t a = axis < 0 ? axis + int64_t(shape.size()) : axis;
    r.channels = shape[a];
    for (size_t d = a + 1; d < shape.size(); ++d) r.inner *= shape[d];
  }
  return r;
}

int64_t ref_quantize(double x, double s, int64_t zp, int64_t lo, int64_t hi) {
  const double d = double(float(x) / float(s));  // the float32 division the op defines
  if (std::isnan(d)) return zp;
  const double q = round_half_even(d) + double(zp);
  return q < lo ? lo : q > hi ? hi : int64_t(q);
}

TensorImplPtr scale_tensor(const std::vector<double>& s, bool per_channel) {
  return from_vec(s, per_channel ? Dims{int64_t(s.size())} : Dims{}, DType::Float32);
}
TensorImplPtr zp_tensor(const std::vector<int64_t>& z, bool per_channel, DType dt) {
  std::vector<double> d(z.begin(), z.end());
  return from_vec(d, per_channel ? Dims{int64_t(z.size())} : Dims{}, dt);
}

}  // namespace

// Ties go to the even integer, values past the range saturate, NaN gives the zero point, and
// dequantize inverts exactly on the grid.
TEST(Quantize, HandComputedValues) {
  const std::vector<double> x = {0.25,
                                 0.75,
                                 -0.25,
                                 -0.75,
                                 1.25,
                                 100.0,
                                 -100.0,
                                 0.1,
                                 std::numeric_limits<double>::quiet_NaN(),
                                 std::numeric_limits<double>::infinity(),
                                 -std::numeric_limits<double>::infinity()};
  auto in = from_vec(x, Dims{int64_t(x.size())}, DType::Float32);
  auto s = scale_tensor({0.5}, false);
  // scale 0.5, zero point 3: x / s = 0.5 -> 0 (+3), 1.5 -> 2, -0.5 -> 0, -1.5 -> -2, 2.5 -> 2,
  // 200 -> 127, -200 -> -128, 0.2 -> 0, NaN -> 3, +inf -> 127, -inf -> -128.
  auto z = zp_tensor({3}, false, DType::Int64);
  auto q = empty(in->sizes(), DType::Int8);
  quantize_out(*in, *s, *z, {}, *q);
  const std::vector<double> want = {3, 5, 3, 1, 5, 127, -128, 3, 3, 127, -128};
  EXPECT_EQ(to_vec(*q), want);
  // uint8 with zero point 128: the range is [0, 255].
  auto zu = zp_tensor({128}, false, DType::Int32);
  auto qu = empty(in->sizes(), DType::UInt8);
  quantize_out(*in, *s, *zu, {}, *qu);
  EXPECT_EQ(to_vec(*qu), (std::vector<double>{128, 130, 128, 126, 130, 255, 0, 128, 128, 255, 0}));
  // Dequantize: (q - 3) * 0.5.
  auto back = empty(in->sizes(), DType::Float32);
  dequantize_out(*q, *s, *z, {}, *back);
  EXPECT_EQ(to_vec(*back), (std::vector<double>{0, 1, 0, -1, 1, 62, -65.5, 0, 0, 62, -65.5}));
}

// Every element against the reference: per tensor and per channel along each axis (negative
// too), int8 / uint8 / int32 results, zero points of several integer dtypes, contiguous and
// strided inputs, one and two threads; dequantize and fake_quantize agree with the reference too.
TEST(Quantize, MatchesReferencePerTensorAndPerChannel) {
  const int saved = num_threads();
  const Dims shape{3, 4, 5, 6};
  std::uniform_real_distribution<double> su(0.01, 0.2);
  std::uniform_int_distribution<int> zu(-20, 20);
  for (int nt : {1, 2}) {
    set_num_threads(nt);
    for (int64_t axis : {-1, 0, 1, 2, 3, 99}) {  // 99: per tensor
      const bool per_channel = axis != 99;
      const int64_t a = axis < 0 ? axis + 4 : axis;
      const int64_t C = per_channel ? shape[a] : 1;
      for (DType qt : {DType::Int8, DType::UInt8, DType::Int32}) {
        SCOPED_TRACE(testing::Message()
                     << "axis " << axis << " " << dtype_name(qt) << " threads " << nt);
        const int64_t lo = qt == DType::Int8 ? -128 : qt == DType::UInt8 ? 0 : INT32_MIN;
        const int64_t hi = qt == DType::Int8 ? 127 : qt == DType::UInt8 ? 255 : INT32_MAX;
        std::vector<double> s(C);
        std::vector<int64_t> z(C);
        for (int64_t c = 0; c < C; ++c) {
          s[c] = su(rng());
          z[c] = (qt == DType::UInt8 ? 128 : 0) + zu(rng());
        }
        auto sc = scale_tensor(s, per_channel);
        auto zp = zp_tensor(z, per_channel, qt == DType::Int32 ? DType::Int64 : DType::Int32);
        const Ref ref = make_ref(shape, axis, s, z);
        // Values past the int8 range at both ends, and some exact ties on the grid.
        std::vector<double> xv = rand_vec(3 * 4 * 5 * 6, -30.0, 30.0);
        for (size_t i = 0; i < xv.size(); i += 7)
          xv[i] = (std::floor(xv[i]) + 0.5) * float(s[ref.channel(int64_t(i))]);
        auto x = from_vec(xv, shape, DType::Float32);
        for (bool strided : {false, true}) {
          auto input = strided ? noncontig(*x, true) : x;
          auto q = empty(shape, qt);
          quantize_out(*input, *sc, *zp, {axis}, *q);
          const std::vector<double> got = to_vec(*q);
          auto back = empty(shape, DType::Float32);
          dequantize_out(*q, *sc, *zp, {axis}, *back);
          const std::vector<double> deq = to_vec(*back);
          auto fq = empty(shape, DType::Float32);
          const FakeQuantParams fp{axis, lo, hi};
          fake_quantize_out(*input, *sc, *zp, fp, *fq);
          const std::vector<double> fqv = to_vec(*fq);
          int bad = 0;
          for (size_t i = 0; i < xv.size() && bad < 5; ++i) {
            const int64_t c = ref.channel(int64_t(i));
            const int64_t want = ref_quantize(xv[i], s[c], z[c], lo, hi);
            const double want_x = double(float(want - z[c]) * float(s[c]));
            if (got[i] != double(want) || deq[i] != want_x || fqv[i] != want_x) {
              ++bad;
              ADD_FAILURE() << "element " << i << " x " << xv[i] << " channel " << c << ": q "
                            << got[i] << " want " << want << ", dequantized " << deq[i] << ", fake "
                            << fqv[i] << " want " << want_x;
            }
          }
        }
      }
    }
  }
  set_num_threads(saved);
}

// The gradient passes where round(x / s) + zp is within [quant_min, quant_max] and is 0 where
// fake_quantize clamped (the range edges themselves pass).
TEST(Quantize, FakeQuantizeGradientIsStraightThroughInRange) {
  // scale 1, zero point 0, range [-2, 3]: x = -3.0 (clamped), -2.5 -> -2 (in), 2.6 -> 3 (in),
  // 3.5 -> 4 (out), 3.49 -> 3 (in), 0 (in), NaN (no gradient).
  const std::vector<double> x = {
      -3.0, -2.5, 2.6, 3.5, 3.49, 0.0, std::numeric_limits<double>::quiet_NaN()};
  auto in = from_vec(x, Dims{7}, DType::Float32);
  auto g = from_vec({1, 2, 3, 4, 5, 6, 7}, Dims{7}, DType::Float32);
  auto gi = empty(Dims{7}, DType::Float32);
  fake_quantize_backward_out(*g, *in, *scale_tensor({1.0}, false),
                             *zp_tensor({0}, false, DType::Int64), {1, -2, 3}, *gi);
  EXPECT_EQ(to_vec(*gi), (std::vector<double>{0, 2, 3, 0, 5, 6, 0}));
  auto fq = empty(Dims{7}, DType::Float32);
  fake_quantize_out(*in, *scale_tensor({1.0}, false), *zp_tensor({0}, false, DType::Int64),
                    {1, -2, 3}, *fq);
  const std::vector<double> got = to_vec(*fq);
  EXPECT_EQ(std::vector<double>(got.begin(), got.end() - 1),
            (std::vector<double>{-2, -2, 3, 3, 3, 0}));
  EXPECT_EQ(got.back(), 0.0);  // NaN quantizes to the zero point
}

TEST(Quantize, BadParametersAreNamed) {
  auto x = rand_tensor(Dims{2, 3});
  auto q = empty(Dims{2, 3}, DType::Int8);
  auto s = scale_tensor({0.1}, false);
  auto z = zp_tensor({0}, false, DType::Int64);
  auto expect = [](const std::function<void()>& fn, const std::string& what) {
    const std::string msg = error_of(fn);
    EXPECT_NE(msg.find(what), std::string::npos) << "got: " << msg;
  };
  expect([&] { quantize_out(*x, *scale_tensor({0.0}, false), *z, {}, *q); },
         "quantize: expected positive finite scales, got 0");
  expect([&] { quantize_out(*x, *scale_tensor({std::nan("")}, false), *z, {}, *q); },
         "expected positive finite scales");
  expect([&] { quantize_out(*x, *s, *zp_tensor({200}, false, DType::Int64), {}, *q); },
         "expected zero points in [-128, 127], got 200");
  expect(
      [&] {
        quantize_out(*x, *scale_tensor({0.1, 0.2}, true), *zp_tensor({0, 0}, true, DType::Int64),
                     {1}, *q);
      },
      "expected 3 scales (input's size along axis 1), got 2");
  expect(
      [&] {
        quantize_out(*x, *scale_tensor({0.1, 0.2}, true), *zp_tensor({0, 0}, true, DType::Int64),
                     {2}, *q);
      },
      "expected axis in [-2, 2) for an input of 2 dims, got 2");
  expect(
      [&] {
        quantize_out(*x, *scale_tensor({0.1, 0.2}, true), *z, {0}, *q);
      },
      "expected zero_point of scale's shape [2], got []");
  expect([&] { quantize_out(*x, *s, *from_vec({0}, Dims{}, DType::Float32), {}, *q); },
         "expected zero_point of an integer dtype, got float32");
  expect([&] { quantize_out(*x, *from_vec({0.1}, Dims{}, DType::Float64), *z, {}, *q); },
         "expected scale of dtype float32, got float64");
  auto f = empty(Dims{2, 3}, DType::Float32);
  expect([&] { quantize_out(*x, *s, *z, {}, *f); },
         "quantize: expected out of dtype int8, uint8 or int32, got float32");
  expect([&] { dequantize_out(*x, *s, *z, {}, *f); },
         "dequantize: expected input of dtype int8, uint8 or int32, got float32");
  expect(
      [&] {
        quantize_out(*rand_tensor(Dims{2, 3}, DType::Float64), *s, *z, {}, *q);
      },
      "quantize: expected input of dtype float32, got float64");
  auto q_wrong = empty(Dims{3, 2}, DType::Int8);
  expect([&] { quantize_out(*x, *s, *z, {}, *q_wrong); }, "quantize");
  expect(
      [&] {
        fake_quantize_out(*x, *s, *z, {1, 5, 5}, *f);
      },
      "fake_quantize: expected quant_min < quant_max within int32, got [5, 5]");
  expect(
      [&] {
        fake_quantize_out(*x, *s, *zp_tensor({9}, false, DType::Int64), {1, 0, 7}, *f);
      },
      "expected zero points in [0, 7], got 9");
}
