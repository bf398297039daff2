#pragma once
// Integer linear and convolution (ONNX QLinearMatMul / QLinearConv, PyTorch's quantized::linear
// and quantized::conv2d) with int32 accumulation and a requantize epilogue:
//
//   acc[o]  = sum_k (x[k] - x_zp) * (w[o, k] - w_zp[o])             exact, int32
//   y[o]    = clamp(round_half_even((acc[o] + bias[o]) * m[o]) + y_zp, lo, hi)
//   m[o]    = x_scale * w_scale[o] / y_scale                         float32, as written
//
// x is uint8 or int8 with one scale and zero point; w int8 or uint8 with one per output channel
// (1-dim, `o`) or one in all (0-dim); bias int32 at scale x_scale * w_scale[o] (the TFLite /
// ONNX convention), or absent; y uint8 or int8 with one scale and zero point. [lo, hi] is y's
// dtype range, narrowed to [y_zp, hi] by `relu` (relu in the integer domain: quantize(relu(v)) is
// max(quantize(v), y_zp)). acc + bias wraps in int32, as ONNX Runtime's kernels add them; the
// product is rounded to float32 before the multiplier (the ONNX Runtime / XNNPACK float
// requantization). Sizes whose products could overflow int32 are refused.
//
// The reference kernels (`*_reference_out`) are plain loops over this formula; every fast kernel
// matches them bit for bit (tests/runtime/test_qgemm.cpp). The fast path packs x - x_zp and
// w - w_zp as int16 pairs and multiplies them exactly: `vpmaddwd` on AVX2 (two int16 products
// summed into int32, no saturation, unlike `vpmaddubsw`), a portable kernel elsewhere; with
// AVX-512 VNNI it packs the raw bytes and `vpdpbusd` sums four u8 x s8 products per lane
// without saturation, the activations' zero point folded into the bias.

#include <cstdint>
#include <memory>

#include "kiln/runtime/kernels/conv.h"
#include "kiln/runtime/tensor.h"

namespace kiln::kernels {

// The quantization parameters of a linear or conv: each a 0-dim float32 scale or integer zero
// point, except w_scale / w_zero_point which may be 1-dim with one value per output channel.
struct QuantizedOperands {
  const TensorImpl* x_scale = nullptr;
  const TensorImpl* x_zero_point = nullptr;
  const TensorImpl* w_scale = nullptr;
  const TensorImpl* w_zero_point = nullptr;
  const TensorImpl* bias = nullptr;  // int32 [out channels], or null
  const TensorImpl* y_scale = nullptr;
  const TensorImpl* y_zero_point = nullptr;
  bool relu = false;
};

// Weights packed once (constant weights of an artifact or a module): the microkernel family is
// chosen when they are prepared and stays theirs. Calls without them pack the weights each time.
struct PreparedQWeight;
using PreparedQWeightPtr = std::shared_ptr<const PreparedQWeight>;
// `rows`: the input's rows (elements / in_features) when known, 0 when not; the family may
// depend on it (AMX only for inputs that fill its tiles).
PreparedQWeightPtr prepare_qlinear_weight(const TensorImpl& w, const QuantizedOperands& q,
                                          DType x_dtype, DType out_dtype, int64_t rows = 0);
PreparedQWeightPtr prepare_qconv2d_weight(const TensorImpl& w, const QuantizedOperands& q,
                                          const Conv2dParams& p, DType x_dtype, DType out_dtype);
size_t prepared_nbytes(const PreparedQWeight& w);
const char* prepared_family(const PreparedQWeight& w);  // "avx512-vnni", "avx2", "portable"

// y[..., N] = requantize(x[..., K] . w[N, K]^T + bias); y's dtype (uint8 or int8) is out's.
void qlinear_out(const TensorImpl& x, const TensorImpl& w, const QuantizedOperands& q,
                 TensorImpl& out, const PreparedQWeight* prepared = nullptr);
// y[N, OC, OH, OW] from x[N, C, H, W] and w[OC, C / groups, KH, KW]; padding reads x_zp (the
// quantized zero), as PyTorch's and ONNX Runtime's int8 convolutions pad. With p.channels_last,
// y[N, OH, OW, OC] from x[N, H, W, C] (what MLAS, oneDNN and XNNPACK keep between int8 layers):
// depthwise, 1x1 and direct convolutions then run without a layout change (a 1x1 one is the
// product of the image's pixel rows with the weights), other geometries through NCHW copies.
void qconv2d_out(const TensorImpl& x, const TensorImpl& w, const QuantizedOperands& q,
                 const Conv2dParams& p, TensorImpl& out, const PreparedQWeight* prepared = nullptr);
// kiln.qconv2d_add, a residual block's convolution and add in one pass: out = qadd(qconv2d(x, w)
// as conv_dtype at q.y_scale / q.y_zero_point, other) with other of out's shape and the add's
// parameters `r` (other's scale and zero point, out's, relu after the add). Each image's output
// is added as soon as the convolution has written it, while it is in cache; the bytes are the
// two ops'.
struct QResidualOperands {
  const TensorImpl *other_scale = nullptr, *other_zero_point = nullptr;
  const TensorImpl *output_scale = nullptr, *output_zero_point = nullptr;
  bool relu = false;
};
void qconv2d_add_out(const TensorImpl& x, const TensorImpl& w, const QuantizedOperands& q,
                     const Conv2dParams& p, DType conv_dtype, const TensorImpl& other,
                     const QResidualOperands& r, TensorImpl& out,
                     const PreparedQWeight* prepared = nullptr);

// Dynamic quantization (PyTorch's quantized::linear_dynamic, ONNX DynamicQuantizeLinear +
// MatMulInteger): x float32 is quantized per call to uint8 with affine_qparams(min(x), max(x),
// 0, 255) (kernels/quantize.h; NaN or Inf is refused), then
//   y[..., o] = fma(float(acc[o]), x_scale * w_scale[o], bias[o])      float32
// with acc the int32 sums above and bias float32 [N] (or null: 0). w as for qlinear; `prepared`
// from prepare_qlinear_dynamic_weight.
void qlinear_dynamic_out(const TensorImpl& x, const TensorImpl& w, const TensorImpl& w_scale,
                         const TensorImpl& w_zero_point, const TensorImpl* bias, TensorImpl& out,
                         const PreparedQWeight* prepared = nullptr);
PreparedQWeightPtr prepare_qlinear_dynamic_weight(const TensorImpl& w, const TensorImpl& w_scale,
                                                  const TensorImpl& w_zero_point, int64_t rows = 0);

// The same by plain loops over the formula: the references every fast kernel must equal.
void qlinear_reference_out(const TensorImpl& x, const TensorImpl& w, const QuantizedOperands& q,
                           TensorImpl& out);
void qlinear_dynamic_reference_out(const TensorImpl& x, const TensorImpl& w,
                                   const TensorImpl& w_scale, const TensorImpl& w_zero_point,
                                   const TensorImpl* bias, TensorImpl& out);
void qconv2d_reference_out(const TensorImpl& x, const TensorImpl& w, const QuantizedOperands& q,
                           const Conv2dParams& p, TensorImpl& out);

// The integer microkernel family. Auto follows the active target description: AMX-INT8 tiles
// (`tdpbusd` / `tdpbsud`) where it has amx_int8 and Linux grants the tile state, else AVX-512
// VNNI (`vpdpbusd` on byte quads, u8 x s8), else AVX-VNNI (the same on 256 bits); each where the
// weights allow (int8, zero points 0; others take the next family), else AVX2 (int16 pairs); on
// arm64 NEON's I8MM mixed-sign dot products (`usdot` / `sudot`) for the same weights, else its
// Armv8.2 dot products (`sdot`, the activations offset to int8); else the portable kernel. Tests
// pick one explicitly to check each against the reference on any CPU that has it.
enum class QGemmIsa : uint8_t { Auto, Amx, Avx512Vnni, AvxVnni, Avx2, NeonI8mm, NeonDot, Portable };
bool qgemm_isa_available(QGemmIsa isa);
// Throws kiln::Error naming the ISA where this CPU lacks it.
void set_qgemm_isa(QGemmIsa isa);
// The family in use (never Auto).
QGemmIsa qgemm_isa();
const char* qgemm_isa_name(QGemmIsa isa);

}  // namespace kiln::kernels
