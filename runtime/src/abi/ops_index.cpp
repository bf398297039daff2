// kiln_abi_* wrappers for indexing, sorting and joining.

#include "decode.h"
#include "kiln/runtime/kernels/copy.h"
#include "kiln/runtime/kernels/indexing.h"

using namespace kiln;
using namespace kiln::kernels;

namespace {
// The functional form of an in-place kernel: out = x, then the update on out.
void init_from(abi::Args& a, size_t out) {
  copy_(a.t(out), a.t(0));
}
// Tensors 0..n-2 are the inputs, n-1 the output.
std::vector<const TensorImpl*> inputs(const abi::Args& a) {
  std::vector<const TensorImpl*> v;
  for (size_t k = 0; k + 1 < a.num_tensors(); ++k) v.push_back(&a.t(k));
  return v;
}
}  // namespace

KILN_ABI_OP(index_select, index_select_out(a.t(0), a.i(), a.t(1), a.t(2)))
KILN_ABI_OP(index_add, {
  init_from(a, 3);
  const int64_t dim = a.i();
  index_add_(a.t(3), dim, a.t(1), a.t(2), a.f());
})
KILN_ABI_OP(index_copy, {
  init_from(a, 3);
  index_copy_(a.t(3), a.i(), a.t(1), a.t(2));
})
KILN_ABI_OP(gather, gather_out(a.t(0), a.i(), a.t(1), a.t(2)))
KILN_ABI_OP(scatter, {
  init_from(a, 3);
  scatter_(a.t(3), a.i(), a.t(1), a.t(2));
})
KILN_ABI_OP(scatter_value, {
  init_from(a, 2);
  const int64_t dim = a.i();
  scatter_(a.t(2), dim, a.t(1), a.f());
})
KILN_ABI_OP(scatter_add, {
  init_from(a, 3);
  scatter_add_(a.t(3), a.i(), a.t(1), a.t(2));
})
KILN_ABI_OP(masked_fill, {
  init_from(a, 2);
  masked_fill_(a.t(2), a.t(1), a.f());
})
KILN_ABI_OP(pad, {
  auto p = a.arr();
  const auto mode = static_cast<PadMode>(a.i());
  pad_out(a.t(0), p, mode, a.f(), a.t(1));
})
KILN_ABI_OP(one_hot, one_hot_out(a.t(0), a.t(1)))
KILN_ABI_OP(topk, {
  const int64_t k = a.i(), dim = a.i();
  const bool largest = a.b(), sorted = a.b();
  topk_out(a.t(0), k, dim, largest, sorted, a.t(1), a.t(2));
})
KILN_ABI_OP(sort, {
  const int64_t dim = a.i();
  sort_out(a.t(0), dim, a.b(), a.t(1), a.t(2));
})
KILN_ABI_OP(argsort, {
  const int64_t dim = a.i();
  argsort_out(a.t(0), dim, a.b(), a.t(1));
})
KILN_ABI_OP(cat, {
  auto in = inputs(a);
  cat_out(in, a.i(), a.t(a.num_tensors() - 1));
})
KILN_ABI_OP(stack, {
  auto in = inputs(a);
  stack_out(in, a.i(), a.t(a.num_tensors() - 1));
})
