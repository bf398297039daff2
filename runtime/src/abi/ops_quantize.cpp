// kiln_abi_* wrappers for the quantization ops (attributes in the schema's order).

#include "decode.h"
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
