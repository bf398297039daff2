// conv2d / conv1d / conv_transpose2d against naive float64 loops written here; backward against a
// naive float64 backward and against finite differences.
#include <gtest/gtest.h>

#include <limits>

#include "kiln/runtime/kernels/conv.h"
#include "kiln/runtime/target.h"
#include "kiln/runtime/thread_pool.h"
#include "nn_test_util.h"

using namespace kiln;
using namespace kiln::kernels;
using namespace nn_test;

namespace {

struct Case {
  int64_t N, C, H, W, O, KH, KW;
  Conv2dParams p;
};

Conv2dParams P(int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh = 1, int64_t dw = 1,
               int64_t g = 1) {
  Conv2dParams p;
  p.stride_h = sh, p.stride_w = sw, p.pad_h = ph, p.pad_w = pw, p.dilation_h = dh,
  p.dilation_w = dw, p.groups = g;
  return p;
}

int64_t ext(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

// Naive conv2d in float64: y[n,o,oh,ow] = b[o] + Σ x[n, g*Cg+c, oh*s-p+kh*d, ...] w[o,c,kh,kw].
std::vector<double> ref_conv2d(const Case& c, const std::vector<double>& x,
                               const std::vector<double>& w, const std::vector<double>* b) {
  const auto& p = c.p;
  const int64_t Ho = ext(c.H, c.KH, p.stride_h, p.pad_h, p.dilation_h);
  const int64_t Wo = ext(c.W, c.KW, p.stride_w, p.pad_w, p.dilation_w);
  const int64_t Cg = c.C / p.groups, Og = c.O / p.groups;
  std::vector<double> y(static_cast<size_t>(c.N * c.O * Ho * Wo));
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t o = 0; o < c.O; ++o)
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          double acc = b ? (*b)[o] : 0.0;
          const int64_t grp = o / Og;
          for (int64_t ci = 0; ci < Cg; ++ci)
            for (int64_t kh = 0; kh < c.KH; ++kh)
              for (int64_t kw = 0; kw < c.KW; ++kw) {
                const int64_t ih = oh * p.stride_h - p.pad_h + kh * p.dilation_h;
                const int64_t iw = ow * p.stride_w - p.pad_w + kw * p.dilation_w;
                if (ih < 0 || ih >= c.H || iw < 0 || iw >= c.W) continue;
                acc += x[((n * c.C + grp * Cg + ci) * c.H + ih) * c.W + iw] *
                       w[((o * Cg + ci) * c.KH + kh) * c.KW + kw];
              }
          y[((n * c.O + o) * Ho + oh) * Wo + ow] = acc;
        }
  return y;
}

// Naive backward in float64 (scatter form of the same sum).
void ref_conv2d_backward(const Case& c, const std::vector<double>& x, const std::vector<double>& w,
                         const std::vector<double>& gy, std::vector<double>& gx,
                         std::vector<double>& gw, std::vector<double>& gb) {
  const auto& p = c.p;
  const int64_t Ho = ext(c.H, c.KH, p.stride_h, p.pad_h, p.dilation_h);
  const int64_t Wo = ext(c.W, c.KW, p.stride_w, p.pad_w, p.dilation_w);
  const int64_t Cg = c.C / p.groups, Og = c.O / p.groups;
  gx.assign(x.size(), 0.0);
  gw.assign(w.size(), 0.0);
  gb.assign(static_cast<size_t>(c.O), 0.0);
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t o = 0; o < c.O; ++o)
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          const double g = gy[((n * c.O + o) * Ho + oh) * Wo + ow];
          gb[o] += g;
          const int64_t grp = o / Og;
          for (int64_t ci = 0; ci < Cg; ++ci)
            for (int64_t kh = 0; kh < c.KH; ++kh)
              for (int64_t kw = 0; kw < c.KW; ++kw) {
                const int64_t ih = oh * p.stride_h - p.pad_h + kh * p.dilation_h;
                const int64_t iw = ow * p.stride_w - p.pad_w + kw * p.dilation_w;
                if (ih < 0 || ih >= c.H || iw < 0 || iw >= c.W) continue;
                const int64_t xi = ((n * c.C + grp * Cg + ci) * c.H + ih) * c.W + iw;
                const int64_t wi = ((o * Cg + ci) * c.KH + kh) * c.KW + kw;
                gx[xi] += g * w[wi];
                gw[wi] += g * x[xi];
              }
        }
}

std::vector<Case> forward_cases() {
  return {
      {1, 3, 7, 7, 4, 3, 3, P(1, 1, 1, 1)},
      {2, 3, 9, 8, 5, 3, 3, P(2, 2, 1, 1)},
      {2, 4, 11, 13, 6, 5, 3, P(2, 1, 2, 0)},           // asymmetric kernel/stride/pad
      {1, 5, 10, 9, 3, 3, 3, P(1, 1, 2, 2, 2, 2)},      // dilation
      {2, 4, 8, 8, 4, 3, 3, P(1, 2, 0, 1, 2, 1)},       // mixed dilation
      {2, 8, 7, 6, 6, 1, 1, P(1, 1, 0, 0)},             // 1x1 direct GEMM
      {2, 8, 9, 9, 6, 1, 1, P(2, 2, 0, 0)},             // 1x1 stride 2 (downsample)
      {1, 6, 5, 5, 4, 1, 1, P(1, 1, 1, 1)},             // 1x1 with padding
      {3, 6, 8, 7, 9, 3, 3, P(1, 1, 1, 1, 1, 1, 3)},    // groups
      {2, 4, 9, 9, 8, 3, 2, P(2, 1, 1, 0, 1, 1, 2)},    // groups, O != C
      {2, 6, 10, 11, 6, 3, 3, P(1, 1, 1, 1, 1, 1, 6)},  // depthwise 3x3 s1
      {2, 5, 11, 12, 5, 3, 3, P(2, 2, 1, 1, 1, 1, 5)},  // depthwise 3x3 s2
      {1, 4, 40, 37, 4, 3, 3, P(1, 1, 1, 1, 1, 1, 4)},  // depthwise, 37 wide (interleaved 3x3)
      {1, 3, 23, 45, 3, 3, 3, P(2, 2, 0, 1, 1, 1, 3)},  // depthwise s2, odd pad
      {2, 3, 12, 13, 3, 5, 5, P(1, 1, 2, 2, 1, 1, 3)},  // depthwise 5x5
      {1, 4, 13, 14, 4, 3, 3, P(3, 3, 1, 2, 2, 2, 4)},  // depthwise stride 3 dilation 2
      {1, 3, 9, 9, 3, 3, 3, P(1, 2, 3, 3, 1, 1, 3)},    // depthwise, pad larger than half kernel
      {1, 9, 8, 5, 9, 3, 3, P(1, 1, 1, 1, 1, 1, 9)},    // depthwise, rows of 5: whole steps of 4
      {2, 9, 1, 1, 9, 3, 3, P(1, 1, 1, 1, 1, 1, 9)},    // depthwise, a single output pixel
      {1, 5, 9, 90, 5, 3, 3, P(2, 2, 1, 1, 1, 1, 5)},   // depthwise s2, 45 wide (interleaved)
      {1, 3, 6, 150, 3, 3, 3, P(1, 1, 1, 1, 1, 1, 3)},  // depthwise, 150 wide (vector body)
      {1, 5, 99, 90, 5, 3, 3, P(2, 2, 1, 1, 1, 1, 5)},  // depthwise s2, 5 bands of 10 rows
      {1, 8, 99, 20, 8, 3, 3, P(1, 1, 1, 1, 1, 1, 8)},  // depthwise, 2 bands
      {1, 3, 99, 30, 3, 5, 5, P(1, 1, 2, 2, 1, 1, 3)},  // depthwise 5x5, 2 bands
      {1, 2, 6, 6, 6, 3, 3, P(1, 1, 1, 1, 1, 1, 2)},    // channel multiplier (not depthwise path)
      {1, 3, 1, 1, 2, 1, 1, P(1, 1, 0, 0)},             // 1x1 image
      {2, 3, 5, 5, 4, 5, 5, P(1, 1, 0, 0)},             // kernel == input
      {1, 3, 30, 33, 8, 7, 7, P(2, 2, 3, 3)},           // 7x7/2 stem-like
  };
}

TensorImplPtr make_out(const Case& c, DType dt) {
  return empty(
      conv2d_output_shape(Dims{c.N, c.C, c.H, c.W}, Dims{c.O, c.C / c.p.groups, c.KH, c.KW}, c.p),
      dt);
}

// tol: relative and absolute tolerance, or for float16/bfloat16 the ulps of the output dtype
// (the reference then reads the inputs as rounded to that dtype, so only the kernel's
// accumulation and the output's rounding differ).
void run_forward_case(const Case& c, DType dt, bool nc, bool with_bias, double tol) {
  SCOPED_TRACE(testing::Message() << "N" << c.N << " C" << c.C << " " << c.H << "x" << c.W << " O"
                                  << c.O << " k" << c.KH << "x" << c.KW << " s" << c.p.stride_h
                                  << "," << c.p.stride_w << " p" << c.p.pad_h << "," << c.p.pad_w
                                  << " d" << c.p.dilation_h << "," << c.p.dilation_w << " g"
                                  << c.p.groups << " nc" << nc);
  const Dims xs{c.N, c.C, c.H, c.W}, ws{c.O, c.C / c.p.groups, c.KH, c.KW};
  auto xv = rand_vec(numel(xs)), wv = rand_vec(numel(ws)), bv = rand_vec(c.O);
  auto x = from_vec(xv, xs, dt), w = from_vec(wv, ws, dt), b = from_vec(bv, Dims{c.O}, dt);
  const bool narrow = dt == DType::Float16 || dt == DType::BFloat16;
  if (narrow) xv = to_vec(*x), wv = to_vec(*w), bv = to_vec(*b);
  if (nc) {
    x = noncontig(*x);
    w = noncontig(*w, true);
  }
  auto y = make_out(c, dt);
  if (nc) y = noncontig(*y);
  conv2d_out(*x, *w, with_bias ? b.get() : nullptr, c.p, *y);
  auto want = ref_conv2d(c, xv, wv, with_bias ? &bv : nullptr);
  if (narrow) {
    // 1e-6 absolute: float32 accumulation of ~30 products of magnitude <= 1, far below the
    // output's ulp except for sums that cancel to near zero.
    expect_within_ulps(to_vec(*y), want, dt, tol, 1e-6, "conv2d");
  } else {
    expect_close(to_vec(*y), want, tol, tol, "conv2d");
  }
}

}  // namespace

TEST(Conv, Conv2dForwardFloat32) {
  for (const auto& c : forward_cases()) run_forward_case(c, DType::Float32, false, true, 1e-4);
}

TEST(Conv, Conv2dForwardNonContiguous) {
  for (const auto& c : forward_cases()) run_forward_case(c, DType::Float32, true, false, 1e-4);
}

TEST(Conv, Conv2dForwardFloat64) {
  for (const auto& c : forward_cases()) run_forward_case(c, DType::Float64, false, true, 1e-12);
}

TEST(Conv, Conv2dForwardHalfAndBFloat16) {
  const Case c{2, 4, 6, 7, 3, 3, 3, P(1, 1, 1, 1)};
  // Within one ulp of the output dtype: one rounding of a float32 sum.
  run_forward_case(c, DType::Float16, false, true, 1.0);
  run_forward_case(c, DType::BFloat16, false, true, 1.0);
  const Case dw{1, 4, 9, 9, 4, 3, 3, P(2, 2, 1, 1, 1, 1, 4)};
  run_forward_case(dw, DType::Float16, false, true, 1.0);
  run_forward_case(dw, DType::BFloat16, false, true, 1.0);
}

TEST(Conv, Conv2dForwardSingleThreadAndBatchParallel) {
  // Exercise both threading strategies: units in parallel (large batch) and serial units with
  // parallel im2col + GEMM (batch 1, large image: several column tiles).
  const int saved = num_threads();
  for (int nt : {1, 2}) {
    set_num_threads(nt);
    run_forward_case({8, 3, 9, 9, 4, 3, 3, P(1, 1, 1, 1)}, DType::Float32, false, true, 1e-4);
    run_forward_case({1, 24, 40, 40, 4, 3, 3, P(1, 1, 1, 1)}, DType::Float32, false, true, 1e-4);
    run_forward_case({1, 64, 30, 30, 2, 3, 3, P(1, 1, 1, 1)}, DType::Float32, false, true, 1e-4);
    run_forward_case({6, 8, 20, 20, 8, 3, 3, P(1, 1, 1, 1, 1, 1, 8)}, DType::Float32, false, true,
                     1e-4);
  }
  set_num_threads(saved);
}

TEST(Conv, Conv2dEpilogueResidualActivation) {
  struct E {
    Activation a;
    float lo, hi;
  };
  const std::vector<E> acts = {{Activation::Relu, 0, 0},
                               {Activation::Relu6, 0, 0},
                               {Activation::Clamp, -0.5f, 0.7f},
                               {Activation::Gelu, 0, 0},
                               {Activation::Sigmoid, 0, 0}};
  for (const Case& c :
       {Case{2, 4, 9, 10, 6, 3, 3, P(1, 1, 1, 1)}, Case{1, 8, 7, 7, 5, 1, 1, P(1, 1, 0, 0)},
        Case{2, 6, 13, 21, 6, 3, 3, P(1, 1, 1, 1, 1, 1, 6)},
        Case{1, 6, 13, 21, 6, 3, 3, P(2, 2, 1, 1, 1, 1, 6)}}) {
    for (DType dt : {DType::Float32, DType::Float64}) {
      for (const E& e : acts) {
        const Dims xs{c.N, c.C, c.H, c.W}, ws{c.O, c.C / c.p.groups, c.KH, c.KW};
        auto xv = rand_vec(numel(xs), -2, 2), wv = rand_vec(numel(ws)), bv = rand_vec(c.O);
        auto x = from_vec(xv, xs, dt), w = from_vec(wv, ws, dt), b = from_vec(bv, Dims{c.O}, dt);
        auto y = make_out(c, dt);
        auto rv = rand_vec(y->numel());
        auto r = noncontig(*from_vec(rv, y->sizes(), dt));
        ConvEpilogue ep;
        ep.residual = r.get();
        ep.activation = e.a;
        ep.clamp_min = e.lo;
        ep.clamp_max = e.hi;
        conv2d_out(*x, *w, b.get(), c.p, *y, ep);
        auto want = ref_conv2d(c, xv, wv, &bv);
        for (size_t i = 0; i < want.size(); ++i) {
          const double v = want[i] + rv[i];
          switch (e.a) {
            case Activation::Relu:
              want[i] = std::max(v, 0.0);
              break;
            case Activation::Relu6:
              want[i] = std::min(std::max(v, 0.0), 6.0);
              break;
            case Activation::Clamp:
              want[i] = std::min(std::max(v, -0.5), 0.7);
              break;
            case Activation::Gelu:
              want[i] = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
              break;
            case Activation::Sigmoid:
              want[i] = 1 / (1 + std::exp(-v));
              break;
            default:
              want[i] = v;
          }
        }
        expect_close(to_vec(*y), want, 1e-4, 1e-4, "conv2d epilogue");
      }
    }
  }
}

namespace {

// conv2d_out with a weight prepared for `prepared_for` input sizes, against the float64 reference
// (bias, residual and activation included): max |error| <= tol * max |y|. Returns the algorithm
// the preparation chose.
std::string run_prepared_case(const Case& c, Dims prepared_for, Activation act, bool residual,
                              double tol) {
  SCOPED_TRACE(testing::Message() << "N" << c.N << " C" << c.C << " " << c.H << "x" << c.W << " O"
                                  << c.O << " k" << c.KH << " s" << c.p.stride_h << " p"
                                  << c.p.pad_h << " g" << c.p.groups << " act" << int(act));
  const Dims xs{c.N, c.C, c.H, c.W}, ws{c.O, c.C / c.p.groups, c.KH, c.KW};
  auto xv = rand_vec(numel(xs)), wv = rand_vec(numel(ws)), bv = rand_vec(c.O);
  auto x = from_vec(xv, xs, DType::Float32), w = from_vec(wv, ws, DType::Float32);
  auto b = from_vec(bv, Dims{c.O}, DType::Float32);
  auto prepared = prepare_conv2d_weight(*w, c.p, prepared_for);
  auto y = make_out(c, DType::Float32);
  auto rv = rand_vec(y->numel());
  auto r = from_vec(rv, y->sizes(), DType::Float32);
  ConvEpilogue ep;
  ep.activation = act;
  ep.clamp_min = -0.5f, ep.clamp_max = 0.75f;
  if (residual) ep.residual = r.get();
  conv2d_out(*x, *w, b.get(), c.p, *y, ep, prepared.get());
  auto want = ref_conv2d(c, xv, wv, &bv);
  for (size_t i = 0; i < want.size(); ++i) {
    double v = want[i] + (residual ? rv[i] : 0.0);
    if (act == Activation::Relu) v = std::max(v, 0.0);
    if (act == Activation::Relu6) v = std::min(std::max(v, 0.0), 6.0);
    if (act == Activation::Clamp) v = std::min(std::max(v, -0.5), 0.75);
    if (act == Activation::Sigmoid) v = 1 / (1 + std::exp(-v));
    want[i] = v;
  }
  // Errors relative to the output's scale (max |y|): sums of C*9 terms reach |y| ~ sqrt(C*9)/3,
  // and Winograd's transforms add rounding in proportion to that scale, not to each element.
  double scale = 0.0, err = 0.0;
  const std::vector<double> got = to_vec(*y);
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::abs(want[i]));
    err = std::max(err, std::abs(got[i] - want[i]));
  }
  EXPECT_LE(err, tol * std::max(scale, 1.0)) << "max |error| / max |y| = " << err / scale;
  return prepared ? prepared->algorithm() : "none";
}

}  // namespace

// Weights prepared once (packed for the GEMM, or Winograd-transformed) give the reference result
// for every geometry the plain kernel handles.
TEST(Conv, Conv2dPreparedMatchesReference) {
  const int saved = num_threads();
  for (int nt : {1, 2}) {
    set_num_threads(nt);
    for (const Case& c : forward_cases()) {
      const std::string algo =
          run_prepared_case(c, Dims{c.N, c.C, c.H, c.W}, Activation::None, false, 1e-4);
      const bool depthwise = c.p.groups == c.C && c.p.groups == c.O && c.p.groups > 1;
      if (depthwise) EXPECT_EQ(algo, "none");
    }
  }
  set_num_threads(saved);
}

// Winograd F(4x4, 3x3): output sizes that are not multiples of 4, paddings 0..2, channel counts
// that leave ragged microkernel slivers, K blocks (C > the GEMM's KC), several tile blocks, and
// every epilogue.
TEST(Conv, Conv2dWinogradMatchesReference) {
  const int saved = num_threads();
  const std::vector<Case> cases = {
      {2, 20, 13, 11, 14, 3, 3, P(1, 1, 1, 1)},   // ragged tiles and slivers
      {1, 16, 16, 16, 16, 3, 3, P(1, 1, 0, 0)},   // no padding
      {3, 9, 10, 17, 13, 3, 3, P(1, 1, 2, 2)},    // pad 2
      {2, 400, 9, 9, 24, 3, 3, P(1, 1, 1, 1)},    // C > KC: two K blocks
      {2, 256, 30, 30, 12, 3, 3, P(1, 1, 1, 1)},  // several blocks of tile rows
      {1, 8, 40, 70, 8, 3, 3, P(1, 1, 1, 1)},     // wide rows: several 8-tile vectors
  };
  for (int nt : {1, 2}) {
    set_num_threads(nt);
    for (const Case& c : cases)
      EXPECT_EQ(run_prepared_case(c, Dims{c.N, c.C, c.H, c.W}, Activation::None, false, 1e-4),
                "winograd");
    const Case c = cases[0];
    for (Activation a :
         {Activation::Relu, Activation::Relu6, Activation::Clamp, Activation::Sigmoid})
      for (bool res : {false, true})
        EXPECT_EQ(run_prepared_case(c, Dims{c.N, c.C, c.H, c.W}, a, res, 1e-4), "winograd");
  }
  set_num_threads(saved);
}

// Small feature maps with many channels: the weight is packed as the GEMM's right operand (output
// channels across the vector lanes) and the product transposed back, with the residual and the
// activation applied in that pass. 7x7 maps, 3x3 / 1x1 / stride 2 / groups, ragged 8x8 edges.
// The choice depends on the microkernel's lanes and on the conv tile (the target's L2): under an
// explicit description the shapes choose this layout for 12 and 16 lanes (NEON, AVX2, portable);
// every ISA this CPU has runs them and is checked against the reference, whichever layout it
// chose (32 lanes fill 48 channels at 0.75 and may keep the positions across them).
TEST(Conv, Conv2dPreparedChannelsAcrossLanes) {
  const int saved = num_threads();
  const GemmIsa saved_isa = sgemm_isa();
  const rt::TargetDescription saved_target = rt::active_target();
  rt::set_active_target(
      rt::parse_target(rt::host_target().features.neon ? "neoverse-n1" : "znver3"));
  const std::vector<Case> cases = {
      {2, 24, 7, 7, 96, 3, 3, P(1, 1, 1, 1)},            // too few tiles for Winograd
      {1, 40, 7, 7, 96, 1, 1, P(1, 1, 0, 0)},            // 1x1: the input block is the operand
      {3, 32, 13, 14, 96, 3, 3, P(2, 2, 1, 1)},          // stride 2 -> 7x7
      {2, 48, 14, 14, 96, 1, 1, P(2, 2, 0, 0)},          // 1x1 stride 2: rows gathered from planes
      {1, 32, 28, 28, 96, 3, 3, P(2, 2, 1, 1)},          // 196 positions: tiles on 2 threads
      {1, 8, 40, 40, 48, 5, 5, P(1, 1, 2, 2)},           // 1600 positions: several tiles
      {1, 24, 20, 18, 96, 3, 3, P(1, 2, 2, 1, 2, 1)},    // dilated rows, strided columns
      {1, 64, 7, 7, 192, 3, 3, P(1, 1, 1, 1, 1, 1, 2)},  // two groups of 96 channels
      {2, 16, 5, 5, 60, 1, 1, P(1, 1, 0, 0)},            // 25 positions, 60 channels (ragged 8x8)
  };
  for (GemmIsa isa : {GemmIsa::Avx512, GemmIsa::Avx2, GemmIsa::Neon, GemmIsa::Scalar}) {
    if (!sgemm_isa_available(isa)) continue;
    set_sgemm_isa(isa);
    SCOPED_TRACE(gemm_isa_name(isa));
    for (int nt : {1, 2}) {
      set_num_threads(nt);
      for (const Case& c : cases) {
        const std::string algo =
            run_prepared_case(c, Dims{c.N, c.C, c.H, c.W}, Activation::None, false, 1e-5);
        if (isa != GemmIsa::Avx512) EXPECT_EQ(algo, "gemm-ch");
        for (Activation a : {Activation::Relu, Activation::Clamp, Activation::Sigmoid})
          for (bool res : {false, true})
            EXPECT_EQ(run_prepared_case(c, Dims{c.N, c.C, c.H, c.W}, a, res, 1e-5), algo);
      }
    }
  }
  set_sgemm_isa(saved_isa);
  rt::set_active_target(saved_target);
  set_num_threads(saved);
}

// Few input channels (image stems): the direct kernel (conv_detail::direct_conv2d_f32), prepared
// and not, on one and two threads: both strides, odd widths (masked last vectors of tiles of 1, 2
// and 3 vectors), channel counts that leave a partial block of 4, paddings wider than the kernel,
// several bands of rows, batches whose rows the pool splits mid-image, and every epilogue.
TEST(Conv, Conv2dDirectFewInputChannels) {
  const int saved = num_threads();
  const std::vector<Case> cases = {
      {1, 3, 40, 41, 32, 3, 3, P(2, 2, 1, 1)},  // MobileNetV2's stem: 21 wide, 20 rows
      {2, 3, 37, 66, 9, 7, 7, P(2, 2, 3, 3)},   // ResNet's stem: 33 wide, partial block
      {3, 1, 19, 16, 4, 3, 3, P(1, 1, 1, 1)},   // one channel, 16 wide, rows split mid-image
      {1, 4, 35, 60, 6, 3, 2, P(1, 2, 0, 0)},   // even kernel width, no padding, 30 wide
      {1, 2, 23, 29, 5, 5, 3, P(2, 1, 4, 4)},   // padding wider than the kernel, 35 wide
      {2, 3, 9, 100, 7, 3, 3, P(1, 2, 1, 0)},   // 49 wide: 2 whole tiles and a 1-lane vector
  };
  for (int nt : {1, 2}) {
    set_num_threads(nt);
    for (const Case& c : cases) {
      EXPECT_EQ(run_prepared_case(c, Dims{c.N, c.C, c.H, c.W}, Activation::None, false, 1e-5),
                "direct");
      run_forward_case(c, DType::Float32, false, true, 1e-4);  // not prepared
      run_forward_case(c, DType::Float32, true, false, 1e-4);  // strided input
      for (Activation a :
           {Activation::Relu, Activation::Relu6, Activation::Clamp, Activation::Sigmoid})
        for (bool res : {false, true})
          EXPECT_EQ(run_prepared_case(c, Dims{c.N, c.C, c.H, c.W}, a, res, 1e-5), "direct");
    }
  }
  set_num_threads(saved);
}

// Depthwise convs with each activation, with and without a residual: narrow outputs (the
// channel-interleaved path, which applies a vector activation before its transpose back) and
// wide ones.
TEST(Conv, Conv2dDepthwiseActivations) {
  for (const Case& c : {Case{2, 12, 14, 14, 12, 3, 3, P(1, 1, 1, 1, 1, 1, 12)},
                        Case{1, 9, 15, 13, 9, 3, 3, P(2, 2, 1, 1, 1, 1, 9)},
                        Case{1, 4, 40, 70, 4, 3, 3, P(1, 1, 1, 1, 1, 1, 4)},
                        Case{1, 4, 5, 140, 4, 3, 3, P(1, 1, 1, 1, 1, 1, 4)}})
    for (Activation a :
         {Activation::Relu, Activation::Relu6, Activation::Clamp, Activation::Sigmoid})
      for (bool res : {false, true})
        EXPECT_EQ(run_prepared_case(c, Dims{c.N, c.C, c.H, c.W}, a, res, 1e-5), "none");
}

// The input size at preparation picks the algorithm; other sizes still run correctly with it,
// and a prepared weight that does not fit the call (other shape or parameters) is ignored.
TEST(Conv, Conv2dPreparedOtherSizesAndMismatches) {
  const Case c{2, 12, 11, 14, 10, 3, 3, P(1, 1, 1, 1)};
  EXPECT_EQ(run_prepared_case(c, Dims{1, 12, 32, 32}, Activation::Relu, true, 1e-4), "winograd");
  EXPECT_EQ(run_prepared_case(c, Dims{1, 12, 3, 3}, Activation::Relu, true, 1e-4), "gemm");
  const Case s2{2, 12, 11, 14, 10, 3, 3, P(2, 2, 1, 1)};
  EXPECT_EQ(run_prepared_case(s2, Dims{1, 12, 32, 32}, Activation::None, false, 1e-4), "gemm");
  // A stem prepared for the direct kernel at 64x64, run on a 9x9 image (5 output columns, below
  // the direct kernel's 16): the raw weight through im2col + GEMM.
  const Case stem{2, 3, 9, 9, 8, 3, 3, P(2, 2, 1, 1)};
  EXPECT_EQ(run_prepared_case(stem, Dims{1, 3, 64, 64}, Activation::Relu6, true, 1e-5), "direct");

  auto x = rand_tensor(Dims{1, 12, 11, 14}), w = rand_tensor(Dims{10, 12, 3, 3});
  auto other = rand_tensor(Dims{10, 12, 3, 3});
  auto y = empty(Dims{1, 10, 11, 14}, DType::Float32);
  auto want = empty(Dims{1, 10, 11, 14}, DType::Float32);
  conv2d_out(*x, *w, nullptr, P(1, 1, 1, 1), *want);
  // Prepared for stride 2: does not fit a stride-1 call, so the plain path runs.
  auto s2_prep = prepare_conv2d_weight(*other, P(2, 2, 1, 1), Dims{1, 12, 11, 14});
  conv2d_out(*x, *w, nullptr, P(1, 1, 1, 1), *y, {}, s2_prep.get());
  expect_close(to_vec(*y), to_vec(*want), 0, 0, "mismatched prepared weight");
  // Other dtypes and depthwise convs have nothing to prepare.
  EXPECT_EQ(prepare_conv2d_weight(*rand_tensor(Dims{4, 3, 3, 3}, DType::Float64), P(1, 1, 1, 1),
                                  Dims{1, 3, 8, 8}),
            nullptr);
  EXPECT_EQ(prepare_conv2d_weight(*rand_tensor(Dims{4, 1, 3, 3}), P(1, 1, 1, 1, 1, 1, 4),
                                  Dims{1, 4, 8, 8}),
            nullptr);
  expect_error(
      [&] {
        prepare_conv2d_weight(*w, P(1, 1, 1, 1), Dims{1, 5, 8, 8});
      },
      {"conv2d", "channels"});
}

TEST(Conv, Conv2dEmptyBatch) {
  auto x = empty(Dims{0, 3, 5, 5}, DType::Float32);
  auto w = rand_tensor(Dims{4, 3, 3, 3});
  auto y = empty(conv2d_output_shape(x->sizes(), w->sizes(), P(1, 1, 1, 1)), DType::Float32);
  EXPECT_EQ(y->sizes(), (Dims{0, 4, 5, 5}));
  conv2d_out(*x, *w, nullptr, P(1, 1, 1, 1), *y);
  auto gx = empty(x->sizes(), DType::Float32);
  auto gw = empty(w->sizes(), DType::Float32);
  conv2d_backward_out(*y, *x, *w, P(1, 1, 1, 1), gx.get(), gw.get(), nullptr);
  for (double v : to_vec(*gw)) EXPECT_EQ(v, 0.0);
}

TEST(Conv, Conv2dErrors) {
  auto x2 = empty(Dims{100, 100}, DType::Float32);
  auto w = empty(Dims{4, 3, 3, 3}, DType::Float32);
  try {
    conv2d_output_shape(x2->sizes(), w->sizes(), Conv2dParams{});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "conv2d: expected input of 4 dims (N,C,H,W), got [100, 100]");
  }
  auto x = empty(Dims{1, 5, 8, 8}, DType::Float32);
  auto y = empty(Dims{1, 4, 6, 6}, DType::Float32);
  expect_error([&] { conv2d_out(*x, *w, nullptr, Conv2dParams{}, *y); },
               {"conv2d", "channels", "got 5"});
  expect_error(
      [&] {
        conv2d_output_shape(Dims{1, 6, 8, 8}, Dims{4, 2, 3, 3}, P(1, 1, 0, 0, 1, 1, 4));
      },
      {"conv2d", "divisible by groups"});
  expect_error(
      [&] {
        conv2d_output_shape(Dims{1, 6, 8, 8}, Dims{6, 1, 3, 3}, P(1, 1, 0, 0, 1, 1, 4));
      },
      {"conv2d", "divisible by groups"});
  expect_error(
      [&] {
        conv2d_output_shape(Dims{1, 3, 2, 2}, Dims{4, 3, 3, 3}, Conv2dParams{});
      },
      {"conv2d", "dilated kernel"});
  expect_error(
      [&] {
        conv2d_output_shape(Dims{1, 3, 8, 8}, Dims{4, 3, 3}, Conv2dParams{});
      },
      {"conv2d", "weight of 4 dims"});
  expect_error(
      [&] {
        conv2d_output_shape(Dims{1, 3, 8, 8}, Dims{4, 3, 3, 3}, P(0, 1, 0, 0));
      },
      {"conv2d", "stride"});
  auto xi = zeros(Dims{1, 3, 8, 8}, DType::Int64);
  auto wi = zeros(Dims{4, 3, 3, 3}, DType::Int64);
  auto yi = zeros(Dims{1, 4, 6, 6}, DType::Int64);
  expect_error([&] { conv2d_out(*xi, *wi, nullptr, Conv2dParams{}, *yi); },
               {"conv2d", "floating dtype", "int64"});
  auto x3 = empty(Dims{1, 3, 8, 8}, DType::Float32);
  auto wd = empty(Dims{4, 3, 3, 3}, DType::Float64);
  expect_error([&] { conv2d_out(*x3, *wd, nullptr, Conv2dParams{}, *y); },
               {"conv2d", "weight of dtype float32"});
  auto ybad = empty(Dims{1, 4, 7, 6}, DType::Float32);
  expect_error([&] { conv2d_out(*x3, *w, nullptr, Conv2dParams{}, *ybad); },
               {"conv2d", "out of shape [1, 4, 6, 6]"});
  auto bbad = empty(Dims{5}, DType::Float32);
  expect_error([&] { conv2d_out(*x3, *w, bbad.get(), Conv2dParams{}, *y); },
               {"conv2d", "bias of shape [4]"});
}

// Sizes and attributes an artifact may carry: the extent arithmetic must not overflow (found by
// fuzzing: dilation 2^62+1 on a [1, 1, 6, 0] input wrapped Ho*Wo to 0 and divided by it).
// Legal but extreme attributes (an artifact may carry any): padding and dilation that would make
// the depthwise kernel's plane buffer 2^61 floats (its byte count wrapped to a 64-byte block,
// then written 16 GiB away), and strides far beyond the input (im2col's window arithmetic
// overflowed into a read before the plane). All run, and agree with the float64 loops.
TEST(Conv, ExtremePaddingDilationAndStrideOnTinyPlanes) {
  const int64_t big_stride = std::numeric_limits<int64_t>::max();
  for (const Case& c : {
           Case{1, 2, 2, 2, 2, 2, 2,
                P(1, 1, (int64_t(1) << 30) - 1, (int64_t(1) << 29) - 1, (int64_t(1) << 31) - 1,
                  (int64_t(1) << 30) - 1, 2)},                               // depthwise
           Case{1, 8, 30, 40, 8, 3, 3, P(1, 1 << 16, 1, 1 << 22, 1, 1, 8)},  // depthwise, wide
           Case{1, 1, 1, 1, 1, 1, 1, P(1, big_stride, 0, (int64_t(1) << 62) - 3)},
           Case{1, 2, 1, 3, 2, 1, 1, P(1, int64_t(1) << 62, 0, 0)},  // one output, x[.., 0]
           Case{1, 2, 3, 1, 2, 1, 1, P(int64_t(1) << 62, 1, 0, 0, 1, 1, 2)},
       })
    for (DType dt : {DType::Float32, DType::Float64}) run_forward_case(c, dt, false, false, 1e-6);
}

TEST(Conv, Conv2dOverflowingExtentsAreRejected) {
  const int64_t big = (int64_t(1) << 62) + 1;
  expect_error(
      [&] {
        conv2d_output_shape(Dims{1, 1, 6, 0}, Dims{2, 1, 3, 3}, P(1, 1, 1, 1, 1, big));
      },
      {"conv2d", "dilation (1, 4611686018427387905)", "fit in 64 bits", "[1, 1, 6, 0]"});
  expect_error(
      [&] {
        conv2d_output_shape(Dims{1, 1, 6, 6}, Dims{2, 1, 3, 3}, P(1, 1, big, 1));
      },
      {"conv2d", "padding (4611686018427387905, 1)", "fit in 64 bits"});
  // An output whose element count overflows: Ho and Wo each ~2^40 from padding alone.
  expect_error(
      [&] {
        conv2d_output_shape(Dims{1, 1, 1, 1}, Dims{2, 1, 1, 1},
                            P(1, 1, int64_t(1) << 40, int64_t(1) << 40));
      },
      {"conv2d", "fit in 64 bits"});
  expect_error(
      [&] {
        conv2d_output_shape(Dims{1, 0, 4, 4}, Dims{2, int64_t(1) << 62, 3, 3},
                            P(1, 1, 0, 0, 1, 1, int64_t(1) << 62));
      },
      {"conv2d", "divisible by groups"});
  expect_error(
      [&] {
        conv2d_output_shape(Dims{1, 4, 4, 4}, Dims{4, int64_t(1) << 62, 3, 3},
                            P(1, 1, 0, 0, 1, 1, 4));
      },
      {"conv2d", "weight.size(1)*groups"});
  // The same geometry reaches weight preparation (an artifact's session) as a clean error.
  auto w = rand_tensor(Dims{2, 1, 3, 3});
  expect_error(
      [&] {
        prepare_conv2d_weight(*w, P(1, 1, 1, 1, 1, big), Dims{1, 1, 6, 0});
      },
      {"conv2d", "fit in 64 bits"});
}

// ---------------------------------------------------------------------------------------------
// Backward

namespace {

void run_backward_case(const Case& c, DType dt, bool nc, double tol) {
  SCOPED_TRACE(testing::Message() << "N" << c.N << " C" << c.C << " " << c.H << "x" << c.W << " O"
                                  << c.O << " k" << c.KH << "x" << c.KW << " s" << c.p.stride_h
                                  << "," << c.p.stride_w << " p" << c.p.pad_h << "," << c.p.pad_w
                                  << " d" << c.p.dilation_h << "," << c.p.dilation_w << " g"
                                  << c.p.groups << " dt " << dtype_name(dt));
  const Dims xs{c.N, c.C, c.H, c.W}, ws{c.O, c.C / c.p.groups, c.KH, c.KW};
  const Dims ys = conv2d_output_shape(xs, ws, c.p);
  auto xv = rand_vec(numel(xs)), wv = rand_vec(numel(ws)), gyv = rand_vec(numel(ys));
  auto x = from_vec(xv, xs, dt), w = from_vec(wv, ws, dt), gy = from_vec(gyv, ys, dt);
  auto gx = empty(xs, dt), gw = empty(ws, dt), gb = empty(Dims{c.O}, dt);
  if (nc) {
    x = noncontig(*x, true);
    gy = noncontig(*gy);
    gx = noncontig(*gx);
    gw = noncontig(*gw, true);
  }
  conv2d_backward_out(*gy, *x, *w, c.p, gx.get(), gw.get(), gb.get());
  std::vector<double> rgx, rgw, rgb;
  ref_conv2d_backward(c, xv, wv, gyv, rgx, rgw, rgb);
  expect_close(to_vec(*gx), rgx, tol, tol, "grad_input");
  expect_close(to_vec(*gw), rgw, tol, tol, "grad_weight");
  expect_close(to_vec(*gb), rgb, tol, tol, "grad_bias");
  // Each output on its own gives the same values.
  auto gx2 = empty(xs, dt);
  conv2d_backward_out(*gy, *x, *w, c.p, gx2.get(), nullptr, nullptr);
  expect_close(to_vec(*gx2), rgx, tol, tol, "grad_input alone");
  auto gw2 = empty(ws, dt);
  conv2d_backward_out(*gy, *x, *w, c.p, nullptr, gw2.get(), nullptr);
  expect_close(to_vec(*gw2), rgw, tol, tol, "grad_weight alone");
}

}  // namespace

TEST(Conv, Conv2dBackwardMatchesNaive) {
  for (const auto& c : forward_cases()) {
    run_backward_case(c, DType::Float32, false, 2e-4);
    run_backward_case(c, DType::Float64, false, 1e-11);
  }
  run_backward_case({2, 4, 9, 8, 6, 3, 3, P(2, 1, 1, 1, 1, 2, 2)}, DType::Float32, true, 2e-4);
  run_backward_case({2, 5, 9, 8, 5, 3, 3, P(2, 1, 1, 1, 1, 1, 5)}, DType::Float32, true, 2e-4);
  run_backward_case({2, 4, 4, 4, 3, 3, 3, P(1, 1, 1, 1)}, DType::BFloat16, false, 1e-1);
}

TEST(Conv, Conv2dBackwardThreadingStrategies) {
  const int saved = num_threads();
  for (int nt : {1, 2}) {
    set_num_threads(nt);
    run_backward_case({8, 3, 7, 7, 4, 3, 3, P(1, 1, 1, 1)}, DType::Float32, false, 2e-4);
    run_backward_case({3, 3, 7, 7, 4, 3, 3, P(1, 1, 1, 1)}, DType::Float32, false, 2e-4);
    run_backward_case({1, 24, 36, 36, 4, 3, 3, P(1, 1, 1, 1)}, DType::Float32, false, 5e-4);
    // K = 576: several column tiles in grad_input / grad_weight.
    run_backward_case({1, 64, 30, 30, 2, 3, 3, P(1, 1, 1, 1)}, DType::Float32, false, 5e-4);
    run_backward_case({1, 64, 31, 29, 3, 3, 3, P(2, 1, 1, 1)}, DType::Float32, false, 5e-4);
    run_backward_case({2, 16, 6, 6, 16, 3, 3, P(1, 1, 1, 1, 1, 1, 16)}, DType::Float32, false,
                      2e-4);
    run_backward_case({2, 16, 6, 6, 16, 3, 3, P(1, 1, 1, 1, 1, 1, 8)}, DType::Float32, false, 2e-4);
  }
  set_num_threads(saved);
}

TEST(Conv, Conv2dBackwardFiniteDifferences) {
  // Checks the naive reference itself (and the kernel) against central differences in float64.
  const Case c{2, 4, 5, 6, 4, 3, 3, P(2, 1, 1, 1, 1, 2, 2)};
  const Dims xs{c.N, c.C, c.H, c.W}, ws{c.O, c.C / c.p.groups, c.KH, c.KW};
  const Dims ys = conv2d_output_shape(xs, ws, c.p);
  auto xv = rand_vec(numel(xs)), wv = rand_vec(numel(ws)), bv = rand_vec(c.O),
       rv = rand_vec(numel(ys));
  auto loss = [&](const std::vector<double>& xx, const std::vector<double>& ww,
                  const std::vector<double>& bb) {
    auto x = from_vec(xx, xs, DType::Float64), w = from_vec(ww, ws, DType::Float64),
         b = from_vec(bb, Dims{c.O}, DType::Float64);
    auto y = empty(ys, DType::Float64);
    conv2d_out(*x, *w, b.get(), c.p, *y);
    double l = 0;
    auto yv = to_vec(*y);
    for (size_t i = 0; i < yv.size(); ++i) l += yv[i] * rv[i];
    return l;
  };
  auto x = from_vec(xv, xs, DType::Float64), w = from_vec(wv, ws, DType::Float64);
  auto gy = from_vec(rv, ys, DType::Float64);
  auto gx = empty(xs, DType::Float64), gw = empty(ws, DType::Float64),
       gb = empty(Dims{c.O}, DType::Float64);
  conv2d_backward_out(*gy, *x, *w, c.p, gx.get(), gw.get(), gb.get());
  const double h = 1e-6;
  auto fd = [&](std::vector<double>& v, size_t i, int which) {
    const double s = v[i];
    v[i] = s + h;
    const double lp = which == 0 ? loss(v, wv, bv) : which == 1 ? loss(xv, v, bv) : loss(xv, wv, v);
    v[i] = s - h;
    const double lm = which == 0 ? loss(v, wv, bv) : which == 1 ? loss(xv, v, bv) : loss(xv, wv, v);
    v[i] = s;
    return (lp - lm) / (2 * h);
  };
  auto agx = to_vec(*gx), agw = to_vec(*gw), agb = to_vec(*gb);
  for (size_t i = 0; i < xv.size(); i += 7) EXPECT_NEAR(agx[i], fd(xv, i, 0), 1e-6);
  for (size_t i = 0; i < wv.size(); i += 5) EXPECT_NEAR(agw[i], fd(wv, i, 1), 1e-6);
  for (size_t i = 0; i < bv.size(); ++i) EXPECT_NEAR(agb[i], fd(bv, i, 2), 1e-6);
}

TEST(Conv, Conv2dBackwardErrors) {
  auto x = empty(Dims{1, 3, 8, 8}, DType::Float32);
  auto w = empty(Dims{4, 3, 3, 3}, DType::Float32);
  auto gy = empty(Dims{1, 4, 5, 6}, DType::Float32);
  auto gx = empty(Dims{1, 3, 8, 8}, DType::Float32);
  expect_error(
      [&] { conv2d_backward_out(*gy, *x, *w, Conv2dParams{}, gx.get(), nullptr, nullptr); },
      {"conv2d_backward", "grad_output of shape [1, 4, 6, 6]"});
}

// ---------------------------------------------------------------------------------------------
// conv1d

TEST(Conv, Conv1dForwardBackward) {
  for (auto [N, C, L, O, K, s, pad, d, g] :
       std::vector<std::array<int64_t, 9>>{{2, 4, 17, 6, 3, 1, 1, 1, 1},
                                           {3, 6, 20, 6, 5, 2, 2, 2, 3},
                                           {1, 4, 9, 4, 3, 1, 1, 1, 4},
                                           {2, 3, 8, 5, 1, 1, 0, 1, 1}}) {
    Conv1dParams p;
    p.stride = s, p.padding = pad, p.dilation = d, p.groups = g;
    const Dims xs{N, C, L}, ws{O, C / g, K};
    auto xv = rand_vec(numel(xs)), wv = rand_vec(numel(ws)), bv = rand_vec(O);
    auto x = noncontig(*from_vec(xv, xs, DType::Float32)), w = from_vec(wv, ws, DType::Float32),
         b = from_vec(bv, Dims{O}, DType::Float32);
    const Dims ys = conv1d_output_shape(xs, ws, p);
    auto y = empty(ys, DType::Float32);
    conv1d_out(*x, *w, b.get(), p, *y);
    // Reference: the conv2d reference with H = 1.
    const Case c{N, C, 1, L, O, 1, K, P(1, s, 0, pad, 1, d, g)};
    expect_close(to_vec(*y), ref_conv2d(c, xv, wv, &bv), 1e-4, 1e-4, "conv1d");
    auto gyv = rand_vec(numel(ys));
    auto gy = from_vec(gyv, ys, DType::Float32);
    auto gx = empty(xs, DType::Float32), gw = empty(ws, DType::Float32),
         gb = empty(Dims{O}, DType::Float32);
    conv1d_backward_out(*gy, *x, *w, p, gx.get(), gw.get(), gb.get());
    std::vector<double> rgx, rgw, rgb;
    ref_conv2d_backward(c, xv, wv, gyv, rgx, rgw, rgb);
    expect_close(to_vec(*gx), rgx, 2e-4, 2e-4, "conv1d grad_input");
    expect_close(to_vec(*gw), rgw, 2e-4, 2e-4, "conv1d grad_weight");
    expect_close(to_vec(*gb), rgb, 2e-4, 2e-4, "conv1d grad_bias");
  }
  expect_error(
      [] {
        conv1d_output_shape(Dims{2, 3, 4, 5}, Dims{4, 3, 3}, Conv1dParams{});
      },
      {"conv1d", "expected input of 3 dims (N,C,L), got [2, 3, 4, 5]"});
}

// ---------------------------------------------------------------------------------------------
// conv_transpose2d

namespace {

struct TCase {
  int64_t N, C, H, W, O, KH, KW;  // C = input channels, O = output channels
  ConvTranspose2dParams p;
};

ConvTranspose2dParams TP(int64_t s, int64_t pad, int64_t op, int64_t d, int64_t g) {
  ConvTranspose2dParams p;
  p.stride_h = p.stride_w = s;
  p.pad_h = p.pad_w = pad;
  p.output_pad_h = p.output_pad_w = op;
  p.dilation_h = p.dilation_w = d;
  p.groups = g;
  return p;
}

// Direct definition: every input element scatters x * w into the output.
std::vector<double> ref_conv_transpose2d(const TCase& c, const std::vector<double>& x,
                                         const std::vector<double>& w, const std::vector<double>* b,
                                         int64_t Ho, int64_t Wo) {
  const auto& p = c.p;
  const int64_t Cg = c.C / p.groups, Og = c.O / p.groups;
  std::vector<double> y(static_cast<size_t>(c.N * c.O * Ho * Wo), 0.0);
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t ic = 0; ic < c.C; ++ic)
      for (int64_t ih = 0; ih < c.H; ++ih)
        for (int64_t iw = 0; iw < c.W; ++iw)
          for (int64_t oc = 0; oc < Og; ++oc)
            for (int64_t kh = 0; kh < c.KH; ++kh)
              for (int64_t kw = 0; kw < c.KW; ++kw) {
                const int64_t oh = ih * p.stride_h - p.pad_h + kh * p.dilation_h;
                const int64_t ow = iw * p.stride_w - p.pad_w + kw * p.dilation_w;
                if (oh < 0 || oh >= Ho || ow < 0 || ow >= Wo) continue;
                const int64_t o = (ic / Cg) * Og + oc;
                y[((n * c.O + o) * Ho + oh) * Wo + ow] +=
                    x[((n * c.C + ic) * c.H + ih) * c.W + iw] *
                    w[((ic * Og + oc) * c.KH + kh) * c.KW + kw];
              }
  if (b)
    for (int64_t n = 0; n < c.N; ++n)
      for (int64_t o = 0; o < c.O; ++o)
        for (int64_t i = 0; i < Ho * Wo; ++i) y[(n * c.O + o) * Ho * Wo + i] += (*b)[o];
  return y;
}

std::vector<TCase> tcases() {
  return {{2, 4, 5, 6, 3, 3, 3, TP(2, 1, 1, 1, 1)}, {1, 3, 4, 4, 5, 4, 4, TP(2, 1, 0, 1, 1)},
          {2, 6, 5, 5, 4, 3, 3, TP(1, 1, 0, 2, 2)}, {1, 4, 6, 5, 4, 3, 3, TP(2, 1, 1, 1, 4)},
          {2, 4, 3, 3, 6, 1, 1, TP(1, 0, 0, 1, 1)}, {1, 3, 4, 5, 2, 2, 3, TP(3, 0, 2, 1, 1)}};
}

}  // namespace

TEST(Conv, ConvTranspose2dForward) {
  for (const auto& c : tcases()) {
    for (DType dt : {DType::Float32, DType::Float64}) {
      const Dims xs{c.N, c.C, c.H, c.W}, ws{c.C, c.O / c.p.groups, c.KH, c.KW};
      const Dims ys = conv_transpose2d_output_shape(xs, ws, c.p);
      EXPECT_EQ(ys[2], (c.H - 1) * c.p.stride_h - 2 * c.p.pad_h + c.p.dilation_h * (c.KH - 1) +
                           c.p.output_pad_h + 1);
      auto xv = rand_vec(numel(xs)), wv = rand_vec(numel(ws)), bv = rand_vec(c.O);
      auto x = noncontig(*from_vec(xv, xs, dt)), w = from_vec(wv, ws, dt),
           b = from_vec(bv, Dims{c.O}, dt);
      auto y = empty(ys, dt);
      conv_transpose2d_out(*x, *w, b.get(), c.p, *y);
      expect_close(to_vec(*y), ref_conv_transpose2d(c, xv, wv, &bv, ys[2], ys[3]),
                   dt == DType::Float32 ? 1e-4 : 1e-12, dt == DType::Float32 ? 1e-4 : 1e-12,
                   "conv_transpose2d");
    }
  }
  expect_error(
      [] {
        conv_transpose2d_output_shape(Dims{1, 4, 5, 5}, Dims{3, 2, 3, 3}, TP(2, 1, 0, 1, 1));
      },
      {"conv_transpose2d", "weight.size(0) = 3", "got 4"});
  expect_error(
      [] {
        conv_transpose2d_output_shape(Dims{1, 4, 5, 5}, Dims{4, 2, 3, 3}, TP(2, 1, 2, 1, 1));
      },
      {"conv_transpose2d", "output_padding"});
}

TEST(Conv, ConvTranspose2dBackwardFiniteDifferences) {
  for (const auto& c : tcases()) {
    const Dims xs{c.N, c.C, c.H, c.W}, ws{c.C, c.O / c.p.groups, c.KH, c.KW};
    const Dims ys = conv_transpose2d_output_shape(xs, ws, c.p);
    auto xv = rand_vec(numel(xs)), wv = rand_vec(numel(ws)), bv = rand_vec(c.O),
         rv = rand_vec(numel(ys));
    // loss = Σ y * r, y = convT(x, w) + b computed by the naive reference (linear in each).
    auto loss = [&](const std::vector<double>& xx, const std::vector<double>& ww,
                    const std::vector<double>& bb) {
      auto y = ref_conv_transpose2d(c, xx, ww, &bb, ys[2], ys[3]);
      double l = 0;
      for (size_t i = 0; i < y.size(); ++i) l += y[i] * rv[i];
      return l;
    };
    for (DType dt : {DType::Float64, DType::Float32}) {
      auto x = from_vec(xv, xs, dt), w = from_vec(wv, ws, dt), gy = from_vec(rv, ys, dt);
      auto gx = empty(xs, dt), gw = empty(ws, dt), gb = empty(Dims{c.O}, dt);
      conv_transpose2d_backward_out(*gy, *x, *w, c.p, gx.get(), gw.get(), gb.get());
      auto agx = to_vec(*gx), agw = to_vec(*gw), agb = to_vec(*gb);
      const double tol = dt == DType::Float64 ? 1e-6 : 1e-4;
      const double h = 1e-5;
      auto fd = [&](std::vector<double>& v, size_t i, int which) {
        const double s = v[i];
        v[i] = s + h;
        const double lp = which == 0   ? loss(v, wv, bv)
                          : which == 1 ? loss(xv, v, bv)
                                       : loss(xv, wv, v);
        v[i] = s - h;
        const double lm = which == 0   ? loss(v, wv, bv)
                          : which == 1 ? loss(xv, v, bv)
                                       : loss(xv, wv, v);
        v[i] = s;
        return (lp - lm) / (2 * h);
      };
      for (size_t i = 0; i < xv.size(); i += 3) EXPECT_NEAR(agx[i], fd(xv, i, 0), tol);
      for (size_t i = 0; i < wv.size(); i += 3) EXPECT_NEAR(agw[i], fd(wv, i, 1), tol);
      for (size_t i = 0; i < bv.size(); ++i) EXPECT_NEAR(agb[i], fd(bv, i, 2), tol);
    }
  }
}

TEST(Conv, ConvTranspose2dOverflowingExtentsAreRejected) {
  expect_error(
      [] {
        conv_transpose2d_output_shape(Dims{1, 4, 5, int64_t(1) << 40}, Dims{4, 2, 3, 3},
                                      TP(int64_t(1) << 40, 1, 0, 1, 1));
      },
      {"conv_transpose2d", "fits in 64 bits"});
  expect_error(
      [] {
        conv_transpose2d_output_shape(Dims{1, 4, 5, 5}, Dims{4, int64_t(1) << 62, 3, 3},
                                      TP(1, 0, 0, 1, 4));
      },
      {"conv_transpose2d", "fits in 64 bits"});
}

// conv2d_avgpool_out (kiln.conv2d_avgpool): the mean over each output plane of act(conv + bias),
// against the float64 conv reference averaged here. The 1x1 convs prepared with the channels
// across the GEMM's lanes take the kernel's own path (the product's rows averaged as they come),
// batches split by images or not, on 1 and 2 threads; other convs (3x3, strided, grouped, weights
// not prepared) its map-then-mean path.
TEST(Conv, Conv2dAvgPoolMatchesReference) {
  const int saved = num_threads();
  struct PoolCase {
    Case c;
    bool prepare;
    const char* algorithm;  // what the preparation must choose ("" when not prepared)
  };
  const std::vector<PoolCase> cases = {
      {{1, 40, 7, 7, 96, 1, 1, P(1, 1, 0, 0)}, true, "gemm-ch"},   // one image: parallel steps
      {{4, 40, 7, 7, 96, 1, 1, P(1, 1, 0, 0)}, true, "gemm-ch"},   // images over the threads
      {{3, 16, 5, 5, 60, 1, 1, P(1, 1, 0, 0)}, true, "gemm-ch"},   // ragged 8-channel blocks
      {{2, 40, 7, 7, 600, 1, 1, P(1, 1, 0, 0)}, true, "gemm-ch"},  // > 256 channels per run
      {{1, 40, 7, 7, 96, 1, 1, P(1, 1, 0, 0)}, false, ""},
      {{2, 8, 9, 9, 6, 3, 3, P(2, 2, 1, 1)}, true, "gemm"},
      {{3, 6, 8, 7, 9, 3, 3, P(1, 1, 1, 1, 1, 1, 3)}, true, "gemm"},  // groups
      {{1, 8, 70, 70, 12, 1, 1, P(1, 1, 0, 0)}, false, ""},           // 4900 positions per plane
  };
  for (int nt : {1, 2}) {
    set_num_threads(nt);
    for (const PoolCase& pc : cases) {
      const Case& c = pc.c;
      SCOPED_TRACE(testing::Message() << "threads " << nt << " N" << c.N << " C" << c.C << " "
                                      << c.H << "x" << c.W << " O" << c.O << " k" << c.KH);
      const Dims xs{c.N, c.C, c.H, c.W}, ws{c.O, c.C / c.p.groups, c.KH, c.KW};
      auto xv = rand_vec(numel(xs)), wv = rand_vec(numel(ws)), bv = rand_vec(c.O);
      auto x = from_vec(xv, xs, DType::Float32), w = from_vec(wv, ws, DType::Float32);
      auto b = from_vec(bv, Dims{c.O}, DType::Float32);
      auto prepared = pc.prepare ? prepare_conv2d_weight(*w, c.p, xs) : nullptr;
      if (pc.prepare) EXPECT_STREQ(prepared->algorithm(), pc.algorithm);
      const Dims map = conv2d_output_shape(xs, ws, c.p);
      ASSERT_EQ(conv2d_avgpool_output_shape(xs, ws, c.p), (Dims{c.N, c.O, 1, 1}));
      const std::vector<double> y = ref_conv2d(c, xv, wv, &bv);
      const int64_t hw = map[2] * map[3];
      for (Activation act :
           {Activation::None, Activation::Relu6, Activation::Clamp, Activation::Sigmoid}) {
        ConvEpilogue ep;
        ep.activation = act;
        ep.clamp_min = -0.5f, ep.clamp_max = 0.75f;
        auto out = empty(Dims{c.N, c.O, 1, 1}, DType::Float32);
        conv2d_avgpool_out(*x, *w, b.get(), c.p, *out, ep, prepared.get());
        std::vector<double> want(static_cast<size_t>(c.N * c.O));
        for (size_t q = 0; q < want.size(); ++q) {
          double s = 0;
          for (int64_t i = 0; i < hw; ++i) {
            double v = y[q * hw + i];
            if (act == Activation::Relu6) v = std::min(std::max(v, 0.0), 6.0);
            if (act == Activation::Clamp) v = std::min(std::max(v, -0.5), 0.75);
            if (act == Activation::Sigmoid) v = 1 / (1 + std::exp(-v));
            s += v;
          }
          want[q] = s / double(hw);
        }
        expect_close(to_vec(*out), want, 1e-5, 1e-5, "conv2d_avgpool");
      }
    }
  }
  set_num_threads(saved);
}

// Bad operands name the op and the expected and actual values.
TEST(Conv, Conv2dAvgPoolErrors) {
  auto x = from_vec(rand_vec(2 * 4 * 5 * 5), Dims{2, 4, 5, 5}, DType::Float32);
  auto w = from_vec(rand_vec(6 * 4), Dims{6, 4, 1, 1}, DType::Float32);
  const Conv2dParams p = P(1, 1, 0, 0);
  auto map_sized = empty(Dims{2, 6, 5, 5}, DType::Float32);  // the conv's map, not its mean
  expect_error([&] { conv2d_avgpool_out(*x, *w, nullptr, p, *map_sized, {}, nullptr); },
               {"conv2d_avgpool", "[2, 6, 1, 1]", "[2, 6, 5, 5]"});
  auto out = empty(Dims{2, 6, 1, 1}, DType::Float32);
  ConvEpilogue with_residual;
  with_residual.residual = map_sized.get();
  expect_error([&] { conv2d_avgpool_out(*x, *w, nullptr, p, *out, with_residual, nullptr); },
               {"conv2d_avgpool", "residual"});
  auto bad_bias = from_vec(rand_vec(5), Dims{5}, DType::Float32);
  expect_error([&] { conv2d_avgpool_out(*x, *w, bad_bias.get(), p, *out, {}, nullptr); },
               {"conv2d_avgpool", "bias", "[6]", "[5]"});
  // An empty output plane has no mean (a 3x3 kernel over a 2x2 input without padding: the conv's
  // own shape check refuses it).
  auto tiny = from_vec(rand_vec(16), Dims{1, 4, 2, 2}, DType::Float32);
  auto w3 = from_vec(rand_vec(6 * 4 * 9), Dims{6, 4, 3, 3}, DType::Float32);
  auto out1 = empty(Dims{1, 6, 1, 1}, DType::Float32);
  expect_error([&] { conv2d_avgpool_out(*tiny, *w3, nullptr, p, *out1, {}, nullptr); },
               {"conv2d_avgpool"});
  // Padding from an artifact that would make one image's map 2^62 floats (its byte count wraps)
  // is refused before any scratch is taken.
  auto one = from_vec(rand_vec(1), Dims{1, 1, 1, 1}, DType::Float32);
  auto w1 = from_vec(rand_vec(1), Dims{1, 1, 1, 1}, DType::Float32);
  auto out11 = empty(Dims{1, 1, 1, 1}, DType::Float32);
  const Conv2dParams huge = P(2, 1, (int64_t(1) << 62) - 1, 0);
  expect_error([&] { conv2d_avgpool_out(*one, *w1, nullptr, huge, *out11, {}, nullptr); },
               {"conv2d_avgpool", "output map"});
}

// The target description sizes tiles and blocks (im2col tiles, Winograd blocks, GEMM blocking):
// the smallest caches the parser accepts cut every conv into many of them, the largest into one;
// the results match the reference under each, whichever algorithm the description leads to.
TEST(Conv, Conv2dResultsDoNotDependOnTheTarget) {
  const int saved = num_threads();
  const rt::TargetDescription saved_target = rt::active_target();
  for (const char* spec : {"host,l1d=4K,l2=4K,l3=4K", "host,l1d=1M,l2=64M,l3=256M"}) {
    SCOPED_TRACE(spec);
    rt::set_active_target(rt::parse_target(spec));
    for (int nt : {1, 2}) {
      set_num_threads(nt);
      for (const Case& c : forward_cases()) {
        run_prepared_case(c, Dims{c.N, c.C, c.H, c.W}, Activation::Relu, true, 1e-4);
        run_forward_case(c, DType::Float32, false, false, 1e-4);
      }
      for (const Case& c : std::vector<Case>{{2, 64, 14, 14, 64, 3, 3, P(1, 1, 1, 1)},
                                             {1, 32, 56, 56, 16, 1, 1, P(1, 1, 0, 0)},
                                             {1, 3, 64, 64, 16, 7, 7, P(2, 2, 3, 3)}})
        run_prepared_case(c, Dims{c.N, c.C, c.H, c.W}, Activation::None, false, 1e-4);
    }
  }
  rt::set_active_target(saved_target);
  set_num_threads(saved);
}
