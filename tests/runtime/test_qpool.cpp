// kiln.qavg_pool2d's kernel: hand-computed values; against the documented formula with the
// window rules written out here (PyTorch's avg_pool2d: padding, ceil_mode, count_include_pad)
// for every 8-bit dtype pair, strided inputs and several threads; within one step of the exact
// real-valued average; against dequantize -> avg_pool2d -> quantize; and bad operands named.
#include <gtest/gtest.h>

#include "kiln/runtime/kernels/pool.h"
#include "kiln/runtime/kernels/quantize.h"
#include "kiln/runtime/thread_pool.h"
#include "nn_test_util.h"
#include "quant_test_util.h"

using namespace kiln;
using namespace kiln::kernels;
using namespace nn_test;
using namespace quant_test;

namespace {

QPoolOperands operands(const Side& x, const Side& y) {
  return {x.s.get(), x.z.get(), y.s.get(), y.z.get()};
}

Pool2dParams pool(int64_t k, int64_t s, int64_t pad, bool ceil_mode, bool include_pad) {
  Pool2dParams p;
  p.kernel_h = p.kernel_w = k;
  p.stride_h = p.stride_w = s;
  p.pad_h = p.pad_w = pad;
  p.ceil_mode = ceil_mode;
  p.count_include_pad = include_pad;
  return p;
}

// One output extent, PyTorch's rule: the last window must start inside the input or the left
// padding.
int64_t extent(int64_t in, int64_t k, int64_t s, int64_t pad, bool ceil_mode) {
  const int64_t span = in + 2 * pad - k;
  int64_t out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (out - 1) * s >= in + pad) --out;
  return out;
}

struct Window {
  int64_t sum = 0;      // of q - x_zp over the input values inside
  int64_t divisor = 0;  // as avg_pool2d counts it
};
Window window(const std::vector<double>& x, int64_t plane, int64_t H, int64_t W, int64_t oh,
              int64_t ow, const Pool2dParams& p, int64_t x_zp) {
  const int64_t h0 = oh * p.stride_h - p.pad_h, w0 = ow * p.stride_w - p.pad_w;
  const int64_t h1 = std::min(h0 + p.kernel_h, H + p.pad_h);
  const int64_t w1 = std::min(w0 + p.kernel_w, W + p.pad_w);
  Window r;
  int64_t inside = 0;
  for (int64_t h = h0; h < h1; ++h)
    for (int64_t w = w0; w < w1; ++w)
      if (h >= 0 && h < H && w >= 0 && w < W) {
        r.sum += int64_t(x[size_t((plane * H + h) * W + w)]) - x_zp;
        ++inside;
      }
  r.divisor = p.count_include_pad ? (h1 - h0) * (w1 - w0) : inside;
  return r;
}

// The documented formula: round_half_even(float32(sum) * float32(xs / (ys * divisor))) clamped,
// plus the output zero point.
int64_t formula(const Window& w, const Side& xs, const Side& ys, DType out) {
  const float mult = float(double(xs.scale) / (double(ys.scale) * double(w.divisor)));
  const float lo = float(lo_of(out) - ys.zero_point), hi = float(hi_of(out) - ys.zero_point);
  const float v = std::clamp(float(w.sum) * mult, lo, hi);
  return int64_t(round_half_even(double(v))) + ys.zero_point;
}

}  // namespace

TEST(QAvgPool, HandComputedValues) {
  // x = (q - 10) * 0.5 over a 2x3 plane: q 10 12 14 / 16 18 20 -> 0 1 2 / 3 4 5. A 2x2 window,
  // stride 1: means 2 and 3; at output scale 0.25, zero point 3: 8 + 3 = 11, 12 + 3 = 15.
  // Output scale 0.4: 2 / 0.4 = 5 -> 8, 3 / 0.4 = 7.5 -> 8 (half to even) + 3 = 11.
  auto x = from_vec({10, 12, 14, 16, 18, 20}, Dims{1, 1, 2, 3}, DType::UInt8);
  const Side xs = side(0.5f, 10);
  auto y = empty(Dims{1, 1, 1, 2}, DType::UInt8);
  qavg_pool2d_out(*x, operands(xs, side(0.25f, 3)), pool(2, 1, 0, false, true), *y);
  EXPECT_EQ(to_vec(*y), (std::vector<double>{11, 15}));
  qavg_pool2d_out(*x, operands(xs, side(0.4f, 3)), pool(2, 1, 0, false, true), *y);
  EXPECT_EQ(to_vec(*y), (std::vector<double>{8, 11}));
  // Padding 1, kernel 2, stride 2: windows [pad, pad; pad, 0] -> 0 / 4, [pad pad; 1 2] -> 3 / 4,
  // [pad; 3] ... count_include_pad divides by 4; without it by the values inside.
  auto y4 = empty(Dims{1, 1, 2, 2}, DType::Int8);
  qavg_pool2d_out(*x, operands(xs, side(0.25f, 0)), pool(2, 2, 1, false, true), *y4);
  // sums 0, 1 + 2 = 3, 3, 4 + 5 = 9 over 4: 0, 0.75, 0.75, 2.25 -> 0, 3, 3, 9
  EXPECT_EQ(to_vec(*y4), (std::vector<double>{0, 3, 3, 9}));
  qavg_pool2d_out(*x, operands(xs, side(0.25f, 0)), pool(2, 2, 1, false, false), *y4);
  // divisors 1, 2, 1, 2: 0, 1.5, 3, 4.5 -> 0, 6, 12, 18
  EXPECT_EQ(to_vec(*y4), (std::vector<double>{0, 6, 12, 18}));
}

TEST(QAvgPool, MatchesTheFormulaForEveryDtypeWindowAndThreadCount) {
  const int saved = num_threads();
  struct Case {
    Dims shape;
    Pool2dParams p;
  };
  const std::vector<Case> cases = {
      {{2, 3, 7, 7}, pool(7, 7, 0, false, true)},   // global (the contiguous path)
      {{2, 70, 5, 9}, pool(3, 2, 1, false, true)},  // padding counted
      {{1, 4, 11, 8}, pool(3, 2, 1, true, false)},  // ceil_mode, padding not counted
      {{3, 6, 10}, pool(2, 2, 0, false, true)},     // (C, H, W)
      {{1, 2, 9, 12}, pool(4, 3, 2, true, true)},   // a window past the padded edge
  };
  for (int nt : {1, 2}) {
    set_num_threads(nt);
    for (const Case& c : cases)
      for (DType dx : {DType::UInt8, DType::Int8})
        for (DType dy : {DType::UInt8, DType::Int8}) {
          SCOPED_TRACE(testing::Message()
                       << c.shape.size() << "-d " << c.shape[1] << " k" << c.p.kernel_h << " s"
                       << c.p.stride_h << " p" << c.p.pad_h << " ceil " << c.p.ceil_mode << " incl "
                       << c.p.count_include_pad << " " << dtype_name(dx) << " -> " << dtype_name(dy)
                       << " threads " << nt);
          const Side xs = side(0.0473f, dx == DType::UInt8 ? 121 : -7);
          const Side ys = side(0.0211f, dy == DType::UInt8 ? 130 : -2);
          const int64_t r = int64_t(c.shape.size()), H = c.shape[r - 2], W = c.shape[r - 1];
          const int64_t planes = numel(c.shape) / (H * W);
          const int64_t Ho = extent(H, c.p.kernel_h, c.p.stride_h, c.p.pad_h, c.p.ceil_mode);
          const int64_t Wo = extent(W, c.p.kernel_w, c.p.stride_w, c.p.pad_w, c.p.ceil_mode);
          Dims out_shape = c.shape;
          out_shape[r - 2] = Ho, out_shape[r - 1] = Wo;
          const std::vector<double> xv = rand_bytes(numel(c.shape), dx);
          auto x = from_vec(xv, c.shape, dx);
          for (bool strided : {false, true}) {
            auto y = empty(out_shape, dy);
            qavg_pool2d_out(strided ? *noncontig(*x) : *x, operands(xs, ys), c.p, *y);
            const std::vector<double> got = to_vec(*y);
            int64_t bad = 0;
            for (int64_t pl = 0; pl < planes; ++pl)
              for (int64_t oh = 0; oh < Ho; ++oh)
                for (int64_t ow = 0; ow < Wo; ++ow) {
                  const Window w = window(xv, pl, H, W, oh, ow, c.p, xs.zero_point);
                  const double g = got[size_t((pl * Ho + oh) * Wo + ow)];
                  const double want = double(formula(w, xs, ys, dy));
                  // The real average, in float64, rounds to within one step of it.
                  const double real = double(w.sum) * double(xs.scale) / double(w.divisor);
                  const double exact =
                      std::clamp(std::nearbyint(real / double(ys.scale)) + double(ys.zero_point),
                                 double(lo_of(dy)), double(hi_of(dy)));
                  if ((g != want || std::abs(g - exact) > 1.0) && ++bad < 5)
                    ADD_FAILURE() << "output " << pl << "," << oh << "," << ow << " got " << g
                                  << " want " << want << " (exact " << exact << ")";
                }
            EXPECT_EQ(bad, 0);
          }
        }
  }
  set_num_threads(saved);
}

// What the folding replaces: dequantize -> avg_pool2d (a float32 sum) -> quantize. The integer
// sum is exact, so the two agree to one step and almost always exactly.
TEST(QAvgPool, AgreesWithDequantizePoolQuantize) {
  const Dims shape{4, 32, 7, 7};
  const Side xs = side(0.0123f, 3), ys = side(0.0097f, 128);
  auto x = from_vec(rand_bytes(numel(shape), DType::UInt8), shape, DType::UInt8);
  for (const Pool2dParams& p : {pool(7, 7, 0, false, true), pool(3, 2, 1, false, false)}) {
    auto xf = empty(shape, DType::Float32);
    dequantize_out(*x, *xs.s, *xs.z, {}, *xf);
    const Dims out_shape = avg_pool2d_output_shape(shape, p);
    auto pooled = empty(out_shape, DType::Float32);
    avg_pool2d_out(*xf, p, *pooled);
    auto want = empty(out_shape, DType::UInt8), got = empty(out_shape, DType::UInt8);
    quantize_out(*pooled, *ys.s, *ys.z, {}, *want);
    qavg_pool2d_out(*x, operands(xs, ys), p, *got);
    const std::vector<double> a = to_vec(*got), b = to_vec(*want);
    int64_t differ = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_LE(std::abs(a[i] - b[i]), 1.0) << "output " << i;
      differ += a[i] != b[i];
    }
    EXPECT_LE(differ * 100, int64_t(a.size()));  // at most 1% on a rounding tie's other side
  }
}

TEST(QAvgPool, BadOperandsAreNamed) {
  auto x = from_vec(rand_bytes(16, DType::UInt8), Dims{1, 1, 4, 4}, DType::UInt8);
  auto y = empty(Dims{1, 1, 2, 2}, DType::UInt8);
  const Side s = side(0.1f, 0);
  auto expect = [](const std::function<void()>& fn, const std::string& what) {
    const std::string msg = error_of(fn);
    EXPECT_NE(msg.find(what), std::string::npos) << "got: " << msg;
  };
  const Pool2dParams p = pool(2, 2, 0, false, true);
  auto f = rand_tensor(Dims{1, 1, 4, 4});
  expect([&] { qavg_pool2d_out(*f, operands(s, s), p, *y); },
         "qavg_pool2d: expected input of dtype uint8 or int8, got float32");
  auto y32 = empty(Dims{1, 1, 2, 2}, DType::Int32);
  expect([&] { qavg_pool2d_out(*x, operands(s, s), p, *y32); },
         "qavg_pool2d: expected out of dtype uint8 or int8, got int32");
  auto wrong = empty(Dims{1, 1, 3, 3}, DType::UInt8);
  expect([&] { qavg_pool2d_out(*x, operands(s, s), p, *wrong); }, "qavg_pool2d: expected out");
  const Side per_channel{0.1f, 0, from_vec({0.1, 0.2}, Dims{2}, DType::Float32),
                         from_vec({0, 0}, Dims{2}, DType::Int32)};
  expect([&] { qavg_pool2d_out(*x, operands(per_channel, s), p, *y); },
         "qavg_pool2d: expected input scale as a 0-dim float32 tensor");
  expect([&] { qavg_pool2d_out(*x, operands(s, side(0.0f, 0)), p, *y); },
         "qavg_pool2d: expected a positive finite output scale, got 0");
  expect([&] { qavg_pool2d_out(*x, operands(side(0.1f, -1), s), p, *y); },
         "qavg_pool2d: expected input zero point in [0, 255], got -1");
  expect([&] { qavg_pool2d_out(*x, operands(s, s), pool(2, 2, 2, false, true), *y); },
         "qavg_pool2d: expected padding at most half of the kernel size");
}
