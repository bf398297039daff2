// kiln.qadd's kernel: against the formula evaluated here step by step in float32 (dequantize each
// input, add, relu, divide by the output scale, round half to even, clamp), hand-computed values,
// against the dequantize -> add -> quantize kernels it replaces (the same bytes), every 8-bit dtype
// combination, strided inputs, several threads, and the errors bad operands give.
#include <gtest/gtest.h>

#include "kiln/runtime/kernels/quantize.h"
#include "kiln/runtime/thread_pool.h"
#include "nn_test_util.h"
#include "quant_test_util.h"

using namespace kiln;
using namespace kiln::kernels;
using namespace nn_test;
using namespace quant_test;

namespace {

// One output value, each float32 operation written out.
int64_t reference(double a, double b, const Side& as, const Side& bs, const Side& ys, bool relu,
                  DType out) {
  const float fa = float(a - double(as.zero_point)) * as.scale;
  const float fb = float(b - double(bs.zero_point)) * bs.scale;
  float v = fa + fb;
  if (relu && v < 0.0f) v = 0.0f;
  const double q = round_half_even(double(v / ys.scale)) + double(ys.zero_point);
  return int64_t(std::clamp(q, double(lo_of(out)), double(hi_of(out))));
}

QAddOperands operands(const Side& a, const Side& b, const Side& y, bool relu) {
  return {a.s.get(), a.z.get(), b.s.get(), b.z.get(), y.s.get(), y.z.get(), relu};
}

}  // namespace

TEST(QAdd, HandComputedValues) {
  // a: (q - 4) * 0.5 -> 3, -2;  b: (q + 2) * 0.25 -> 1, -0.5;  sums 4, -2.5 at scale 0.5, zero
  // point 10: 8 + 10 = 18, -5 + 10 = 5 (relu: 10); a tie: 1.25 / 0.5 = 2.5 rounds to 2.
  auto a = from_vec({10, 0, 7}, Dims{3}, DType::UInt8);
  auto b = from_vec({2, -4, -1}, Dims{3}, DType::Int8);
  const Side as = side(0.5f, 4), bs = side(0.25f, -2), ys = side(0.5f, 10);
  for (bool relu : {false, true}) {
    auto y = empty(Dims{3}, DType::UInt8);
    qadd_out(*a, *b, operands(as, bs, ys, relu), *y);
    // third: (7 - 4) * 0.5 + (-1 + 2) * 0.25 = 1.75 -> 3.5 -> 4 (even) + 10 = 14
    EXPECT_EQ(to_vec(*y), (std::vector<double>{18, relu ? 10.0 : 5.0, 14}));
  }
}

TEST(QAdd, MatchesTheFormulaForEveryDtypeStridedAndThreaded) {
  const int saved = num_threads();
  const Dims shape{2, 3, 70, 130};  // past one parallel block, odd inner size
  const int64_t n = numel(shape);
  for (int nt : {1, 2}) {
    set_num_threads(nt);
    for (DType da : {DType::UInt8, DType::Int8})
      for (DType db : {DType::UInt8, DType::Int8})
        for (DType dy : {DType::UInt8, DType::Int8})
          for (bool relu : {false, true}) {
            SCOPED_TRACE(testing::Message()
                         << dtype_name(da) << " + " << dtype_name(db) << " -> " << dtype_name(dy)
                         << " relu " << relu << " threads " << nt);
            const Side as = side(0.0473f, da == DType::UInt8 ? 121 : -7);
            const Side bs = side(0.0291f, db == DType::UInt8 ? 3 : 11);
            const Side ys = side(0.0617f, dy == DType::UInt8 ? 130 : -2);
            const std::vector<double> av = rand_bytes(n, da), bv = rand_bytes(n, db);
            auto a = from_vec(av, shape, da), b = from_vec(bv, shape, db);
            for (bool strided : {false, true}) {
              auto y = empty(shape, dy);
              qadd_out(strided ? *noncontig(*a, true) : *a, strided ? *noncontig(*b) : *b,
                       operands(as, bs, ys, relu), *y);
              const std::vector<double> got = to_vec(*y);
              int64_t bad = 0;
              for (int64_t i = 0; i < n; ++i)
                if (got[size_t(i)] !=
                        double(reference(av[size_t(i)], bv[size_t(i)], as, bs, ys, relu, dy)) &&
                    ++bad < 5)
                  ADD_FAILURE() << "element " << i << " got " << got[size_t(i)];
              EXPECT_EQ(bad, 0);
            }
          }
  }
  set_num_threads(saved);
}

// The claim the Q/DQ folding rests on: the same bytes as dequantize -> add -> quantize.
TEST(QAdd, SameBytesAsDequantizeAddQuantize) {
  const Dims shape{4, 8, 9, 9};
  const int64_t n = numel(shape);
  const Side as = side(0.0123f, 128), bs = side(0.0371f, 0), ys = side(0.0459f, 77);
  auto a = from_vec(rand_bytes(n, DType::UInt8), shape, DType::UInt8);
  auto b = from_vec(rand_bytes(n, DType::Int8), shape, DType::Int8);
  auto fa = empty(shape, DType::Float32), fb = empty(shape, DType::Float32);
  dequantize_out(*a, *as.s, *as.z, {}, *fa);
  dequantize_out(*b, *bs.s, *bs.z, {}, *fb);
  auto sum = empty(shape, DType::Float32);
  const float *pa = fa->data_ptr<float>(), *pb = fb->data_ptr<float>();
  float* ps = sum->data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) ps[i] = pa[i] + pb[i];
  auto want = empty(shape, DType::UInt8), got = empty(shape, DType::UInt8);
  quantize_out(*sum, *ys.s, *ys.z, {}, *want);
  qadd_out(*a, *b, operands(as, bs, ys, false), *got);
  EXPECT_EQ(to_vec(*got), to_vec(*want));
}

TEST(QAdd, BadOperandsAreNamed) {
  auto a = from_vec({1, 2, 3, 4}, Dims{2, 2}, DType::UInt8);
  auto y = empty(Dims{2, 2}, DType::UInt8);
  const Side s = side(0.1f, 0);
  auto expect = [](const std::function<void()>& fn, const std::string& what) {
    const std::string msg = error_of(fn);
    EXPECT_NE(msg.find(what), std::string::npos) << "got: " << msg;
  };
  auto other = from_vec({1, 2}, Dims{2}, DType::UInt8);
  expect([&] { qadd_out(*a, *other, operands(s, s, s, false), *y); },
         "qadd: expected other of input's shape [2, 2], got [2]");
  auto f = rand_tensor(Dims{2, 2});
  expect([&] { qadd_out(*f, *a, operands(s, s, s, false), *y); },
         "qadd: expected input of dtype uint8 or int8, got float32");
  auto y32 = empty(Dims{2, 2}, DType::Int32);
  expect([&] { qadd_out(*a, *a, operands(s, s, s, false), *y32); },
         "qadd: expected out of dtype uint8 or int8, got int32");
  const Side per_channel{0.1f, 0, from_vec({0.1, 0.2}, Dims{2}, DType::Float32),
                         from_vec({0, 0}, Dims{2}, DType::Int32)};
  expect([&] { qadd_out(*a, *a, operands(s, per_channel, s, false), *y); },
         "qadd: expected other scale as a 0-dim float32 tensor");
  const Side zero_scale = side(0.0f, 0);
  expect([&] { qadd_out(*a, *a, operands(s, s, zero_scale, false), *y); },
         "qadd: expected a positive finite output scale, got 0");
  const Side bad_zp = side(0.1f, 300);
  expect([&] { qadd_out(*a, *a, operands(bad_zp, s, s, false), *y); },
         "qadd: expected input zero point in [0, 255], got 300");
}
