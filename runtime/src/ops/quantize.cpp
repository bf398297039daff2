// Registry entries of the quantization ops (kernels/quantize.h): quantize, dequantize,
// fake_quantize and its gradient. Operands: input (grad, input for the gradient), scale,
// zero_point.

#include "kiln/runtime/kernels/quantize.h"
#include "common.h"
#include "kiln/runtime/kernels/qgemm.h"

namespace kiln::rt::ops {
namespace {

struct FakeQuant : KernelParams {
  kernels::FakeQuantParams p;
};

std::unique_ptr<KernelParams> decode_axis(const AttrMap& a) {
  auto p = std::make_unique<IntParams>();
  p->v[0] = a.i("axis");
  return p;
}
std::unique_ptr<KernelParams> decode_fake(const AttrMap& a) {
  auto p = std::make_unique<FakeQuant>();
  p->p.axis = a.i("axis");
  p->p.quant_min = a.i("quant_min");
  p->p.quant_max = a.i("quant_max");
  return p;
}

// quantize's dtype attribute is the result's element type, which the kernel reads from `out`.
std::unique_ptr<KernelParams> decode_quantize(const AttrMap& a) {
  auto p = decode_axis(a);
  (void)a.i("dtype");
  return p;
}

void run_quantize(const KernelCall& c) {
  kernels::quantize_out(in(c, 0), in(c, 1), in(c, 2), {params<IntParams>(c).v[0]}, out(c));
}
void run_dequantize(const KernelCall& c) {
  kernels::dequantize_out(in(c, 0), in(c, 1), in(c, 2), {params<IntParams>(c).v[0]}, out(c));
}
void run_fake_quantize(const KernelCall& c) {
  kernels::fake_quantize_out(in(c, 0), in(c, 1), in(c, 2), params<FakeQuant>(c).p, out(c));
}
void run_fake_quantize_backward(const KernelCall& c) {
  kernels::fake_quantize_backward_out(in(c, 0), in(c, 1), in(c, 2), in(c, 3),
                                      params<FakeQuant>(c).p, out(c));
}

// qlinear / qconv2d: operands input, input_scale, input_zero_point, weight, weight_scale,
// weight_zero_point, bias (optional), output_scale, output_zero_point.
struct QGemm : KernelParams {
  kernels::Conv2dParams conv;
  bool relu = false;
};
std::unique_ptr<KernelParams> decode_qgemm(const AttrMap& a) {
  auto p = std::make_unique<QGemm>();
  if (a.op() == "qconv2d") p->conv = conv2d_params(a);
  (void)a.i("dtype");  // the result's element type, which the kernel reads from `out`
  p->relu = a.b("relu");
  return p;
}
kernels::QuantizedOperands qoperands(const KernelCall& c, bool relu) {
  return {&in(c, 1), &in(c, 2), &in(c, 4), &in(c, 5), opt_in(c, 6), &in(c, 7), &in(c, 8), relu};
}
void run_qlinear(const KernelCall& c) {
  kernels::qlinear_out(in(c, 0), in(c, 3), qoperands(c, params<QGemm>(c).relu), out(c));
}
void run_qconv2d(const KernelCall& c) {
  const auto& p = params<QGemm>(c);
  kernels::qconv2d_out(in(c, 0), in(c, 3), qoperands(c, p.relu), p.conv, out(c));
}

}  // namespace

void register_quantize(Registry& r) {
  r.add(with_signature({.name = "qlinear", .decode = decode_qgemm, .run = run_qlinear}));
  r.add(with_signature({.name = "qconv2d", .decode = decode_qgemm, .run = run_qconv2d}));
  r.add(with_signature({.name = "quantize", .decode = decode_quantize, .run = run_quantize}));
  r.add(with_signature({.name = "dequantize", .decode = decode_axis, .run = run_dequantize}));
  r.add(with_signature({.name = "fake_quantize", .decode = decode_fake, .run = run_fake_quantize}));
  r.add(with_signature({.name = "fake_quantize_backward",
                        .decode = decode_fake,
                        .run = run_fake_quantize_backward}));
}

}  // namespace kiln::rt::ops
