// interpolate (nearest, bilinear with and without align_corners) against a float64 reference
// written per output element from PyTorch's documented source-coordinate rules, hand-computed
// values, the backward as the exact adjoint of the forward, and rejected bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/runtime/kernels/interpolate.h"
#include "nn_test_util.h"

using namespace kiln;
using namespace kiln::kernels;
using namespace nn_test;

namespace {

InterpolateParams params(InterpolateMode mode, bool align_corners = false, double sh = 0,
                         double sw = 0) {
  InterpolateParams p;
  p.mode = mode;
  p.align_corners = align_corners;
  p.scale_h = sh;
  p.scale_w = sw;
  return p;
}

// One output coordinate's source taps (index, weight) along a dim of extent `in`.
std::vector<std::pair<int64_t, double>> source(int64_t o, int64_t in, int64_t out, double scale,
                                               const InterpolateParams& p, bool f32) {
  if (p.mode == InterpolateMode::Nearest) {
    // PyTorch's nearest_idx: the step is a float whatever the dtype.
    const float step = scale > 0 ? float(1.0 / scale) : float(in) / float(out);
    int64_t i = out == in ? o : out == 2 * in ? o / 2 : int64_t(std::floor(float(o) * step));
    return {{std::min(i, in - 1), 1.0}};
  }
  double x;
  if (p.align_corners) {
    const double step = out > 1 ? double(in - 1) / double(out - 1) : 0.0;
    x = f32 ? double(float(step) * float(o)) : step * double(o);
  } else {
    const double step = scale > 0 ? 1.0 / scale : double(in) / double(out);
    x = f32 ? double(std::max(float(step) * (float(o) + 0.5f) - 0.5f, 0.0f))
            : std::max(step * (double(o) + 0.5) - 0.5, 0.0);
  }
  const int64_t i0 = std::min(int64_t(std::floor(x)), in - 1);
  const double l = std::clamp(x - double(i0), 0.0, 1.0);
  return {{i0, 1.0 - l}, {std::min(i0 + 1, in - 1), l}};
}

std::vector<double> reference(const std::vector<double>& x, const Dims& in, int64_t Ho, int64_t Wo,
                              const InterpolateParams& p, bool f32) {
  const int64_t planes = in[0] * in[1], H = in[2], W = in[3];
  std::vector<double> y(size_t(planes * Ho * Wo), 0.0);
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t oh = 0; oh < Ho; ++oh)
      for (int64_t ow = 0; ow < Wo; ++ow) {
        double acc = 0;
        for (auto [ih, wh] : source(oh, H, Ho, p.scale_h, p, f32))
          for (auto [iw, ww] : source(ow, W, Wo, p.scale_w, p, f32))
            acc += wh * ww * x[size_t((pl * H + ih) * W + iw)];
        y[size_t((pl * Ho + oh) * Wo + ow)] = acc;
      }
  return y;
}

std::vector<double> run(const std::vector<double>& x, Dims in, Dims out, const InterpolateParams& p,
                        DType dt = DType::Float64, bool strided = false) {
  auto xt = from_vec(x, in, dt);
  if (strided) xt = noncontig(*xt);
  auto yt = empty(out, dt);
  interpolate_out(*xt, p, *yt);
  return to_vec(*yt);
}

struct Case {
  Dims in;
  int64_t Ho, Wo;
  double sh, sw;  // 0: from the sizes
};

const Case kCases[] = {
    {{2, 3, 5, 7}, 3, 11, 0, 0},     {{1, 2, 4, 4}, 8, 8, 0, 0}, {{1, 1, 3, 5}, 7, 2, 0, 0},
    {{1, 1, 1, 1}, 3, 3, 0, 0},      {{1, 2, 6, 6}, 6, 6, 0, 0}, {{1, 1, 5, 5}, 8, 8, 1.7, 1.7},
    {{2, 1, 10, 9}, 6, 5, 0.6, 0.6}, {{1, 3, 4, 3}, 1, 1, 0, 0}, {{1, 1, 7, 4}, 14, 8, 2, 2},
};

}  // namespace

TEST(Interpolate, HandComputedValues) {
  const std::vector<double> x = {1, 2, 3, 4};
  // bilinear, align_corners = false, 2x2 -> 4x4 (PyTorch's documented example values)
  EXPECT_EQ(run(x, {1, 1, 2, 2}, {1, 1, 4, 4}, params(InterpolateMode::Bilinear)),
            (std::vector<double>{1, 1.25, 1.75, 2, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3,
                                 3.25, 3.75, 4}));
  // align_corners = true, 2x2 -> 3x3: the corners stay, the middle is the mean
  EXPECT_EQ(run(x, {1, 1, 2, 2}, {1, 1, 3, 3}, params(InterpolateMode::Bilinear, true)),
            (std::vector<double>{1, 1.5, 2, 2, 2.5, 3, 3, 3.5, 4}));
  // nearest 2x2 -> 3x3: floor(o * 2/3) = 0, 0, 1
  EXPECT_EQ(run(x, {1, 1, 2, 2}, {1, 1, 3, 3}, params(InterpolateMode::Nearest)),
            (std::vector<double>{1, 1, 2, 1, 1, 2, 3, 3, 4}));
}

// A scale factor sets the step (1/scale), not the size ratio: 5 * 1.7 -> 8 outputs, and output 5
// reads floor(5 / 1.7) = 2 where the ratio 5/8 would read 3.
TEST(Interpolate, ScaleFactorSetsTheStep) {
  EXPECT_EQ(interpolate_output_size("t", 5, 1.7), 8);
  const std::vector<double> x = {10, 11, 12, 13, 14};
  auto with_scale =
      run(x, {1, 1, 1, 5}, {1, 1, 1, 8}, params(InterpolateMode::Nearest, false, 1, 1.7));
  auto from_sizes = run(x, {1, 1, 1, 5}, {1, 1, 1, 8}, params(InterpolateMode::Nearest));
  EXPECT_EQ(with_scale[5], 12);
  EXPECT_EQ(from_sizes[5], 13);
}

TEST(Interpolate, MatchesFloat64ReferenceInEveryMode) {
  for (const auto& c : kCases) {
    for (int m = 0; m < 3; ++m) {
      const auto p =
          params(m == 0 ? InterpolateMode::Nearest : InterpolateMode::Bilinear, m == 2, c.sh, c.sw);
      const Dims out{c.in[0], c.in[1], c.Ho, c.Wo};
      const auto x = rand_vec(numel(c.in));
      const std::string what = "case " + ::testing::PrintToString(c.in) + " -> " +
                               std::to_string(c.Ho) + "x" + std::to_string(c.Wo) + " mode " +
                               std::to_string(m);
      expect_close(run(x, c.in, out, p), reference(x, c.in, c.Ho, c.Wo, p, false), 1e-12, 1e-12,
                   what + " f64");
      expect_close(run(x, c.in, out, p, DType::Float64, true),
                   reference(x, c.in, c.Ho, c.Wo, p, false), 1e-12, 1e-12, what + " strided");
      expect_close(run(x, c.in, out, p, DType::Float32), reference(x, c.in, c.Ho, c.Wo, p, true),
                   1e-6, 1e-6, what + " f32");
      // float16 computes in float32 from the rounded input, then rounds once
      std::vector<double> xr = to_vec(*from_vec(x, c.in, DType::Float16));
      const auto want = reference(xr, c.in, c.Ho, c.Wo, p, true);
      const auto got = run(xr, c.in, out, p, DType::Float16);
      for (size_t i = 0; i < want.size(); ++i)
        EXPECT_NEAR(got[i], want[i], ulp_of(DType::Float16, want[i])) << what << " f16 at " << i;
    }
  }
}

// The backward is the forward's transpose: <interpolate(x), g> == <x, interpolate_backward(g)>.
TEST(Interpolate, BackwardIsTheAdjointOfForward) {
  for (const auto& c : kCases) {
    for (int m = 0; m < 3; ++m) {
      const auto p =
          params(m == 0 ? InterpolateMode::Nearest : InterpolateMode::Bilinear, m == 2, c.sh, c.sw);
      const Dims out{c.in[0], c.in[1], c.Ho, c.Wo};
      const auto x = rand_vec(numel(c.in)), g = rand_vec(numel(out));
      const auto y = run(x, c.in, out, p);
      auto gt = from_vec(g, out, DType::Float64);
      auto gx = empty(c.in, DType::Float64);
      interpolate_backward_out(*noncontig(*gt), p, *gx);
      const auto gxv = to_vec(*gx);
      double lhs = 0, rhs = 0;
      for (size_t i = 0; i < y.size(); ++i) lhs += y[i] * g[i];
      for (size_t i = 0; i < x.size(); ++i) rhs += x[i] * gxv[i];
      EXPECT_NEAR(lhs, rhs, 1e-12 * (1 + std::abs(lhs))) << "mode " << m;
      // float32 gradients agree with float64 ones
      auto gx32 = empty(c.in, DType::Float32);
      interpolate_backward_out(*from_vec(g, out, DType::Float32), p, *gx32);
      expect_close(to_vec(*gx32), gxv, 1e-5, 1e-5, "f32 backward");
    }
  }
}

// Nearest copies values: an infinite input stays infinite (no 0 * inf from an unused tap).
TEST(Interpolate, NearestCopiesNonFiniteValues) {
  const double inf = std::numeric_limits<double>::infinity();
  auto y = run({inf, 1, -inf, 2}, {1, 1, 2, 2}, {1, 1, 3, 5}, params(InterpolateMode::Nearest));
  EXPECT_EQ(y[0], inf);
  EXPECT_EQ(y[14], 2);
  EXPECT_EQ(y[10], -inf);
}

TEST(Interpolate, BadInputIsRejectedWithTheOpName) {
  auto expect_error = [](auto&& fn, const std::string& needle) {
    try {
      fn();
      ADD_FAILURE() << "no error; expected one containing " << needle;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("interpolate"), std::string::npos) << msg;
      EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    }
  };
  auto x = rand_tensor({1, 2, 3, 3}, DType::Float32);
  auto y = empty(Dims{1, 2, 6, 6}, DType::Float32);
  const auto bil = params(InterpolateMode::Bilinear);
  expect_error([&] { interpolate_out(*rand_tensor({2, 3, 3}), bil, *y); }, "4-d");
  expect_error(
      [&] {
        interpolate_out(*x, bil, *empty(Dims{1, 3, 6, 6}, DType::Float32));
      },
      "[1, 2, H_out, W_out]");
  expect_error(
      [&] {
        interpolate_out(*x, bil, *empty(Dims{1, 2, 6, 6}, DType::Float64));
      },
      "dtype");
  expect_error([&] { interpolate_out(*x, params(InterpolateMode::Nearest, true), *y); },
               "align_corners");
  expect_error([&] { interpolate_out(*x, params(static_cast<InterpolateMode>(7)), *y); }, "got 7");
  expect_error([&] { interpolate_out(*x, params(InterpolateMode::Bilinear, false, NAN, 1), *y); },
               "scale");
  expect_error(
      [&] {
        interpolate_out(*x, bil, *empty(Dims{1, 2, 0, 6}, DType::Float32));
      },
      "non-empty");
  expect_error(
      [&] {
        interpolate_out(*empty(Dims{1, 2, 3, 3}, DType::Int64), bil,
                        *empty(Dims{1, 2, 6, 6}, DType::Int64));
      },
      "floating");
  expect_error(
      [&] { interpolate_out(*x, params(InterpolateMode::Nearest, false, 1e-20, 1e-20), *y); },
      "scale factor");
  expect_error([] { interpolate_output_size("interpolate", 4, 0.0); }, "scale factor > 0");
  expect_error([] { interpolate_output_size("interpolate", 4, 0.1); }, "[1, 2^40]");
  expect_error([] { interpolate_output_size("interpolate", int64_t(1) << 40, 1e9); }, "[1, 2^40]");
}
