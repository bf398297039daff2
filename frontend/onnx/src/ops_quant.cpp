// QuantizeLinear / DequantizeLinear, computed exactly in floating point (quantized models import
// as float models whose Q/DQ pairs round and saturate as the int8 kernels would; kiln's integer
// ops, #26, will take the pairs over). Per tensor or per axis (opset 13).

#include "graph.h"

namespace kiln::onnx::detail {
namespace {

using C = const NodeContext&;

// scale (and zero point) shaped to broadcast against x along `axis` (per axis), or as is.
Tensor along_axis(C c, const Tensor& x, const Tensor& v) {
  if (v.dim() == 0 || v.numel() == 1) return v.reshape(std::vector<int64_t>{});
  if (v.dim() != 1) c.fail("scale and zero point must be scalars or 1-d");
  const int64_t axis = norm_axis(c, c.i("axis", 1), x.dim());
  if (v.size(0) != x.size(axis)) c.fail("per-axis scale of the wrong length");
  std::vector<int64_t> shape(static_cast<size_t>(x.dim()), 1);
  shape[axis] = v.size(0);
  return v.reshape(shape);
}

TensorList quantize_linear(C c) {
  const Tensor& x = c.in(0);
  const Tensor scale = along_axis(c, x, c.in(1));
  const DType out = c.has(2) ? c.in(2).dtype() : DType::UInt8;
  if (out != DType::UInt8 && out != DType::Int8) c.fail("only int8 and uint8 are supported");
  const double lo = out == DType::UInt8 ? 0 : -128, hi = out == DType::UInt8 ? 255 : 127;
  Tensor q = round(div(x.to(DType::Float32), scale.to(DType::Float32)));  // half to even
  if (c.has(2)) q = add(q, along_axis(c, x, c.in(2)).to(DType::Float32));
  return {clamp(q, lo, hi).to(out)};
}

TensorList dequantize_linear(C c) {
  const Tensor& x = c.in(0);
  Tensor v = x.to(DType::Float32);
  if (c.has(2)) v = sub(v, along_axis(c, x, c.in(2)).to(DType::Float32));
  return {mul(v, along_axis(c, x, c.in(1)).to(DType::Float32))};
}

}  // namespace

std::vector<OpDef> quant_ops() {
  return {{"QuantizeLinear", 10, quantize_linear}, {"DequantizeLinear", 10, dequantize_linear}};
}

}  // namespace kiln::onnx::detail
