// kiln_abi_* wrappers for the run-time checks (kiln.guard).

#include "decode.h"
#include "kiln/runtime/kernels/guard.h"

using namespace kiln;

// Tensors: input; attributes: value, where (a string).
KILN_ABI_OP(guard, {
  const double value = a.f();
  kernels::guard(a.t(0), value, a.str());
})
