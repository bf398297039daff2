// The runtime's C ABI entry points by name, handed to the JIT as absolute symbols: referencing
// them here also keeps them in statically linked programs, whatever the linker would drop.

#include "abi_symbols.h"

#include "kiln/runtime/abi.h"

namespace kiln::jit {

const std::vector<std::pair<std::string, void*>>& abi_symbols() {
#define KILN_SYM(name) \
  { #name, reinterpret_cast < void*>(&name) }
  static const std::vector<std::pair<std::string, void*>> symbols = {
      KILN_SYM(kiln_abi_alloc),
      KILN_SYM(kiln_abi_free),
      KILN_SYM(kiln_abi_lease_begin),
      KILN_SYM(kiln_abi_lease_end),
      KILN_SYM(kiln_abi_parallel_for),
      KILN_SYM(kiln_abi_set_error),
#define KILN_ABI_OP_ENTRY(name) KILN_SYM(kiln_abi_##name),
#include "kiln/runtime/abi_ops.inc"
#undef KILN_ABI_OP_ENTRY
      KILN_SYM(kiln_abi_dropout),
      KILN_SYM(kiln_abi_masked_fill),
      KILN_SYM(kiln_abi_copy),
      KILN_SYM(kiln_abi_matmul_prepared),
      KILN_SYM(kiln_abi_linear_prepared),
      KILN_SYM(kiln_abi_linear_fused_prepared),
      KILN_SYM(kiln_abi_conv2d_prepared),
      KILN_SYM(kiln_abi_conv2d_fused_prepared),
      KILN_SYM(kiln_abi_conv2d_avgpool_prepared),
      KILN_SYM(kiln_abi_mbconv_prepared),
      KILN_SYM(kiln_abi_release_prepared),
      KILN_SYM(kiln_abi_matmul_epilogue),
      KILN_SYM(kiln_abi_linear_epilogue),
      KILN_SYM(kiln_abi_matmul_prologue),
      KILN_SYM(kiln_abi_linear_prologue),
      KILN_SYM(kiln_abi_linear_fused_prologue),
      KILN_SYM(kiln_abi_linear_fused_epilogue),
      KILN_SYM(kiln_abi_conv2d_epilogue),
      KILN_SYM(kiln_abi_conv2d_fused_epilogue),
  };
#undef KILN_SYM
  return symbols;
}

}  // namespace kiln::jit
