// QuantizeLinear / DequantizeLinear as kiln.quantize / kiln.dequantize (the same definition:
// true division, round half to even, saturation), per tensor or per axis (opset 13), so that
// --kiln-fold-qdq turns an ONNX Runtime QDQ model's conv / linear layers into kiln.qconv2d /
// kiln.qlinear when it is saved.

#include "graph.h"
#include "kiln/quant.h"

namespace kiln::onnx::detail {
namespace {

using C = const NodeContext&;

// A scale or zero point as the quantize ops take it: 0-dim (per tensor) or 1-dim along `axis`.
Tensor param(C c, const Tensor& x, const Tensor& v) {
  if (v.dim() == 0 || v.numel() == 1) return v.reshape(std::vector<int64_t>{});
  if (v.dim() != 1) c.fail("scale and zero point must be scalars or 1-d");
  const int64_t axis = norm_axis(c, c.i("axis", 1), x.dim());
  if (v.size(0) != x.size(axis)) c.fail("per-axis scale of the wrong length");
  return v;
}

// The zero point, or zeros of `dtype` shaped like the scale when the node has none.
Tensor zero_point(C c, const Tensor& x, const Tensor& scale, DType dtype) {
  if (c.has(2)) return param(c, x, c.in(2));
  return zeros(scale.sizes(), TensorOptions(dtype));
}

TensorList quantize_linear(C c) {
  const Tensor& x = c.in(0);
  const DType out = c.has(2) ? c.in(2).dtype() : DType::UInt8;
  if (out != DType::UInt8 && out != DType::Int8) c.fail("only int8 and uint8 are supported");
  const Tensor scale = param(c, x, c.in(1)).to(DType::Float32);
  const int64_t axis = scale.dim() == 1 ? norm_axis(c, c.i("axis", 1), x.dim()) : 1;
  return {quantize(x.to(DType::Float32), scale, zero_point(c, x, scale, out), out, axis)};
}

TensorList dequantize_linear(C c) {
  const Tensor& x = c.in(0);
  const Tensor scale = param(c, x, c.in(1)).to(DType::Float32);
  const int64_t axis = scale.dim() == 1 ? norm_axis(c, c.i("axis", 1), x.dim()) : 1;
  return {dequantize(x, scale, zero_point(c, x, scale, x.dtype()), axis)};
}

}  // namespace

std::vector<OpDef> quant_ops() {
  return {{"QuantizeLinear", 10, quantize_linear}, {"DequantizeLinear", 10, dequantize_linear}};
}

}  // namespace kiln::onnx::detail
