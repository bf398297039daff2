// kiln_abi_* entry points of the schema's unary family (ir/ops.toml, generated list): what code
// generation calls for an op whose schema says lowering = "call" (it has no scalar formula in
// codegen). Tensors: input, out.

#include "decode.h"
#include "kiln/runtime/kernels/elementwise.h"

using namespace kiln;
using namespace kiln::kernels;

#define KILN_UNARY_OP(name, value, keeps_integers) \
  KILN_ABI_OP(name, unary_out(UnaryOp::value, a.t(0), a.t(1)))
#include "kiln/runtime/unary_ops.inc"
#undef KILN_UNARY_OP
