// Registry entries of the quantization ops (kernels/quantize.h): quantize, dequantize,
// fake_quantize and its gradient. Operands: input (grad, input for the gradient), scale,
// zero_point.

#include "kiln/runtime/kernels/quantize.h"
#include "common.h"

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

}  // namespace

void register_quantize(Registry& r) {
  r.add(with_signature({.name = "quantize", .decode = decode_quantize, .run = run_quantize}));
  r.add(with_signature({.name = "dequantize", .decode = decode_axis, .run = run_dequantize}));
  r.add(with_signature({.name = "fake_quantize", .decode = decode_fake, .run = run_fake_quantize}));
  r.add(with_signature({.name = "fake_quantize_backward",
                        .decode = decode_fake,
                        .run = run_fake_quantize_backward}));
}

}  // namespace kiln::rt::ops
