// kiln.qconv2d_add's kernel (qconv2d_add_out): the same bytes as the two ops it replaces, the
// reference convolution then kiln.qadd, on every path the convolution takes (the byte-quad and
// int16-pair products of every family this CPU has, the direct convolution, the channel-
// interleaved and per-plane depthwise kernels), with packed and unpacked weights, a batch,
// strides, mixed 8-bit dtypes, a relu after the add, and the errors of a bad residual.
#include <gtest/gtest.h>

#include <string>

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

TensorImplPtr rand_bytes_tensor(Dims sizes, DType d) {
  return from_vec(rand_bytes(numel(sizes), d), sizes, d);
}

}  // namespace

TEST(QConv2dAdd, SameBytesAsTheConvolutionThenTheAdd) {
  qgemm_test::IsaGuard guard;
  const ConvGeometry shapes[] = {
      {"3x3 64 -> 32, a batch (direct where the family has it)", 2, 64, 9, 10, 32, 3, 1, 1, 1,
       true},
      {"3x3 stride 2, 64 -> 64", 1, 64, 13, 12, 64, 3, 2, 1, 1, true},
      {"1x1 expansion 16 -> 96 (im2col)", 2, 16, 6, 7, 96, 1, 1, 0, 1, true},
      {"asymmetric weights (int16 pairs)", 1, 12, 7, 9, 20, 3, 1, 1, 1, false},
      {"grouped", 1, 8, 6, 6, 12, 3, 1, 1, 4, false},
      {"depthwise 3x3, 27 channels (interleaved)", 2, 27, 14, 14, 27, 3, 1, 1, 27, true},
      {"depthwise 5x5, 40 wide (per plane)", 1, 9, 6, 40, 9, 5, 1, 2, 9, true},
  };
  int variant = 0;
  for (const ConvGeometry& s : shapes) {
    for (const DType conv_dtype : {DType::UInt8, DType::Int8}) {
      const DType x_dtype = variant % 2 ? DType::Int8 : DType::UInt8;
      const DType other_dtype = variant % 3 ? DType::UInt8 : DType::Int8;
      const DType out_dtype = variant % 4 < 2 ? DType::UInt8 : DType::Int8;
      const bool conv_relu = variant % 5 == 1, add_relu = variant % 2 == 0;
      ++variant;
      const Conv2dParams p = s.params();
      const Dims out_shape{s.N, s.O, s.Ho(), s.Wo()};
      auto x = rand_bytes_tensor({s.N, s.C, s.H, s.W}, x_dtype);
      auto w = rand_bytes_tensor({s.O, s.C / s.groups, s.K, s.K}, DType::Int8);
      auto other = rand_bytes_tensor(out_shape, other_dtype);
      const auto [xs, ws, cs] = conv_sides(s, x_dtype, conv_dtype);
      const Side os = side(0.3f, other_dtype == DType::UInt8 ? 128 : 2);
      const Side ys = side(0.45f, out_dtype == DType::UInt8 ? 100 : -10);
      QuantizedOperands q{xs.s.get(), xs.z.get(), ws.s.get(), ws.z.get(),
                          nullptr,    cs.s.get(), cs.z.get(), conv_relu};
      auto bias = from_vec(rand_bytes(s.O, DType::Int8), Dims{s.O}, DType::Int32);
      if (variant % 3 == 0) q.bias = bias.get();
      const QResidualOperands r{os.s.get(), os.z.get(), ys.s.get(), ys.z.get(), add_relu};

      auto conv = empty(out_shape, conv_dtype);
      qconv2d_reference_out(*x, *w, q, p, *conv);
      auto want = empty(out_shape, out_dtype);
      qadd_out(*conv, *other,
               {cs.s.get(), cs.z.get(), os.s.get(), os.z.get(), ys.s.get(), ys.z.get(), add_relu},
               *want);
      const std::vector<double> expected = to_vec(*want);
      for (QGemmIsa isa : qgemm_test::isas()) {
        set_qgemm_isa(isa);
        for (bool packed : {false, true}) {
          const PreparedQWeightPtr pw =
              packed ? prepare_qconv2d_weight(*w, q, p, x_dtype, conv_dtype) : nullptr;
          auto got = empty(out_shape, out_dtype);
          qconv2d_add_out(*x, *w, q, p, conv_dtype, *other, r, *got, pw.get());
          EXPECT_EQ(to_vec(*got), expected)
              << s.name << ", isa " << qgemm_isa_name(isa) << (packed ? ", packed " : ", ")
              << (pw ? prepared_family(*pw) : "") << ", conv " << dtype_name(conv_dtype) << ", out "
              << dtype_name(out_dtype);
        }
      }
      set_qgemm_isa(QGemmIsa::Auto);
    }
  }
}

TEST(QConv2dAdd, BadResidualIsNamed) {
  Conv2dParams p;
  auto x = rand_bytes_tensor({1, 4, 5, 5}, DType::UInt8);
  auto w = rand_bytes_tensor({6, 4, 1, 1}, DType::Int8);
  const Side s = side(0.1f, 3), wz = side(0.1f, 0);
  QuantizedOperands q{s.s.get(), s.z.get(), wz.s.get(), wz.z.get(), nullptr, s.s.get(), s.z.get()};
  const QResidualOperands r{s.s.get(), s.z.get(), s.s.get(), s.z.get(), false};
  auto out = empty(Dims{1, 6, 5, 5}, DType::UInt8);
  auto wrong_shape = rand_bytes_tensor({1, 6, 5, 4}, DType::UInt8);
  expect_error([&] { qconv2d_add_out(*x, *w, q, p, DType::UInt8, *wrong_shape, r, *out); },
               {"qconv2d_add", "[1, 6, 5, 5]", "[1, 6, 5, 4]"});
  auto float_other = empty(Dims{1, 6, 5, 5}, DType::Float32);
  expect_error([&] { qconv2d_add_out(*x, *w, q, p, DType::UInt8, *float_other, r, *out); },
               {"qconv2d_add", "other", "float32"});
  const QResidualOperands no_scale{nullptr, s.z.get(), s.s.get(), s.z.get(), false};
  expect_error([&] { qconv2d_add_out(*x, *w, q, p, DType::UInt8, *wrong_shape, no_scale, *out); },
               {"qconv2d_add", "other scale"});
}
