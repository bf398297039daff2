// The fused inverted-residual block (kernels/mbconv.h) against naive float64 loops of its three
// convolutions.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/runtime/kernels/gemm.h"
#include "kiln/runtime/kernels/mbconv.h"
#include "kiln/runtime/thread_pool.h"
#include "nn_test_util.h"

using namespace kiln;
using namespace kiln::kernels;
using namespace nn_test;

namespace {

struct Block {
  int64_t N, C, H, W, E, P, K, stride, pad;
  bool expand, residual;
  Activation act_e = Activation::Relu6, act_d = Activation::Relu6, act_p = Activation::None;
};

double act(double v, Activation a) {
  switch (a) {
    case Activation::Relu:
      return std::max(v, 0.0);
    case Activation::Relu6:
      return std::min(std::max(v, 0.0), 6.0);
    case Activation::Clamp:
      return std::min(std::max(v, -0.5), 0.5);
    case Activation::Silu:
      return v / (1.0 + std::exp(-v));
    case Activation::Sigmoid:
      return 1.0 / (1.0 + std::exp(-v));
    default:
      return v;
  }
}

struct Values {
  std::vector<double> x, we, be, wd, bd, wp, bp, res;
};

// y = act_p(W_p · act_d(dw(act_e(W_e · x + b_e)) + b_d) + b_p + res), in float64.
std::vector<double> reference(const Block& b, const Values& v) {
  const int64_t E = b.expand ? b.E : b.C;
  const int64_t Ho = (b.H + 2 * b.pad - b.K) / b.stride + 1;
  const int64_t Wo = (b.W + 2 * b.pad - b.K) / b.stride + 1;
  std::vector<double> e(b.N * E * b.H * b.W), d(b.N * E * Ho * Wo), y(b.N * b.P * Ho * Wo);
  for (int64_t n = 0; n < b.N; ++n)
    for (int64_t c = 0; c < E; ++c)
      for (int64_t i = 0; i < b.H * b.W; ++i) {
        double s;
        if (b.expand) {
          s = v.be[c];
          for (int64_t k = 0; k < b.C; ++k)
            s += v.we[c * b.C + k] * v.x[(n * b.C + k) * b.H * b.W + i];
          s = act(s, b.act_e);
        } else {
          s = v.x[(n * b.C + c) * b.H * b.W + i];
        }
        e[(n * E + c) * b.H * b.W + i] = s;
      }
  for (int64_t n = 0; n < b.N; ++n)
    for (int64_t c = 0; c < E; ++c)
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          double s = v.bd[c];
          for (int64_t kh = 0; kh < b.K; ++kh)
            for (int64_t kw = 0; kw < b.K; ++kw) {
              const int64_t ih = oh * b.stride - b.pad + kh, iw = ow * b.stride - b.pad + kw;
              if (ih < 0 || ih >= b.H || iw < 0 || iw >= b.W) continue;
              s += v.wd[(c * b.K + kh) * b.K + kw] * e[((n * E + c) * b.H + ih) * b.W + iw];
            }
          d[((n * E + c) * Ho + oh) * Wo + ow] = act(s, b.act_d);
        }
  for (int64_t n = 0; n < b.N; ++n)
    for (int64_t o = 0; o < b.P; ++o)
      for (int64_t i = 0; i < Ho * Wo; ++i) {
        double s = v.bp[o];
        for (int64_t c = 0; c < E; ++c) s += v.wp[o * E + c] * d[(n * E + c) * Ho * Wo + i];
        const int64_t at = (n * b.P + o) * Ho * Wo + i;
        if (b.residual) s += v.res[at];
        y[at] = act(s, b.act_p);
      }
  return y;
}

// [N, C, H, W] values in NHWC order (to_nhwc), or NHWC values back in NCHW order.
std::vector<double> nhwc(const std::vector<double>& v, int64_t N, int64_t C, int64_t HW,
                         bool to_nhwc) {
  std::vector<double> o(v.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < HW; ++i) {
        const int64_t nchw = (n * C + c) * HW + i, cl = (n * HW + i) * C + c;
        (to_nhwc ? o[cl] : o[nchw]) = to_nhwc ? v[nchw] : v[cl];
      }
  return o;
}

// One block's random operands (float64 values, float32 tensors) and parameters. `x_cl`: x and the
// residual stored channels-last (NHWC) under their NCHW sizes.
struct BlockData {
  int64_t E, Ho, Wo;
  Values v;
  TensorImplPtr x, we, be, wd, bd, wp, bp, res;
  MBConvOperands ops;
  MBConvParams p;

  BlockData(const Block& b, bool x_cl = false) {
    E = b.expand ? b.E : b.C;
    Ho = (b.H + 2 * b.pad - b.K) / b.stride + 1;
    Wo = (b.W + 2 * b.pad - b.K) / b.stride + 1;
    v.x = rand_vec(b.N * b.C * b.H * b.W);
    v.we = rand_vec(E * b.C, -0.5, 0.5), v.be = rand_vec(E);
    v.wd = rand_vec(E * b.K * b.K), v.bd = rand_vec(E);
    v.wp = rand_vec(b.P * E, -0.5, 0.5), v.bp = rand_vec(b.P);
    v.res = rand_vec(b.N * b.P * Ho * Wo);
    x = from_vec(x_cl ? nhwc(v.x, b.N, b.C, b.H * b.W, true) : v.x, Dims{b.N, b.C, b.H, b.W},
                 DType::Float32);
    res = from_vec(x_cl ? nhwc(v.res, b.N, b.P, Ho * Wo, true) : v.res, Dims{b.N, b.P, Ho, Wo},
                   DType::Float32);
    we = from_vec(v.we, Dims{E, b.C, 1, 1}, DType::Float32);
    be = from_vec(v.be, Dims{E}, DType::Float32);
    wd = from_vec(v.wd, Dims{E, 1, b.K, b.K}, DType::Float32);
    bd = from_vec(v.bd, Dims{E}, DType::Float32);
    wp = from_vec(v.wp, Dims{b.P, E, 1, 1}, DType::Float32);
    bp = from_vec(v.bp, Dims{b.P}, DType::Float32);
    p.stride_h = p.stride_w = b.stride;
    p.pad_h = p.pad_w = b.pad;
    p.expand.activation = b.act_e, p.dw.activation = b.act_d, p.project.activation = b.act_p;
    for (ConvEpilogue* e : {&p.expand, &p.dw, &p.project})
      e->clamp_min = -0.5f, e->clamp_max = 0.5f;
    bind(b);
  }
  // ops from the tensors (again after replacing x or res).
  void bind(const Block& b) {
    ops.input = x.get();
    ops.expand_weight = b.expand ? we.get() : nullptr;
    ops.expand_bias = b.expand ? be.get() : nullptr;
    ops.dw_weight = wd.get(), ops.dw_bias = bd.get();
    ops.project_weight = wp.get(), ops.project_bias = bp.get();
    ops.residual = b.residual ? res.get() : nullptr;
  }
};

void run_block(const Block& b, MBConvStrategy strategy, bool prepared, bool noncontiguous) {
  SCOPED_TRACE(testing::Message() << "N" << b.N << " C" << b.C << " " << b.H << "x" << b.W << " E"
                                  << b.E << " P" << b.P << " k" << b.K << " s" << b.stride << " p"
                                  << b.pad << " expand" << b.expand << " res" << b.residual << " "
                                  << mbconv_strategy_name(strategy) << " prepared" << prepared
                                  << " nc" << noncontiguous);
  BlockData d(b);
  d.p.strategy = strategy;
  auto y = empty(Dims{b.N, b.P, d.Ho, d.Wo}, DType::Float32);
  if (noncontiguous) {
    d.x = noncontig(*d.x);
    d.res = noncontig(*d.res);
    y = noncontig(*y);
    d.bind(b);
  }
  ASSERT_EQ(mbconv_output_shape(d.ops, d.p), (Dims{b.N, b.P, d.Ho, d.Wo}));
  auto prep = prepared ? prepare_mbconv(d.ops, strategy) : nullptr;
  if (prepared) {
    EXPECT_GT(prep->nbytes(), 0u);
    EXPECT_STREQ(prep->algorithm(),
                 strategy == MBConvStrategy::ChannelsLast ? "channels-last" : "banded");
  }
  mbconv_out(d.ops, d.p, *y, prep.get());
  expect_close(to_vec(*y), reference(b, d.v), 1e-4, 1e-4, "mbconv");
  if (prepared) {  // an object prepared for the other strategy is not used
    const MBConvStrategy other = strategy == MBConvStrategy::ChannelsLast
                                     ? MBConvStrategy::Banded
                                     : MBConvStrategy::ChannelsLast;
    auto wrong = prepare_mbconv(d.ops, other);
    auto y2 = empty(Dims{b.N, b.P, d.Ho, d.Wo}, DType::Float32);
    mbconv_out(d.ops, d.p, *y2, wrong.get());
    expect_close(to_vec(*y2), reference(b, d.v), 1e-4, 1e-4, "mbconv, other strategy's weights");
  }
}

// Blocks the compiler would run channels-last (small maps) and in bands (larger ones); every test
// runs each under both strategies.
const std::vector<Block> kBlocks = {
    // Channels-last. MobileNetV2's kinds: expand + stride 1 + residual, expand + stride 2, no
    // expansion; channel counts off the 8- and 32-wide vector steps; batch 3 (no even split of
    // images over 2 threads), a 5x5 kernel, unpadded, and the activations without a vector form.
    {2, 8, 13, 11, 24, 8, 3, 1, 1, true, true},
    {1, 8, 13, 11, 24, 12, 3, 2, 1, true, false},
    {2, 16, 10, 9, 16, 8, 3, 1, 1, false, false},
    {1, 12, 14, 14, 100, 20, 3, 1, 1, true, true, Activation::Relu6, Activation::Clamp},
    {3, 5, 7, 7, 21, 7, 3, 2, 1, true, false, Activation::Relu, Activation::Relu},
    {1, 8, 9, 12, 40, 16, 5, 1, 2, true, true, Activation::Silu, Activation::Sigmoid,
     Activation::Silu},
    {3, 4, 7, 7, 12, 5, 3, 2, 0, true, false},
    // Banded: several bands (expanded rows carried over), stride 1 and 2, and a 5x5 kernel.
    {1, 16, 40, 60, 96, 16, 3, 1, 1, true, true, Activation::Relu6, Activation::Relu6},
    {2, 16, 41, 60, 96, 24, 3, 2, 1, true, false, Activation::Relu, Activation::Clamp},
    {1, 8, 30, 33, 192, 16, 5, 1, 2, true, true, Activation::None, Activation::Relu,
     Activation::Clamp},
    {1, 200, 30, 30, 200, 8, 3, 1, 1, false, false},
    // The depthwise's activation without a vector form, and an expansion wider than the GEMM's
    // K block (the projection packs the depthwise output itself in both).
    {1, 16, 40, 60, 96, 16, 3, 1, 1, true, false, Activation::Relu6, Activation::Silu},
    {1, 8, 24, 40, 264, 8, 3, 1, 1, true, true},
    // The expansion clamped, and without activation over 88 channels (half a 16-channel panel
    // past the last whole one).
    {1, 16, 40, 60, 96, 16, 3, 1, 1, true, true, Activation::Clamp, Activation::Relu6},
    {1, 8, 40, 60, 88, 8, 3, 2, 1, true, false, Activation::None, Activation::None},
    // No expansion: the depthwise reads x's rows in place, the rows above and below the image its
    // padding (a 5x5 at stride 2 with 2 rows of it; a plane wider than the interleaved kernel's).
    {2, 160, 34, 32, 160, 16, 5, 2, 2, false, false},
    {1, 16, 40, 300, 16, 16, 3, 1, 1, false, true},
};

// The block with channels-last input (and residual) and/or output, under NCHW sizes
// (MBConvParams::input_channels_last / output_channels_last), against the NCHW reference
// permuted.
void run_block_channels_last(const Block& b, bool in_cl, bool out_cl, bool prepared) {
  SCOPED_TRACE(testing::Message() << "N" << b.N << " C" << b.C << " " << b.H << "x" << b.W << " E"
                                  << b.E << " P" << b.P << " s" << b.stride << " expand" << b.expand
                                  << " res" << b.residual << " in_cl" << in_cl << " out_cl"
                                  << out_cl << " prepared" << prepared);
  BlockData d(b, in_cl);
  auto y = empty(Dims{b.N, b.P, d.Ho, d.Wo}, DType::Float32);
  d.p.input_channels_last = in_cl, d.p.output_channels_last = out_cl;
  // Channels-last operands imply that strategy, recorded (prepared here) or not (as artifacts
  // written before kiln.mbconv recorded it carry them).
  d.p.strategy = prepared ? MBConvStrategy::ChannelsLast : MBConvStrategy::Banded;
  ASSERT_EQ(mbconv_run_strategy(d.p), MBConvStrategy::ChannelsLast);
  auto prep = prepared ? prepare_mbconv(d.ops, mbconv_run_strategy(d.p)) : nullptr;
  auto run = [&](TensorImpl& out) { mbconv_out(d.ops, d.p, out, prep.get()); };
  if (b.residual && in_cl != out_cl) {
    expect_error([&] { run(*y); },
                 {"mbconv", "residual", in_cl ? "input channels-last" : "input NCHW"});
    return;
  }
  if (out_cl) {  // no strided view of channels-last data
    auto strided = noncontig(*y);
    expect_error([&] { run(*strided); }, {"mbconv", "contiguous channels-last", "output"});
  }
  run(*y);
  std::vector<double> got = to_vec(*y);
  if (out_cl) got = nhwc(got, b.N, b.P, d.Ho * d.Wo, false);
  expect_close(got, reference(b, d.v), 1e-4, 1e-4, "mbconv");
}

}  // namespace

// Every block of kBlocks with each layout combination, prepared or not, on 1 and 2 threads (batch
// 1 with 2 threads splits each step; batch 2 gives each thread an image).
TEST(MBConv, ChannelsLastOperands) {
  const int saved = num_threads();
  for (int nt : {1, 2}) {
    set_num_threads(nt);
    for (const Block& b : kBlocks)
      for (auto [in_cl, out_cl] : {std::pair{true, false}, {false, true}, {true, true}})
        for (bool prepared : {false, true}) run_block_channels_last(b, in_cl, out_cl, prepared);
  }
  set_num_threads(saved);
}

TEST(MBConv, MatchesThreeConvsInFloat64) {
  const int saved = num_threads();
  for (int nt : {1, 2}) {  // with 2 threads, batch 1 splits rows between threads
    set_num_threads(nt);
    for (const Block& b : kBlocks)
      for (MBConvStrategy strategy : {MBConvStrategy::Banded, MBConvStrategy::ChannelsLast})
        for (bool prepared : {false, true}) run_block(b, strategy, prepared, false);
  }
  set_num_threads(saved);
}

// The prepared banded blocks under each GEMM microkernel family this CPU has: the depthwise writes
// the projection's packed operand in that family's panel width (16 or 32), or (NEON's 12) leaves
// the packing to the GEMM.
TEST(MBConv, BandedUnderEveryGemmIsa) {
  const GemmIsa saved = sgemm_isa();
  for (GemmIsa isa : {GemmIsa::Avx512, GemmIsa::Avx2, GemmIsa::Neon, GemmIsa::Scalar}) {
    if (!sgemm_isa_available(isa)) continue;
    SCOPED_TRACE(gemm_isa_name(isa));
    set_sgemm_isa(isa);
    for (const Block& b :
         {kBlocks[7], kBlocks[8], kBlocks[10], kBlocks[13], kBlocks[14], kBlocks[15]})
      run_block(b, MBConvStrategy::Banded, true, false);
  }
  set_sgemm_isa(saved);
}

TEST(MBConv, NonContiguousOperands) {
  for (const Block& b : {kBlocks[0], kBlocks[1], kBlocks[2], kBlocks[7]})
    for (MBConvStrategy strategy : {MBConvStrategy::Banded, MBConvStrategy::ChannelsLast})
      run_block(b, strategy, true, true);
}

TEST(MBConv, ErrorsNameTheOperand) {
  auto x = rand_tensor(Dims{1, 4, 8, 8});
  auto we = rand_tensor(Dims{12, 4, 1, 1}), wd = rand_tensor(Dims{12, 1, 3, 3});
  auto wp = rand_tensor(Dims{6, 12, 1, 1}), bad_wd = rand_tensor(Dims{12, 2, 3, 3});
  auto bad_wp = rand_tensor(Dims{6, 10, 1, 1}), bias = rand_tensor(Dims{5});
  MBConvOperands ops;
  ops.input = x.get(), ops.expand_weight = we.get(), ops.dw_weight = wd.get();
  ops.project_weight = wp.get();
  MBConvParams p;
  p.pad_h = p.pad_w = 1;
  EXPECT_EQ(mbconv_output_shape(ops, p), (Dims{1, 6, 8, 8}));
  MBConvOperands o = ops;
  o.dw_weight = bad_wd.get();
  expect_error([&] { mbconv_output_shape(o, p); },
               {"mbconv", "dw_weight", "[12, 1, 3, 3]", "[12, 2, 3, 3]"});
  o = ops;
  o.project_weight = bad_wp.get();
  expect_error([&] { mbconv_output_shape(o, p); }, {"mbconv", "project_weight", "[6, 12, 1, 1]"});
  o = ops;
  o.expand_bias = bias.get();
  expect_error([&] { mbconv_output_shape(o, p); }, {"mbconv", "expand_bias", "[12]", "[5]"});
  auto y = empty(Dims{1, 6, 7, 8}, DType::Float32);
  expect_error([&] { mbconv_out(ops, p, *y); }, {"mbconv", "out", "[1, 6, 8, 8]", "[1, 6, 7, 8]"});
  auto xd = rand_tensor(Dims{1, 4, 8, 8}, DType::Float64);
  o = ops;
  o.input = xd.get();
  expect_error([&] { mbconv_output_shape(o, p); }, {"mbconv", "input", "float32", "float64"});
  p.pad_h = 3;
  expect_error([&] { mbconv_output_shape(ops, p); }, {"mbconv", "padding"});
  p.pad_h = 1;
  p.stride_w = int64_t(1) << 62;  // from a hostile artifact: must not overflow the band sizes
  expect_error([&] { mbconv_output_shape(ops, p); }, {"mbconv", "stride"});
}

// Shapes a hostile artifact can declare without providing the bytes: zero-element tensors with
// huge extents, zero-sized weight dims. Clean errors, no out-of-bounds access.
TEST(MBConv, HostileShapesAreRejected) {
  auto x = empty(Dims{0, 2, 1, int64_t(1) << 30}, DType::Float32);  // no elements
  auto we = rand_tensor(Dims{1024, 2, 1, 1}), wd = rand_tensor(Dims{1024, 1, 1, 1});
  auto wp = rand_tensor(Dims{1, 1024, 1, 1});
  MBConvOperands ops;
  ops.input = x.get(), ops.expand_weight = we.get(), ops.dw_weight = wd.get();
  ops.project_weight = wp.get();
  MBConvParams p;
  expect_error([&] { mbconv_output_shape(ops, p); }, {"mbconv", "band", "at most"});
  // Whole images: one image's expanded tensor is bounded as well, where the bands' rows are not
  // (1024 channels x 1024 x 2048 pixels: 2^31 floats per image, a band row 2^22).
  auto x_wide = empty(Dims{0, 2, 1024, 2048}, DType::Float32);
  MBConvOperands wide_ops = ops;
  wide_ops.input = x_wide.get();
  EXPECT_EQ(mbconv_output_shape(wide_ops, p), (Dims{0, 1, 1024, 2048}));
  MBConvParams whole = p;
  whole.strategy = MBConvStrategy::ChannelsLast;
  expect_error([&] { mbconv_output_shape(wide_ops, whole); },
               {"mbconv", "one image's expanded tensor", "at most"});
  // A strategy outside the enum (an artifact's attribute) is an error naming the value.
  expect_error([&] { mbconv_strategy(2, "mbconv"); }, {"mbconv", "strategy", "got 2"});
  auto x2 = rand_tensor(Dims{1, 2, 4, 4});
  auto flat = empty(Dims{1, 1024, 0, 1}, DType::Float32);  // zero-sized, declared [1, E, 0, 1]
  ops.input = x2.get(), ops.project_weight = flat.get();
  for (MBConvStrategy strategy : {MBConvStrategy::Banded, MBConvStrategy::ChannelsLast})
    expect_error([&] { prepare_mbconv(ops, strategy); },
                 {"mbconv", "project_weight", "[1, 1024, 1, 1]"});
  auto x0 = empty(Dims{1, 0, 4, 4}, DType::Float32);
  auto we0 = empty(Dims{1024, 0, 1, 1}, DType::Float32);
  ops.input = x0.get(), ops.expand_weight = we0.get(), ops.project_weight = wp.get();
  expect_error([&] { mbconv_output_shape(ops, p); }, {"mbconv", "non-empty"});
  // A zero-element tensor may not declare sizes whose strides overflow int64 (3 x 2^62).
  expect_error(
      [&] {
        empty(Dims{0, 1, 3, int64_t(1) << 62}, DType::Float32);
      },
      {"empty", "[0, 1, 3, 4611686018427387904]", "overflows int64"});
  // Extents whose padded sums would overflow int64 (a zero-element weight can declare them).
  auto wd_huge = empty(Dims{0, 1, 1, int64_t(1) << 62}, DType::Float32);
  ops.input = x2.get(), ops.expand_weight = nullptr, ops.dw_weight = wd_huge.get();
  MBConvParams wide;
  wide.pad_w = (int64_t(1) << 62) - 1;
  expect_error([&] { mbconv_output_shape(ops, wide); }, {"mbconv", "below 2^31"});
}
