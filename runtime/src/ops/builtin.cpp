// The builtin registry: every kernel kiln ships. Kept apart from the core so a program that
// registers only what its model needs does not link the rest.

#include "common.h"

namespace kiln::rt {

void register_builtin_kernels(Registry& r) {
  register_abi_core(r);
  ops::register_elementwise(r);
  ops::register_shape(r);
  ops::register_nn(r);
  ops::register_reduce(r);
  ops::register_loss(r);
  ops::register_backward(r);
  ops::register_indexing(r);
  ops::register_random(r);
  ops::register_checks(r);
  ops::register_quantize(r);
}

const Registry& builtin_registry() {
  static const Registry registry = [] {
    Registry r;
    register_builtin_kernels(r);
    return r;
  }();
  return registry;
}

}  // namespace kiln::rt
