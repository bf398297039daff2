// kiln_abi_* wrappers for the quantization ops (attributes in the schema's order).

#include "decode.h"
#include "kiln/runtime/kernels/conv.h"
#include "kiln/runtime/kernels/qgemm.h"
#include "kiln/runtime/kernels/quantize.h"

using namespace kiln;
using namespace kiln::kernels;

namespace {
FakeQuantParams fake_params(abi::Args& a) {
  FakeQuantParams p;
  p.axis = a.i();
  p.quant_min = a.i();
  p.quant_max = a.i();
  return p;
}
}  // namespace

// Tensors: input, scale, zero_point, result; attributes axis, dtype (the result's, read from it).
KILN_ABI_OP(quantize, {
  const int64_t axis = a.i();
  (void)a.i();
  quantize_out(a.t(0), a.t(1), a.t(2), {axis}, a.t(3));
})
KILN_ABI_OP(dequantize, dequantize_out(a.t(0), a.t(1), a.t(2), {a.i()}, a.t(3)))
KILN_ABI_OP(fake_quantize, fake_quantize_out(a.t(0), a.t(1), a.t(2), fake_params(a), a.t(3)))
KILN_ABI_OP(fake_quantize_backward,
            fake_quantize_backward_out(a.t(0), a.t(1), a.t(2), a.t(3), fake_params(a), a.t(4)))

namespace {
// Tensors: input, input_scale, input_zero_point, weight, weight_scale, weight_zero_point, bias
// (optional), output_scale, output_zero_point, result.
QuantizedOperands qoperands(abi::Args& a, bool relu) {
  return {&a.t(1), &a.t(2), &a.t(4), &a.t(5), a.opt(6), &a.t(7), &a.t(8), relu};
}
}  // namespace

// Attributes: dtype (the result's, read from it), relu.
KILN_ABI_OP(qlinear, {
  (void)a.i();
  const bool relu = a.b();
  qlinear_out(a.t(0), a.t(3), qoperands(a, relu), a.t(9));
})
// Attributes: stride, padding, dilation, groups, dtype, relu, channels_last.
KILN_ABI_OP(qconv2d, {
  Conv2dParams p = abi::conv2d_params(a);
  (void)a.i();
  const bool relu = a.b();
  p.channels_last = a.b();
  qconv2d_out(a.t(0), a.t(3), qoperands(a, relu), p, a.t(9));
})
// Tensors: qconv2d's operands, other, other_scale, other_zero_point, output_scale,
// output_zero_point, result; attributes stride, padding, dilation, groups, conv_dtype, relu,
// dtype (the result's, read from it), add_relu, channels_last.
KILN_ABI_OP(qconv2d_add, {
  Conv2dParams p = abi::conv2d_params(a);
  const auto conv_dtype = static_cast<DType>(a.i());
  const bool relu = a.b();
  (void)a.i();
  const bool add_relu = a.b();
  p.channels_last = a.b();
  qconv2d_add_out(a.t(0), a.t(3), qoperands(a, relu), p, conv_dtype, a.t(9),
                  {&a.t(10), &a.t(11), &a.t(12), &a.t(13), add_relu}, a.t(14));
})
// Tensors: input, input_scale, input_zero_point, other, other_scale, other_zero_point,
// output_scale, output_zero_point, result; attributes dtype (the result's, read from it), relu.
KILN_ABI_OP(qadd, {
  (void)a.i();
  const bool relu = a.b();
  qadd_out(a.t(0), a.t(3), {&a.t(1), &a.t(2), &a.t(4), &a.t(5), &a.t(6), &a.t(7), relu}, a.t(8));
})
// Tensors: input, input_scale, input_zero_point, output_scale, output_zero_point, result;
// attributes avg_pool2d's, then dtype (the result's, read from it).
KILN_ABI_OP(qavg_pool2d, {
  const Pool2dParams p = abi::pool2d_params(a, false);
  (void)a.i();
  qavg_pool2d_out(a.t(0), {&a.t(1), &a.t(2), &a.t(3), &a.t(4)}, p, a.t(5));
})
// Tensors: input, weight, weight_scale, weight_zero_point, bias (optional), result.
KILN_ABI_OP(qlinear_dynamic, qlinear_dynamic_out(a.t(0), a.t(1), a.t(2), a.t(3), a.opt(4), a.t(5)))
