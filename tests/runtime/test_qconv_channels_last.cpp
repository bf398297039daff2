// qconv2d_out / qconv2d_add_out on channels-last activations (Conv2dParams::channels_last): the
// bytes of the NCHW reference, laid out NHWC, on every path (the channels-last depthwise kernel,
// 1x1 convolutions as pixel rows times the weights, the direct convolution, and the geometries
// that run on NCHW copies), for every family this CPU has, packed and unpacked weights, both
// activation dtypes and a residual add; and the errors naming the layout.
#include <gtest/gtest.h>

#include <string>

#include "kiln/runtime/kernels/conv.h"
#include "kiln/runtime/kernels/qgemm.h"
#include "kiln/runtime/kernels/quantize.h"
#include "nn_test_util.h"
#include "qconv_test_util.h"
#include "qgemm_test_util.h"

using namespace kiln;
using namespace kiln::kernels;
using namespace nn_test;
using namespace quant_test;

namespace {

// [N, C, H, W] values as [N, H, W, C] (by index arithmetic, independent of the kernels).
std::vector<double> nhwc_of(const std::vector<double>& v, int64_t N, int64_t C, int64_t H,
                            int64_t W) {
  std::vector<double> out(v.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w)
          out[((n * H + h) * W + w) * C + c] = v[((n * C + c) * H + h) * W + w];
  return out;
}

}  // namespace

TEST(QConv2dChannelsLast, SameBytesAsNchwOnEveryPath) {
  qgemm_test::IsaGuard guard;
  const ConvGeometry shapes[] = {
      {"1x1 16 -> 96 (pixel rows)", 2, 16, 6, 7, 96, 1, 1, 0, 1, true},
      {"1x1 144 -> 24 (pixel rows)", 1, 144, 5, 5, 24, 1, 1, 0, 1, true},
      {"1x1 asymmetric weights (int16 pairs)", 1, 12, 4, 5, 20, 1, 1, 0, 1, false},
      {"1x1 stride 2 (NCHW copies)", 1, 32, 7, 8, 16, 1, 2, 0, 1, true},
      {"3x3 64 -> 32 (direct where the family has it)", 2, 64, 9, 10, 32, 3, 1, 1, 1, true},
      {"3x3 stride 2, 3 -> 16 (a stem: NCHW copies)", 1, 3, 11, 12, 16, 3, 2, 1, 1, true},
      {"grouped (NCHW copies)", 1, 8, 6, 6, 12, 3, 1, 1, 4, false},
      {"depthwise 3x3, 27 channels (interleaved)", 2, 27, 14, 13, 27, 3, 1, 1, 27, true},
      {"depthwise 3x3 stride 2, 16 channels", 1, 16, 15, 17, 16, 3, 2, 1, 16, true},
      {"depthwise 3x3, 140 wide", 1, 9, 4, 140, 9, 3, 1, 1, 9, true},
      {"depthwise 5x5, asymmetric weights", 2, 12, 9, 8, 12, 5, 1, 2, 12, false},
      {"depthwise 3x3 stride 2 into 1 x 1", 1, 40, 2, 2, 40, 3, 2, 1, 40, true},
  };
  int variant = 0;
  for (const ConvGeometry& s : shapes) {
    for (const bool with_add : {false, true}) {
      const DType x_dtype = variant % 2 ? DType::Int8 : DType::UInt8;
      const DType conv_dtype = variant % 3 ? DType::UInt8 : DType::Int8;
      const DType out_dtype = variant % 4 < 2 ? DType::UInt8 : DType::Int8;
      ++variant;
      const Conv2dParams p = s.params();
      const int64_t Ho = s.Ho(), Wo = s.Wo();
      const std::vector<double> xv = rand_bytes(s.N * s.C * s.H * s.W, x_dtype);
      auto x = from_vec(xv, Dims{s.N, s.C, s.H, s.W}, x_dtype);
      auto x_nhwc = from_vec(nhwc_of(xv, s.N, s.C, s.H, s.W), Dims{s.N, s.H, s.W, s.C}, x_dtype);
      auto w = from_vec(rand_bytes(s.O * s.C / s.groups * s.K * s.K, DType::Int8),
                        Dims{s.O, s.C / s.groups, s.K, s.K}, DType::Int8);
      const std::vector<double> other_v = rand_bytes(s.N * s.O * Ho * Wo, DType::UInt8);
      auto other = from_vec(other_v, Dims{s.N, s.O, Ho, Wo}, DType::UInt8);
      auto other_nhwc =
          from_vec(nhwc_of(other_v, s.N, s.O, Ho, Wo), Dims{s.N, Ho, Wo, s.O}, DType::UInt8);
      const auto [xs, ws, cs] = conv_sides(s, x_dtype, conv_dtype);
      const Side os = side(0.3f, 128), ys = side(0.45f, out_dtype == DType::UInt8 ? 100 : -10);
      QuantizedOperands q{xs.s.get(), xs.z.get(), ws.s.get(), ws.z.get(),
                          nullptr,    cs.s.get(), cs.z.get(), variant % 5 == 1};
      auto bias = from_vec(rand_bytes(s.O, DType::Int8), Dims{s.O}, DType::Int32);
      if (variant % 3 == 0) q.bias = bias.get();
      const QResidualOperands r{os.s.get(), os.z.get(), ys.s.get(), ys.z.get(), variant % 2 == 0};

      // The NCHW reference (then the add), laid out NHWC.
      const DType y_dtype = with_add ? out_dtype : conv_dtype;
      auto conv = empty(Dims{s.N, s.O, Ho, Wo}, conv_dtype);
      qconv2d_reference_out(*x, *w, q, p, *conv);
      auto want_nchw = conv;
      if (with_add) {
        want_nchw = empty(Dims{s.N, s.O, Ho, Wo}, out_dtype);
        qadd_out(*conv, *other,
                 {cs.s.get(), cs.z.get(), os.s.get(), os.z.get(), ys.s.get(), ys.z.get(), r.relu},
                 *want_nchw);
      }
      const std::vector<double> expected = nhwc_of(to_vec(*want_nchw), s.N, s.O, Ho, Wo);
      const Dims out_shape{s.N, Ho, Wo, s.O};
      Conv2dParams pl = p;
      pl.channels_last = true;
      if (!with_add) {  // the reference's own channels-last indexing
        auto ref = empty(out_shape, conv_dtype);
        qconv2d_reference_out(*x_nhwc, *w, q, pl, *ref);
        EXPECT_EQ(to_vec(*ref), expected) << s.name << ", reference";
      }
      for (QGemmIsa isa : qgemm_test::isas()) {
        set_qgemm_isa(isa);
        // Unpacked, prepared for this call, and prepared for the NCHW convolution (its 1x1
        // weights are the transposed orientation's A; without byte quads they run on copies).
        for (int packed : {0, 1, 2}) {
          const PreparedQWeightPtr pw =
              packed ? prepare_qconv2d_weight(*w, q, packed == 1 ? pl : p, x_dtype, conv_dtype)
                     : nullptr;
          auto got = empty(out_shape, y_dtype);
          if (with_add)
            qconv2d_add_out(*x_nhwc, *w, q, pl, conv_dtype, *other_nhwc, r, *got, pw.get());
          else
            qconv2d_out(*x_nhwc, *w, q, pl, *got, pw.get());
          EXPECT_EQ(to_vec(*got), expected)
              << s.name << ", isa " << qgemm_isa_name(isa)
              << (packed == 2 ? ", packed for NCHW "
                  : packed    ? ", packed "
                              : ", ")
              << (pw ? prepared_family(*pw) : "") << (with_add ? ", with the add" : "") << ", x "
              << dtype_name(x_dtype);
        }
      }
      set_qgemm_isa(QGemmIsa::Auto);
    }
  }
}

TEST(QConv2dChannelsLast, BadShapesAndFloatConvolutionsAreRefused) {
  Conv2dParams p;
  p.channels_last = true;
  auto w = from_vec(rand_bytes(6 * 4, DType::Int8), Dims{6, 4, 1, 1}, DType::Int8);
  const Side s = side(0.1f, 3), wz = side(0.1f, 0);
  QuantizedOperands q{s.s.get(), s.z.get(), wz.s.get(), wz.z.get(), nullptr, s.s.get(), s.z.get()};
  // Channels-last input [1, 5, 5, 4]: an NCHW-shaped result is refused naming both shapes.
  auto x = from_vec(rand_bytes(100, DType::UInt8), Dims{1, 5, 5, 4}, DType::UInt8);
  auto nchw_out = empty(Dims{1, 6, 5, 5}, DType::UInt8);
  expect_error([&] { qconv2d_out(*x, *w, q, p, *nchw_out); }, {"qconv2d", "[1, 5, 5, 6]"});
  // An NCHW input read as channels-last has 5 channels, not the weight's 4.
  auto x_nchw = from_vec(rand_bytes(100, DType::UInt8), Dims{1, 4, 5, 5}, DType::UInt8);
  auto out = empty(Dims{1, 5, 5, 6}, DType::UInt8);
  expect_error([&] { qconv2d_out(*x_nchw, *w, q, p, *out); }, {"qconv2d", "channels"});
  auto x3 = from_vec(rand_bytes(20, DType::UInt8), Dims{4, 5}, DType::UInt8);
  expect_error([&] { qconv2d_out(*x3, *w, q, p, *out); }, {"qconv2d", "(N,H,W,C)", "[4, 5]"});
  // The float32 convolution has no channels-last kernel: refused, not computed as NCHW.
  auto xf = empty(Dims{1, 5, 5, 4}, DType::Float32), wf = empty(Dims{6, 4, 1, 1}, DType::Float32);
  auto yf = empty(Dims{1, 5, 5, 6}, DType::Float32);
  expect_error([&] { conv2d_out(*xf, *wf, nullptr, p, *yf); }, {"conv2d", "channels-last"});
}
