// Pooling and normalization kernels against naive float64 loops written here; backward passes
// against central finite differences of the (separately verified) float64 forward.
#include <gtest/gtest.h>

#include "kiln/runtime/kernels/norm.h"
#include "kiln/runtime/kernels/pool.h"
#include "kiln/runtime/thread_pool.h"
#include "nn_test_util.h"

using namespace kiln;
using namespace kiln::kernels;
using namespace nn_test;

namespace {

Pool2dParams PP(int64_t k, int64_t s, int64_t p, int64_t d = 1, bool ceil = false,
                bool include_pad = true, int64_t div = 0) {
  Pool2dParams q;
  q.kernel_h = q.kernel_w = k;
  q.stride_h = q.stride_w = s;
  q.pad_h = q.pad_w = p;
  q.dilation_h = q.dilation_w = d;
  q.ceil_mode = ceil;
  q.count_include_pad = include_pad;
  q.divisor_override = div;
  return q;
}

// Output extent straight from the definition: count window starts s*i - p (i >= 0) such that the
// dilated window ends inside the padded input (floor) or starts inside input+left pad (ceil).
int64_t ref_out(int64_t H, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil) {
  const int64_t eff = d * (k - 1) + 1;
  int64_t n = 0;
  for (int64_t i = 0;; ++i) {
    const int64_t start = i * s - p;
    const bool fits = start + eff <= H + p;
    if (fits) {
      ++n;
      continue;
    }
    // ceil mode: one more partial window if it starts inside the input (or the left pad) and the
    // previous window did not already reach the end.
    if (ceil && start < H && (i == 0 || (i - 1) * s - p + eff < H + p)) ++n;
    break;
  }
  return n;
}

struct MaxRef {
  std::vector<double> y;
  std::vector<int64_t> idx;
};

MaxRef ref_max_pool(const std::vector<double>& x, int64_t P, int64_t H, int64_t W, int64_t Ho,
                    int64_t Wo, int64_t kh, int64_t kw, int64_t s, int64_t p, int64_t d) {
  MaxRef r;
  for (int64_t pl = 0; pl < P; ++pl)
    for (int64_t oh = 0; oh < Ho; ++oh)
      for (int64_t ow = 0; ow < Wo; ++ow) {
        double m = -INFINITY;
        int64_t best = -1;
        for (int64_t i = 0; i < kh; ++i)
          for (int64_t j = 0; j < kw; ++j) {
            const int64_t ih = oh * s - p + i * d, iw = ow * s - p + j * d;
            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
            const double v = x[(pl * H + ih) * W + iw];
            if (best < 0 || v > m) m = v, best = ih * W + iw;
          }
        r.y.push_back(m);
        r.idx.push_back(best);
      }
  return r;
}

std::vector<double> ref_avg_pool(const std::vector<double>& x, int64_t P, int64_t H, int64_t W,
                                 int64_t Ho, int64_t Wo, int64_t k, int64_t s, int64_t p,
                                 bool include_pad, int64_t div) {
  std::vector<double> y;
  for (int64_t pl = 0; pl < P; ++pl)
    for (int64_t oh = 0; oh < Ho; ++oh)
      for (int64_t ow = 0; ow < Wo; ++ow) {
        double sum = 0;
        int64_t valid = 0, in_padded = 0;
        for (int64_t i = 0; i < k; ++i)
          for (int64_t j = 0; j < k; ++j) {
            const int64_t ih = oh * s - p + i, iw = ow * s - p + j;
            // Positions inside input + padding count for count_include_pad.
            if (ih >= -p && ih < H + p && iw >= -p && iw < W + p) ++in_padded;
            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
            sum += x[(pl * H + ih) * W + iw];
            ++valid;
          }
        const double dv = div ? div : include_pad ? in_padded : valid;
        y.push_back(valid ? sum / dv : 0.0);
      }
  return y;
}

}  // namespace

TEST(Pool, OutputSize) {
  for (int64_t H : {1, 2, 5, 6, 7, 8, 112})
    for (int64_t k : {1, 2, 3, 4})
      for (int64_t s : {1, 2, 3})
        for (int64_t p = 0; p <= k / 2; ++p)
          for (bool ceil : {false, true}) {
            if (H + 2 * p < k) continue;
            EXPECT_EQ(pool_output_size(H, k, s, p, 1, ceil), ref_out(H, k, s, p, 1, ceil))
                << "H" << H << " k" << k << " s" << s << " p" << p << " ceil" << ceil;
          }
  EXPECT_EQ(pool_output_size(112, 3, 2, 1, 1, false), 56);  // ResNet stem max pool
}

TEST(Pool, MaxPool2dForwardBackward) {
  struct C {
    int64_t N, Ch, H, W, k, s, p, d;
    bool ceil;
  };
  for (const C& c : std::vector<C>{{2, 3, 9, 8, 3, 2, 1, 1, false},
                                   {1, 2, 7, 7, 2, 2, 0, 1, true},
                                   {2, 2, 10, 9, 3, 1, 1, 2, false},
                                   {1, 3, 11, 13, 3, 3, 1, 2, true},
                                   {3, 1, 5, 6, 2, 1, 1, 1, false},
                                   {1, 4, 5, 5, 3, 2, 1, 1, true}}) {
    for (DType dt : {DType::Float32, DType::Float64}) {
      SCOPED_TRACE(testing::Message() << c.H << "x" << c.W << " k" << c.k << " s" << c.s << " p"
                                      << c.p << " d" << c.d << " ceil" << c.ceil);
      const Pool2dParams p = PP(c.k, c.s, c.p, c.d, c.ceil);
      const Dims xs{c.N, c.Ch, c.H, c.W};
      auto xv = rand_vec(numel(xs));
      auto x = noncontig(*from_vec(xv, xs, dt), true);
      const Dims ys = max_pool2d_output_shape(xs, p);
      const int64_t Ho = ref_out(c.H, c.k, c.s, c.p, c.d, c.ceil);
      const int64_t Wo = ref_out(c.W, c.k, c.s, c.p, c.d, c.ceil);
      ASSERT_EQ(ys, (Dims{c.N, c.Ch, Ho, Wo}));
      auto y = empty(ys, dt);
      auto idx = empty(ys, DType::Int64);
      max_pool2d_out(*x, p, *y, idx.get());
      auto xr = to_vec(*x);  // values as stored in dt
      auto ref = ref_max_pool(xr, c.N * c.Ch, c.H, c.W, Ho, Wo, c.k, c.k, c.s, c.p, c.d);
      expect_close(to_vec(*y), ref.y, 0, 0, "max_pool2d");
      const int64_t* ip = idx->data_ptr<int64_t>();
      for (size_t i = 0; i < ref.idx.size(); ++i) ASSERT_EQ(ip[i], ref.idx[i]) << i;
      // Without indices (inference): the values-only kernel.
      auto y_values = empty(ys, dt);
      max_pool2d_out(*x, p, *y_values, nullptr);
      expect_close(to_vec(*y_values), ref.y, 0, 0, "max_pool2d without indices");
      // Backward: scatter-add of grad_output at the argmax.
      auto gyv = rand_vec(numel(ys));
      auto gy = from_vec(gyv, ys, dt);
      auto gx = noncontig(*empty(xs, dt));
      max_pool2d_backward_out(*gy, *idx, *gx);
      std::vector<double> want(xv.size(), 0.0);
      const int64_t HW = c.H * c.W;
      for (size_t i = 0; i < gyv.size(); ++i) want[(i / (Ho * Wo)) * HW + ref.idx[i]] += gyv[i];
      expect_close(to_vec(*gx), want, 1e-6, 1e-6, "max_pool2d_backward");
    }
  }
}

TEST(Pool, MaxPool2dNaNAnd3dInputAndLowPrecision) {
  // A NaN in the window wins (PyTorch propagates NaN).
  auto x = from_vec({1, NAN, 3, 4}, Dims{1, 2, 2}, DType::Float32);  // (C, H, W) input
  auto y = empty(Dims{1, 1, 1}, DType::Float32);
  auto idx = empty(Dims{1, 1, 1}, DType::Int64);
  max_pool2d_out(*x, PP(2, 2, 0), *y, idx.get());
  EXPECT_TRUE(std::isnan(y->data_ptr<float>()[0]));
  EXPECT_EQ(idx->data_ptr<int64_t>()[0], 1);
  // Same without indices, a NaN at each position of a 3x3 stride-2 padded window, and windows
  // of -inf only.
  for (int64_t at = 0; at < 25; ++at) {
    std::vector<double> v(25);
    for (int64_t i = 0; i < 25; ++i) v[i] = static_cast<double>((i * 7) % 11) - 5.0;
    v[at] = NAN;
    if (at % 5 == 0) v[(at + 12) % 25] = -INFINITY;
    auto xn = from_vec(v, Dims{1, 5, 5}, DType::Float32);
    auto yn = empty(Dims{1, 3, 3}, DType::Float32);
    max_pool2d_out(*xn, PP(3, 2, 1), *yn, nullptr);
    for (int64_t oh = 0; oh < 3; ++oh)
      for (int64_t ow = 0; ow < 3; ++ow) {
        double want = -INFINITY;  // NaN if the window holds one, else its max
        for (int64_t ih = 2 * oh - 1; ih <= 2 * oh + 1; ++ih)
          for (int64_t iw = 2 * ow - 1; iw <= 2 * ow + 1; ++iw) {
            if (ih < 0 || ih >= 5 || iw < 0 || iw >= 5) continue;
            const double e = v[ih * 5 + iw];
            want = std::isnan(want) || std::isnan(e) ? NAN : std::max(want, e);
          }
        const float got = yn->data_ptr<float>()[oh * 3 + ow];
        if (std::isnan(want))
          EXPECT_TRUE(std::isnan(got)) << "NaN at " << at << ", output " << oh << "," << ow;
        else
          EXPECT_EQ(got, want) << "NaN at " << at << ", output " << oh << "," << ow;
      }
  }
  auto xi = from_vec(std::vector<double>(16, -INFINITY), Dims{1, 4, 4}, DType::Float32);
  auto yi = empty(Dims{1, 2, 2}, DType::Float32);
  max_pool2d_out(*xi, PP(2, 2, 0), *yi, nullptr);
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(yi->data_ptr<float>()[i], -INFINITY);
  auto xv = rand_vec(2 * 6 * 6);
  auto xb = from_vec(xv, Dims{2, 6, 6}, DType::BFloat16);
  auto yb = empty(Dims{2, 3, 3}, DType::BFloat16);
  max_pool2d_out(*xb, PP(2, 2, 0), *yb, nullptr);
  auto xr = to_vec(*xb);
  auto ref = ref_max_pool(xr, 2, 6, 6, 3, 3, 2, 2, 2, 0, 1);
  expect_close(to_vec(*yb), ref.y, 0, 0, "max_pool2d bf16");
}

// Indices with ties, NaNs and windows of -inf only: PyTorch's rule is a row-major scan of the
// window taking a value greater than the best so far or NaN (the first maximum, the last NaN), the
// window's first position when nothing beats -inf. Values from a small set make every case
// frequent; the shapes cover the kernel's whole-window column paths (3x3/2, 3x3/1, 2x2/2), its
// general path (dilation, other strides), padded edges and ceil_mode.
TEST(Pool, MaxPool2dIndicesFollowTheRowMajorScan) {
  struct C {
    int64_t H, W, k, s, p, d;
    bool ceil;
  };
  const std::vector<C> shapes{{9, 12, 3, 2, 1, 1, false}, {8, 11, 3, 1, 1, 1, false},
                              {7, 10, 2, 2, 0, 1, true},  {9, 9, 3, 2, 1, 2, false},
                              {10, 7, 3, 3, 1, 1, true},  {6, 13, 4, 2, 2, 1, false}};
  const double kSet[] = {-INFINITY, -1.0, 0.0, 1.0, NAN};
  for (const C& c : shapes)
    for (DType dt : {DType::Float32, DType::Float64, DType::UInt8})
      for (int seed = 0; seed < 4; ++seed) {
        SCOPED_TRACE(testing::Message()
                     << dtype_name(dt) << " " << c.H << "x" << c.W << " k" << c.k << " s" << c.s
                     << " p" << c.p << " d" << c.d << " seed " << seed);
        const bool bytes = dt == DType::UInt8;
        const int64_t P = 3, n = P * c.H * c.W;
        std::vector<double> v(static_cast<size_t>(n));
        uint32_t r = 12345u + 977u * static_cast<uint32_t>(seed);
        for (auto& e : v) {
          r = r * 1664525u + 1013904223u;
          const uint32_t pick = (r >> 16) % 5u;
          // Bytes: 0..2 (0 is their below-all). Floats: seed 0 ties among -1, 0, 1 and one NaN;
          // seed 1 all five values (windows with several NaNs); seed 2 mostly -inf; seed 3 ties.
          if (bytes)
            e = double(pick % 3);
          else if (seed == 1)
            e = kSet[pick];
          else if (seed == 2)
            e = pick < 4 ? -INFINITY : 1.0;
          else
            e = kSet[1 + pick % 3];
        }
        if (!bytes && seed == 0) v[static_cast<size_t>(n / 2 + 1)] = NAN;
        const Pool2dParams pp = PP(c.k, c.s, c.p, c.d, c.ceil);
        const Dims xs{1, P, c.H, c.W};
        auto x = from_vec(v, xs, dt);
        const Dims ys = max_pool2d_output_shape(xs, pp);
        const int64_t Ho = ys[2], Wo = ys[3];
        auto y = empty(ys, dt);
        auto idx = empty(ys, DType::Int64);
        max_pool2d_out(*x, pp, *y, idx.get());
        const auto got = to_vec(*y);
        const int64_t* gi = idx->data_ptr<int64_t>();
        for (int64_t pl = 0; pl < P; ++pl)
          for (int64_t oh = 0; oh < Ho; ++oh)
            for (int64_t ow = 0; ow < Wo; ++ow) {
              double m = bytes ? 0.0 : -INFINITY;
              int64_t best = -1;
              for (int64_t i = 0; i < c.k; ++i)
                for (int64_t j = 0; j < c.k; ++j) {
                  const int64_t ih = oh * c.s - c.p + i * c.d, iw = ow * c.s - c.p + j * c.d;
                  if (ih < 0 || ih >= c.H || iw < 0 || iw >= c.W) continue;
                  if (best < 0) best = ih * c.W + iw;
                  const double e = v[static_cast<size_t>((pl * c.H + ih) * c.W + iw)];
                  if (e > m || std::isnan(e)) m = e, best = ih * c.W + iw;
                }
              const int64_t o = (pl * Ho + oh) * Wo + ow;
              ASSERT_EQ(gi[o], best) << "output " << pl << "," << oh << "," << ow;
              if (std::isnan(m))
                ASSERT_TRUE(std::isnan(got[o])) << "output " << pl << "," << oh << "," << ow;
              else
                ASSERT_EQ(got[o], m) << "output " << pl << "," << oh << "," << ow;
            }
      }
}

TEST(Pool, AvgPool2dForwardBackward) {
  struct C {
    int64_t N, Ch, H, W, k, s, p;
    bool ceil, incl;
    int64_t div;
  };
  for (const C& c : std::vector<C>{{2, 3, 9, 8, 3, 2, 1, false, true, 0},
                                   {2, 3, 9, 8, 3, 2, 1, false, false, 0},
                                   {1, 2, 7, 7, 2, 2, 1, true, true, 0},
                                   {1, 2, 7, 7, 2, 2, 1, true, false, 0},
                                   {1, 2, 8, 5, 3, 3, 1, true, true, 0},
                                   {2, 2, 6, 6, 3, 1, 1, false, true, 7},
                                   {1, 1, 5, 5, 5, 1, 0, false, true, 0}}) {
    SCOPED_TRACE(testing::Message() << c.H << "x" << c.W << " k" << c.k << " s" << c.s << " p"
                                    << c.p << " ceil" << c.ceil << " incl" << c.incl);
    const Pool2dParams p = PP(c.k, c.s, c.p, 1, c.ceil, c.incl, c.div);
    const Dims xs{c.N, c.Ch, c.H, c.W};
    const Dims ys = avg_pool2d_output_shape(xs, p);
    const int64_t Ho = ref_out(c.H, c.k, c.s, c.p, 1, c.ceil);
    const int64_t Wo = ref_out(c.W, c.k, c.s, c.p, 1, c.ceil);
    ASSERT_EQ(ys, (Dims{c.N, c.Ch, Ho, Wo}));
    auto xv = rand_vec(numel(xs));
    auto f = [&](const std::vector<double>& v) {
      auto x = from_vec(v, xs, DType::Float64);
      auto y = empty(ys, DType::Float64);
      avg_pool2d_out(*x, p, *y);
      return to_vec(*y);
    };
    auto want = ref_avg_pool(xv, c.N * c.Ch, c.H, c.W, Ho, Wo, c.k, c.s, c.p, c.incl, c.div);
    expect_close(f(xv), want, 1e-12, 1e-12, "avg_pool2d f64");
    auto x32 = noncontig(*from_vec(xv, xs, DType::Float32));
    auto y32 = empty(ys, DType::Float32);
    avg_pool2d_out(*x32, p, *y32);
    expect_close(to_vec(*y32), want, 1e-5, 1e-6, "avg_pool2d f32");
    // Backward vs finite differences.
    auto r = rand_vec(numel(ys));
    auto num = numeric_grad(xv, f, r);
    for (DType dt : {DType::Float64, DType::Float32}) {
      auto gy = noncontig(*from_vec(r, ys, dt));
      auto gx = empty(xs, dt);
      avg_pool2d_backward_out(*gy, p, *gx);
      expect_close(to_vec(*gx), num, 1e-5, 1e-5, "avg_pool2d_backward");
    }
  }
}

TEST(Pool, AdaptiveAvgPool2d) {
  for (auto [H, W, Ho, Wo] : std::vector<std::array<int64_t, 4>>{
           {7, 7, 1, 1}, {9, 9, 1, 1}, {9, 10, 4, 3}, {5, 5, 7, 6}, {6, 8, 3, 4}, {13, 11, 5, 5}}) {
    SCOPED_TRACE(testing::Message() << H << "x" << W << " -> " << Ho << "x" << Wo);
    const Dims xs{2, 3, H, W};
    const Dims ys = adaptive_avg_pool2d_output_shape(xs, Ho, Wo);
    ASSERT_EQ(ys, (Dims{2, 3, Ho, Wo}));
    auto xv = rand_vec(numel(xs));
    std::vector<double> want;
    for (int64_t pl = 0; pl < 6; ++pl)
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          // Window bounds from real arithmetic: [floor(i*H/Ho), ceil((i+1)*H/Ho)).
          const int64_t hs = static_cast<int64_t>(std::floor(double(oh) * H / Ho));
          const int64_t he = static_cast<int64_t>(std::ceil(double(oh + 1) * H / Ho));
          const int64_t ws = static_cast<int64_t>(std::floor(double(ow) * W / Wo));
          const int64_t we = static_cast<int64_t>(std::ceil(double(ow + 1) * W / Wo));
          double s = 0;
          for (int64_t i = hs; i < he; ++i)
            for (int64_t j = ws; j < we; ++j) s += xv[(pl * H + i) * W + j];
          want.push_back(s / double((he - hs) * (we - ws)));
        }
    auto f = [&](const std::vector<double>& v) {
      auto x = from_vec(v, xs, DType::Float64);
      auto y = empty(ys, DType::Float64);
      adaptive_avg_pool2d_out(*x, *y);
      return to_vec(*y);
    };
    expect_close(f(xv), want, 1e-12, 1e-12, "adaptive_avg_pool2d");
    auto x32 = noncontig(*from_vec(xv, xs, DType::Float32), true);
    auto y32 = empty(ys, DType::Float32);
    adaptive_avg_pool2d_out(*x32, *y32);
    expect_close(to_vec(*y32), want, 1e-5, 1e-6, "adaptive_avg_pool2d f32");
    auto r = rand_vec(numel(ys));
    auto num = numeric_grad(xv, f, r);
    auto gx = empty(xs, DType::Float32);
    adaptive_avg_pool2d_backward_out(*from_vec(r, ys, DType::Float32), *gx);
    expect_close(to_vec(*gx), num, 1e-5, 1e-5, "adaptive_avg_pool2d_backward");
  }
}

// A dilated window whose rows all fall in the padding (legal: padding is at most half the
// dilated kernel) is -inf, as in PyTorch; the values-only kernel once read the row past the input.
TEST(Pool, MaxPool2dWindowOfPaddingRowsOnly) {
  Pool2dParams p;
  p.kernel_h = 2, p.kernel_w = 1, p.stride_h = p.stride_w = 1, p.pad_h = 1, p.pad_w = 0;
  p.dilation_h = 2, p.dilation_w = 1;
  // Two planes: the second one's values sit right after the first plane's single row.
  auto x = from_vec({1, 2, 3, 4, 5, 6, 7, 8}, Dims{2, 1, 4}, DType::Float32);
  ASSERT_EQ(max_pool2d_output_shape(Dims{2, 1, 4}, p), (Dims{2, 1, 4}));
  for (bool with_indices : {false, true}) {
    auto y = empty(Dims{2, 1, 4}, DType::Float32);
    auto idx = empty(Dims{2, 1, 4}, DType::Int64);
    max_pool2d_out(*x, p, *y, with_indices ? idx.get() : nullptr);
    for (double v : to_vec(*y)) EXPECT_EQ(v, -INFINITY) << "with_indices " << with_indices;
  }
}

TEST(Pool, Errors) {
  expect_error(
      [] {
        max_pool2d_output_shape(Dims{4, 4}, PP(2, 2, 0));
      },
      {"max_pool2d", "expected input of 3 or 4 dims", "got [4, 4]"});
  expect_error(
      [] {
        max_pool2d_output_shape(Dims{1, 1, 4, 4}, PP(2, 2, 2));
      },
      {"max_pool2d", "padding at most half"});
  expect_error(
      [] {
        avg_pool2d_output_shape(Dims{1, 1, 2, 2}, PP(3, 1, 0));
      },
      {"avg_pool2d", "output of at least 1x1"});
  expect_error(
      [] {
        max_pool2d_output_shape(Dims{1, 1, 4, 4}, PP(0, 1, 0));
      },
      {"max_pool2d", "kernel size > 0"});
  expect_error(
      [] {
        max_pool2d_output_shape(Dims{1, 1, 4, 4}, PP(3, 1, 1, (int64_t(1) << 62) + 1));
      },
      {"max_pool2d", "below 2^31", "dilation (4611686018427387905"});
  expect_error(
      [] {
        avg_pool2d_output_shape(Dims{1, 1, 4, 4}, PP(2, int64_t(1) << 62, 0, 1, true));
      },
      {"avg_pool2d", "below 2^31"});
  // Padding and (ceil-mode) windows reaching far past a 1x1 input: the values-only kernel's
  // padded row would be 4 GiB.
  expect_error(
      [] {
        max_pool2d_output_shape(Dims{1, 1, 1, 1}, PP(3, 1, int64_t(1) << 26, int64_t(1) << 26));
      },
      {"max_pool2d", "padding of at most 2^25", "67108864"});
  expect_error(
      [] {
        max_pool2d_output_shape(Dims{1, 1, 1, 1},
                                PP(int64_t(1) << 30, int64_t(1) << 30, 0, 1, true));
      },
      {"max_pool2d", "dilated kernel at most 2^26 beyond", "1073741824"});
  auto x = zeros(Dims{1, 1, 4, 4}, DType::Int32);
  auto y = zeros(Dims{1, 1, 2, 2}, DType::Int32);
  expect_error([&] { max_pool2d_out(*x, PP(2, 2, 0), *y, nullptr); },
               {"max_pool2d", "floating dtype", "int32"});
  auto gy = zeros(Dims{1, 1, 2, 2}, DType::Float32);
  auto gx = zeros(Dims{1, 1, 4, 4}, DType::Float32);
  auto idx = from_vec({0, 1, 2, 16}, Dims{1, 1, 2, 2}, DType::Int64);
  expect_error([&] { max_pool2d_backward_out(*gy, *idx, *gx); },
               {"max_pool2d_backward", "indices in [0, 16)", "got 16"});
}

// =============================================================================================
// Normalization

namespace {

// Batch statistics reference: per channel over N and spatial.
void ref_bn_stats(const std::vector<double>& x, int64_t N, int64_t C, int64_t S,
                  std::vector<double>& mean, std::vector<double>& var) {
  mean.assign(C, 0.0);
  var.assign(C, 0.0);
  for (int64_t c = 0; c < C; ++c) {
    double s = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < S; ++i) s += x[(n * C + c) * S + i];
    mean[c] = s / double(N * S);
    double q = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < S; ++i) {
        const double d = x[(n * C + c) * S + i] - mean[c];
        q += d * d;
      }
    var[c] = q / double(N * S);
  }
}

}  // namespace

TEST(Norm, BatchNormTrainingForward) {
  for (Dims xs : {Dims{4, 3, 5, 6}, Dims{7, 5}, Dims{2, 4, 3, 2, 2}, Dims{1, 3, 1, 2}}) {
    for (DType dt : {DType::Float32, DType::Float64, DType::BFloat16}) {
      SCOPED_TRACE(testing::Message() << xs << " " << dtype_name(dt));
      const int64_t N = xs[0], C = xs[1], S = numel(xs) / (N * C);
      // Offset inputs (mean 3) test the two-pass variance.
      auto xv = rand_vec(numel(xs), 2.0, 4.0), wv = rand_vec(C), bv = rand_vec(C);
      auto rmv = rand_vec(C), rvv = rand_vec(C, 0.5, 1.5);
      auto x = noncontig(*from_vec(xv, xs, dt), true);
      auto xr = to_vec(*x);  // values as stored (bf16-rounded)
      auto w = from_vec(wv, Dims{C}, DType::Float32), b = from_vec(bv, Dims{C}, DType::Float32);
      auto rm = from_vec(rmv, Dims{C}, DType::Float32), rv = from_vec(rvv, Dims{C}, DType::Float32);
      wv = to_vec(*w), bv = to_vec(*b), rmv = to_vec(*rm), rvv = to_vec(*rv);  // as stored
      auto y = empty(xs, dt);
      auto sm = empty(Dims{C}, DType::Float32), si = empty(Dims{C}, DType::Float32);
      const double mom = 0.1, eps = 1e-5;
      batch_norm_out(*x, w.get(), b.get(), rm.get(), rv.get(), true, mom, eps, *y, sm.get(),
                     si.get());
      std::vector<double> mean, var;
      ref_bn_stats(xr, N, C, S, mean, var);
      std::vector<double> want(xr.size());
      for (int64_t n = 0; n < N; ++n)
        for (int64_t c = 0; c < C; ++c)
          for (int64_t i = 0; i < S; ++i) {
            const int64_t k = (n * C + c) * S + i;
            want[k] = (xr[k] - mean[c]) / std::sqrt(var[c] + eps) * wv[c] + bv[c];
          }
      const double tol = dt == DType::BFloat16 ? 3e-2 : dt == DType::Float32 ? 2e-4 : 1e-9;
      expect_close(to_vec(*y), want, tol, tol, "batch_norm out");
      std::vector<double> want_rm(C), want_rv(C), want_is(C);
      const double M = double(N * S);
      for (int64_t c = 0; c < C; ++c) {
        want_rm[c] = 0.9 * rmv[c] + 0.1 * mean[c];
        want_rv[c] = 0.9 * rvv[c] + 0.1 * var[c] * M / (M - 1);  // unbiased
        want_is[c] = 1 / std::sqrt(var[c] + eps);
      }
      expect_close(to_vec(*sm), mean, 1e-5, 1e-5, "save_mean");
      expect_close(to_vec(*si), want_is, 1e-4, 1e-4, "save_invstd");
      expect_close(to_vec(*rm), want_rm, 1e-5, 1e-5, "running_mean");
      expect_close(to_vec(*rv), want_rv, 1e-5, 1e-5, "running_var");
    }
  }
}

TEST(Norm, BatchNormInferenceForward) {
  const Dims xs{3, 4, 5, 5};
  auto xv = rand_vec(numel(xs)), wv = rand_vec(4), bv = rand_vec(4), rmv = rand_vec(4),
       rvv = rand_vec(4, 0.5, 2);
  auto x = from_vec(xv, xs, DType::Float32);
  auto rm = from_vec(rmv, Dims{4}, DType::Float64), rv = from_vec(rvv, Dims{4}, DType::Float64);
  auto w = from_vec(wv, Dims{4}, DType::Float32), b = from_vec(bv, Dims{4}, DType::Float32);
  auto y = noncontig(*empty(xs, DType::Float32));
  batch_norm_out(*x, w.get(), b.get(), rm.get(), rv.get(), false, 0.1, 1e-5, *y, nullptr, nullptr);
  std::vector<double> want(xv.size());
  for (size_t k = 0; k < xv.size(); ++k) {
    const int64_t c = (k / 25) % 4;
    want[k] = (xv[k] - rmv[c]) / std::sqrt(rvv[c] + 1e-5) * wv[c] + bv[c];
  }
  expect_close(to_vec(*y), want, 1e-5, 1e-5, "batch_norm eval");
  expect_close(to_vec(*rm), rmv, 0, 0, "running_mean untouched");
  // No affine parameters.
  batch_norm_out(*x, nullptr, nullptr, rm.get(), rv.get(), false, 0.1, 1e-5, *y, nullptr, nullptr);
  for (size_t k = 0; k < xv.size(); ++k) {
    const int64_t c = (k / 25) % 4;
    want[k] = (xv[k] - rmv[c]) / std::sqrt(rvv[c] + 1e-5);
  }
  expect_close(to_vec(*y), want, 1e-5, 1e-5, "batch_norm eval no affine");
}

TEST(Norm, BatchNormBackward) {
  for (Dims xs : {Dims{3, 2, 3, 4}, Dims{5, 3}, Dims{2, 3, 5}}) {
    const int64_t C = xs[1];
    for (bool training : {true, false}) {
      for (bool affine : {true, false}) {
        SCOPED_TRACE(testing::Message() << xs << " training " << training << " affine " << affine);
        auto xv = rand_vec(numel(xs), -1, 2), wv = rand_vec(C), bv = rand_vec(C),
             r = rand_vec(numel(xs));
        auto rmv = rand_vec(C), rvv = rand_vec(C, 0.5, 1.5);
        const double eps = 1e-5;
        auto rm = from_vec(rmv, Dims{C}, DType::Float64),
             rv = from_vec(rvv, Dims{C}, DType::Float64);
        // f(x), f(w), f(b) in float64 through the (verified) forward, running stats untouched.
        // f(x, w, b) in float64 through the (verified) forward; running stats are not updated.
        // Without affine parameters, grad_weight/grad_bias still describe d/dw at w=1 and d/db
        // at b=0, so the derivative is taken with that parameter switched on.
        auto fwd = [&](const std::vector<double>& xx, const std::vector<double>* ww,
                       const std::vector<double>* bb) {
          auto x = from_vec(xx, xs, DType::Float64);
          auto w = ww ? from_vec(*ww, Dims{C}, DType::Float64) : TensorImplPtr{};
          auto b = bb ? from_vec(*bb, Dims{C}, DType::Float64) : TensorImplPtr{};
          auto y = empty(xs, DType::Float64);
          batch_norm_out(*x, w.get(), b.get(), training ? nullptr : rm.get(),
                         training ? nullptr : rv.get(), training, 0.1, eps, *y, nullptr, nullptr);
          return to_vec(*y);
        };
        const std::vector<double> w1 = affine ? wv : std::vector<double>(C, 1.0);
        const std::vector<double> b0 = affine ? bv : std::vector<double>(C, 0.0);
        auto ngx = numeric_grad(
            xv,
            [&](const std::vector<double>& v) { return fwd(v, affine ? &wv : nullptr, nullptr); },
            r);
        auto ngw = numeric_grad(
            w1, [&](const std::vector<double>& v) { return fwd(xv, &v, nullptr); }, r);
        auto ngb = numeric_grad(
            b0, [&](const std::vector<double>& v) { return fwd(xv, affine ? &wv : nullptr, &v); },
            r);
        for (DType dt : {DType::Float64, DType::Float32}) {
          auto x = noncontig(*from_vec(xv, xs, dt));
          auto w = from_vec(wv, Dims{C}, dt);
          auto gy = from_vec(r, xs, dt);
          auto sm = empty(Dims{C}, DType::Float64), si = empty(Dims{C}, DType::Float64);
          auto y = empty(xs, dt);
          batch_norm_out(*x, affine ? w.get() : nullptr, nullptr, nullptr, nullptr, true, 0.1, eps,
                         *y, sm.get(), si.get());
          auto gx = noncontig(*empty(xs, dt));
          auto gw = empty(Dims{C}, dt), gb = empty(Dims{C}, dt);
          batch_norm_backward_out(*gy, *x, affine ? w.get() : nullptr, rm.get(), rv.get(), sm.get(),
                                  si.get(), training, eps, gx.get(), gw.get(), gb.get());
          const double tol = dt == DType::Float64 ? 1e-6 : 2e-4;
          expect_close(to_vec(*gx), ngx, tol, tol, "batch_norm grad_input");
          expect_close(to_vec(*gw), ngw, tol, tol, "batch_norm grad_weight");
          expect_close(to_vec(*gb), ngb, tol, tol, "batch_norm grad_bias");
        }
      }
    }
  }
}

TEST(Norm, BatchNormErrors) {
  auto x = zeros(Dims{1, 3}, DType::Float32);
  auto y = zeros(Dims{1, 3}, DType::Float32);
  expect_error(
      [&] {
        batch_norm_out(*x, nullptr, nullptr, nullptr, nullptr, true, 0.1, 1e-5, *y, nullptr,
                       nullptr);
      },
      {"batch_norm", "more than 1 value per channel", "[1, 3]"});
  expect_error(
      [&] {
        batch_norm_out(*x, nullptr, nullptr, nullptr, nullptr, false, 0.1, 1e-5, *y, nullptr,
                       nullptr);
      },
      {"batch_norm", "running_mean"});
  auto x2 = zeros(Dims{4, 3}, DType::Float32);
  auto y2 = zeros(Dims{4, 3}, DType::Float32);
  auto w = zeros(Dims{4}, DType::Float32);
  expect_error(
      [&] {
        batch_norm_out(*x2, w.get(), nullptr, nullptr, nullptr, true, 0.1, 1e-5, *y2, nullptr,
                       nullptr);
      },
      {"batch_norm", "weight of shape [3]", "got [4]"});
  auto x1 = zeros(Dims{4}, DType::Float32);
  expect_error(
      [&] {
        batch_norm_out(*x1, nullptr, nullptr, nullptr, nullptr, true, 0.1, 1e-5, *x1, nullptr,
                       nullptr);
      },
      {"batch_norm", "at least 2 dims"});
}

TEST(Norm, LayerNormForwardBackward) {
  struct C {
    Dims xs, ns;
  };
  for (const C& c : {C{Dims{3, 4, 10}, Dims{10}}, C{Dims{2, 3, 4, 5}, Dims{4, 5}},
                     C{Dims{5, 37}, Dims{37}}, C{Dims{6}, Dims{6}}, C{Dims{2, 70}, Dims{70}}}) {
    const int64_t D = numel(c.ns), M = numel(c.xs) / D;
    for (int affine = 0; affine < 4; ++affine) {  // bit 0: weight, bit 1: bias
      SCOPED_TRACE(testing::Message() << c.xs << " affine " << affine);
      const bool hw = affine & 1, hb = affine & 2;
      auto xv = rand_vec(numel(c.xs), 1.0, 3.0), wv = rand_vec(D), bv = rand_vec(D),
           r = rand_vec(numel(c.xs));
      const double eps = 1e-5;
      std::vector<double> want(xv.size()), mean(M), rstd(M);
      for (int64_t m = 0; m < M; ++m) {
        double s = 0, q = 0;
        for (int64_t i = 0; i < D; ++i) s += xv[m * D + i];
        mean[m] = s / D;
        for (int64_t i = 0; i < D; ++i) q += (xv[m * D + i] - mean[m]) * (xv[m * D + i] - mean[m]);
        rstd[m] = 1 / std::sqrt(q / D + eps);
        for (int64_t i = 0; i < D; ++i)
          want[m * D + i] =
              (xv[m * D + i] - mean[m]) * rstd[m] * (hw ? wv[i] : 1.0) + (hb ? bv[i] : 0.0);
      }
      auto fwd = [&](const std::vector<double>& xx, const std::vector<double>& ww,
                     const std::vector<double>& bb) {
        auto x = from_vec(xx, c.xs, DType::Float64);
        auto w = from_vec(ww, c.ns, DType::Float64), b = from_vec(bb, c.ns, DType::Float64);
        auto y = empty(c.xs, DType::Float64);
        layer_norm_out(*x, c.ns, hw ? w.get() : nullptr, hb ? b.get() : nullptr, eps, *y, nullptr,
                       nullptr);
        return to_vec(*y);
      };
      expect_close(fwd(xv, wv, bv), want, 1e-10, 1e-10, "layer_norm f64");
      auto ngx = numeric_grad(
          xv, [&](const std::vector<double>& v) { return fwd(v, wv, bv); }, r);
      auto ngw = numeric_grad(
          wv, [&](const std::vector<double>& v) { return fwd(xv, v, bv); }, r);
      auto ngb = numeric_grad(
          bv, [&](const std::vector<double>& v) { return fwd(xv, wv, v); }, r);
      for (DType dt : {DType::Float32, DType::Float64}) {
        auto x = noncontig(*from_vec(xv, c.xs, dt));
        auto w = from_vec(wv, c.ns, dt), b = from_vec(bv, c.ns, dt);
        auto y = empty(c.xs, dt);
        auto sshape = layer_norm_stats_shape(c.xs, c.ns);
        auto mu = empty(sshape, DType::Float32), rs = empty(sshape, DType::Float32);
        layer_norm_out(*x, c.ns, hw ? w.get() : nullptr, hb ? b.get() : nullptr, eps, *y, mu.get(),
                       rs.get());
        const double tol = dt == DType::Float64 ? 1e-6 : 2e-4;
        expect_close(to_vec(*y), want, tol, tol, "layer_norm");
        expect_close(to_vec(*mu), mean, 1e-5, 1e-5, "layer_norm mean");
        expect_close(to_vec(*rs), rstd, 1e-4, 1e-4, "layer_norm rstd");
        auto gy = noncontig(*from_vec(r, c.xs, dt), true);
        auto gx = empty(c.xs, dt), gw = empty(c.ns, dt), gb = empty(c.ns, dt);
        // Statistics in float64 so the float64 check is tight.
        auto mu64 = from_vec(mean, sshape, DType::Float64),
             rs64 = from_vec(rstd, sshape, DType::Float64);
        layer_norm_backward_out(*gy, *x, c.ns, *mu64, *rs64, hw ? w.get() : nullptr, gx.get(),
                                gw.get(), gb.get());
        expect_close(to_vec(*gx), ngx, tol, tol, "layer_norm grad_input");
        if (hw) expect_close(to_vec(*gw), ngw, tol, tol, "layer_norm grad_weight");
        if (hb) expect_close(to_vec(*gb), ngb, tol, tol, "layer_norm grad_bias");
      }
    }
  }
  expect_error(
      [] {
        layer_norm_stats_shape(Dims{2, 3, 5}, Dims{4, 5});
      },
      {"layer_norm", "trailing dims [4, 5]", "got [2, 3, 5]"});
}

TEST(Norm, GroupNormForwardBackward) {
  struct C {
    Dims xs;
    int64_t G;
  };
  for (const C& c : {C{Dims{2, 6, 4, 3}, 3}, C{Dims{3, 4, 5}, 1}, C{Dims{2, 4, 3, 3}, 4},
                     C{Dims{1, 8, 2, 5}, 2}, C{Dims{2, 6}, 2}}) {
    SCOPED_TRACE(testing::Message() << c.xs << " G" << c.G);
    const int64_t N = c.xs[0], C = c.xs[1], S = numel(c.xs) / (N * C), G = c.G, D = C / G * S;
    auto xv = rand_vec(numel(c.xs), -1, 3), wv = rand_vec(C), bv = rand_vec(C),
         r = rand_vec(numel(c.xs));
    const double eps = 1e-5;
    std::vector<double> want(xv.size()), mean(N * G), rstd(N * G);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t g = 0; g < G; ++g) {
        const int64_t base = (n * C + g * (C / G)) * S;
        double s = 0, q = 0;
        for (int64_t i = 0; i < D; ++i) s += xv[base + i];
        const double mu = s / D;
        for (int64_t i = 0; i < D; ++i) q += (xv[base + i] - mu) * (xv[base + i] - mu);
        mean[n * G + g] = mu;
        rstd[n * G + g] = 1 / std::sqrt(q / D + eps);
        for (int64_t i = 0; i < D; ++i) {
          const int64_t ch = g * (C / G) + i / S;
          want[base + i] = (xv[base + i] - mu) * rstd[n * G + g] * wv[ch] + bv[ch];
        }
      }
    auto fwd = [&](const std::vector<double>& xx, const std::vector<double>& ww,
                   const std::vector<double>& bb) {
      auto x = from_vec(xx, c.xs, DType::Float64);
      auto w = from_vec(ww, Dims{C}, DType::Float64), b = from_vec(bb, Dims{C}, DType::Float64);
      auto y = empty(c.xs, DType::Float64);
      group_norm_out(*x, G, w.get(), b.get(), eps, *y, nullptr, nullptr);
      return to_vec(*y);
    };
    expect_close(fwd(xv, wv, bv), want, 1e-10, 1e-10, "group_norm f64");
    auto ngx = numeric_grad(
        xv, [&](const std::vector<double>& v) { return fwd(v, wv, bv); }, r);
    auto ngw = numeric_grad(
        wv, [&](const std::vector<double>& v) { return fwd(xv, v, bv); }, r);
    auto ngb = numeric_grad(
        bv, [&](const std::vector<double>& v) { return fwd(xv, wv, v); }, r);
    for (DType dt : {DType::Float32, DType::Float64}) {
      auto x = noncontig(*from_vec(xv, c.xs, dt), true);
      auto w = from_vec(wv, Dims{C}, dt), b = from_vec(bv, Dims{C}, dt);
      auto y = empty(c.xs, dt);
      auto mu = empty(Dims{N, G}, DType::Float64), rs = empty(Dims{N, G}, DType::Float64);
      group_norm_out(*x, G, w.get(), b.get(), eps, *y, mu.get(), rs.get());
      const double tol = dt == DType::Float64 ? 1e-6 : 2e-4;
      expect_close(to_vec(*y), want, tol, tol, "group_norm");
      expect_close(to_vec(*mu), mean, 1e-5, 1e-5, "group_norm mean");
      expect_close(to_vec(*rs), rstd, 1e-4, 1e-4, "group_norm rstd");
      auto gy = from_vec(r, c.xs, dt);
      auto gx = noncontig(*empty(c.xs, dt)), gw = empty(Dims{C}, dt), gb = empty(Dims{C}, dt);
      group_norm_backward_out(*gy, *x, G, *mu, *rs, w.get(), gx.get(), gw.get(), gb.get());
      expect_close(to_vec(*gx), ngx, tol, tol, "group_norm grad_input");
      expect_close(to_vec(*gw), ngw, tol, tol, "group_norm grad_weight");
      expect_close(to_vec(*gb), ngb, tol, tol, "group_norm grad_bias");
    }
  }
  auto x = zeros(Dims{2, 6, 3}, DType::Float32);
  expect_error([&] { group_norm_out(*x, 4, nullptr, nullptr, 1e-5, *x, nullptr, nullptr); },
               {"group_norm", "divisible by num_groups"});
}

// Empty inputs whose other dims an artifact made huge: no statistics buffers sized by them (they
// once asked for 2 x 8 TiB), statistics outputs filled, and a group count beyond the channels
// refused.
TEST(Norm, EmptyInputsWithHugeDimsAllocateNothing) {
  const int64_t huge = int64_t(1) << 40;
  auto x = empty(Dims{huge, 0}, DType::Float32), y = empty(Dims{huge, 0}, DType::Float32);
  layer_norm_out(*x, Dims{0}, nullptr, nullptr, 1e-5, *y, nullptr, nullptr);
  group_norm_out(*x, 1, nullptr, nullptr, 1e-5, *y, nullptr, nullptr);
  auto xt = empty(Dims{0, huge}, DType::Float32), yt = empty(Dims{0, huge}, DType::Float32);
  batch_norm_out(*xt, nullptr, nullptr, nullptr, nullptr, true, 0.1, 1e-5, *yt, nullptr, nullptr);

  auto x3 = empty(Dims{3, 0, 5}, DType::Float32), y3 = empty(Dims{3, 0, 5}, DType::Float32);
  auto mean = from_vec({7, 7, 7}, Dims{3}, DType::Float32);
  auto rstd = from_vec({7, 7, 7}, Dims{3}, DType::Float32);
  group_norm_out(*x3, 1, nullptr, nullptr, 0.25, *y3, mean.get(), rstd.get());
  expect_close(to_vec(*mean), {0, 0, 0}, 0, 0, "group_norm mean of nothing");
  expect_close(to_vec(*rstd), {2, 2, 2}, 0, 0, "group_norm rstd = 1/sqrt(eps)");
  auto xl = empty(Dims{2, 0}, DType::Float32), yl = empty(Dims{2, 0}, DType::Float32);
  auto lm = from_vec({7, 7}, Dims{2, 1}, DType::Float32);
  auto lr = from_vec({7, 7}, Dims{2, 1}, DType::Float32);
  layer_norm_out(*xl, Dims{0}, nullptr, nullptr, 1e-5, *yl, lm.get(), lr.get());
  for (double v : to_vec(*lm)) EXPECT_TRUE(std::isnan(v)) << "layer_norm mean is 0/0";
  for (double v : to_vec(*lr)) EXPECT_TRUE(std::isnan(v)) << "layer_norm rstd is 0/0";

  auto x0 = empty(Dims{1, 0}, DType::Float32), y0 = empty(Dims{1, 0}, DType::Float32);
  expect_error([&] { group_norm_out(*x0, 2, nullptr, nullptr, 1e-5, *y0, nullptr, nullptr); },
               {"group_norm", "num_groups (2)"});
}

TEST(Norm, LargeRowsUseVectorPaths) {
  // Long rows (> 2048 elements, several flushes of the float accumulators) and both thread counts.
  const int saved = num_threads();
  for (int nt : {1, 2}) {
    set_num_threads(nt);
    const Dims xs{3, 5, 41, 53};
    auto xv = rand_vec(numel(xs), 5.0, 7.0);
    auto x = from_vec(xv, xs, DType::Float32);
    auto y = empty(xs, DType::Float32);
    auto sm = empty(Dims{5}, DType::Float64), si = empty(Dims{5}, DType::Float64);
    batch_norm_out(*x, nullptr, nullptr, nullptr, nullptr, true, 0.1, 1e-5, *y, sm.get(), si.get());
    std::vector<double> mean, var;
    ref_bn_stats(xv, 3, 5, 41 * 53, mean, var);
    expect_close(to_vec(*sm), mean, 1e-6, 1e-6, "mean");
    std::vector<double> is(5);
    for (int c = 0; c < 5; ++c) is[c] = 1 / std::sqrt(var[c] + 1e-5);
    expect_close(to_vec(*si), is, 1e-4, 1e-4, "invstd");
  }
  set_num_threads(saved);
}
