// kiln_abi_* wrappers for the random ops: pure functions of an explicit Philox state (seed,
// offset), returning the values and the advanced state, like the reference interpreter.

#include "decode.h"
#include "kiln/runtime/kernels/copy.h"
#include "kiln/runtime/kernels/random.h"

using namespace kiln;
using namespace kiln::kernels;

namespace {
// Tensors: state [2] i64, values, next_state [2] i64.
template <typename Fill>
void draw(abi::Args& a, Fill&& fill) {
  TensorImplPtr state = empty(a.t(0).sizes(), DType::Int64);
  copy_(*state, a.t(0));  // contiguous, whatever the operand's strides
  KILN_CHECK(state->numel() == 2, "random", "expected a [2] i64 generator state, got ",
             describe(a.t(0)));
  const int64_t* s = state->data_ptr<int64_t>();
  Generator gen(static_cast<uint64_t>(s[0]), static_cast<uint64_t>(s[1]));
  fill(a.t(1), gen);
  state->data_ptr<int64_t>()[1] = static_cast<int64_t>(gen.offset());
  copy_(a.t(2), *state);
}
}  // namespace

KILN_ABI_OP(uniform, {
  const double lo = a.f(), hi = a.f();
  draw(a, [&](TensorImpl& t, Generator& g) { uniform_(t, lo, hi, &g); });
})
KILN_ABI_OP(normal, {
  const double mean = a.f(), std = a.f();
  draw(a, [&](TensorImpl& t, Generator& g) { normal_(t, mean, std, &g); });
})
KILN_ABI_OP(randint, {
  const int64_t lo = a.i(), hi = a.i();
  draw(a, [&](TensorImpl& t, Generator& g) { randint_(t, lo, hi, &g); });
})
KILN_ABI_OP(dropout_mask, {
  const double p = a.f();
  draw(a, [&](TensorImpl& t, Generator& g) { dropout_mask_out(p, t, &g); });
})
