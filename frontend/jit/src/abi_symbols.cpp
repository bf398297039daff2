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
      KILN_SYM(kiln_abi_matmul),
      KILN_SYM(kiln_abi_linear),
      KILN_SYM(kiln_abi_linear_fused),
      KILN_SYM(kiln_abi_conv2d),
      KILN_SYM(kiln_abi_conv2d_fused),
      KILN_SYM(kiln_abi_conv2d_prepared),
      KILN_SYM(kiln_abi_conv2d_fused_prepared),
      KILN_SYM(kiln_abi_conv2d_avgpool),
      KILN_SYM(kiln_abi_conv2d_avgpool_prepared),
      KILN_SYM(kiln_abi_mbconv),
      KILN_SYM(kiln_abi_mbconv_prepared),
      KILN_SYM(kiln_abi_release_prepared),
      KILN_SYM(kiln_abi_conv1d),
      KILN_SYM(kiln_abi_conv_transpose2d),
      KILN_SYM(kiln_abi_max_pool2d),
      KILN_SYM(kiln_abi_avg_pool2d),
      KILN_SYM(kiln_abi_adaptive_avg_pool2d),
      KILN_SYM(kiln_abi_interpolate),
      KILN_SYM(kiln_abi_interpolate_backward),
      KILN_SYM(kiln_abi_conv2d_backward),
      KILN_SYM(kiln_abi_max_pool2d_backward),
      KILN_SYM(kiln_abi_avg_pool2d_backward),
      KILN_SYM(kiln_abi_adaptive_avg_pool2d_backward),
      KILN_SYM(kiln_abi_batch_norm_backward),
      KILN_SYM(kiln_abi_batch_norm_update_stats),
      KILN_SYM(kiln_abi_batch_norm),
      KILN_SYM(kiln_abi_layer_norm),
      KILN_SYM(kiln_abi_group_norm),
      KILN_SYM(kiln_abi_embedding),
      KILN_SYM(kiln_abi_dropout),
      KILN_SYM(kiln_abi_sum),
      KILN_SYM(kiln_abi_mean),
      KILN_SYM(kiln_abi_prod),
      KILN_SYM(kiln_abi_amax),
      KILN_SYM(kiln_abi_amin),
      KILN_SYM(kiln_abi_max),
      KILN_SYM(kiln_abi_min),
      KILN_SYM(kiln_abi_argmax),
      KILN_SYM(kiln_abi_argmin),
      KILN_SYM(kiln_abi_var),
      KILN_SYM(kiln_abi_norm),
      KILN_SYM(kiln_abi_logsumexp),
      KILN_SYM(kiln_abi_softmax),
      KILN_SYM(kiln_abi_log_softmax),
      KILN_SYM(kiln_abi_softmax_backward),
      KILN_SYM(kiln_abi_log_softmax_backward),
      KILN_SYM(kiln_abi_cumsum),
      KILN_SYM(kiln_abi_cross_entropy),
      KILN_SYM(kiln_abi_cross_entropy_backward),
      KILN_SYM(kiln_abi_nll_loss),
      KILN_SYM(kiln_abi_mse_loss),
      KILN_SYM(kiln_abi_mse_loss_backward),
      KILN_SYM(kiln_abi_smooth_l1_loss),
      KILN_SYM(kiln_abi_binary_cross_entropy_with_logits),
      KILN_SYM(kiln_abi_index_select),
      KILN_SYM(kiln_abi_index_add),
      KILN_SYM(kiln_abi_gather),
      KILN_SYM(kiln_abi_scatter),
      KILN_SYM(kiln_abi_scatter_value),
      KILN_SYM(kiln_abi_scatter_add),
      KILN_SYM(kiln_abi_masked_fill),
      KILN_SYM(kiln_abi_pad),
      KILN_SYM(kiln_abi_one_hot),
      KILN_SYM(kiln_abi_topk),
      KILN_SYM(kiln_abi_sort),
      KILN_SYM(kiln_abi_argsort),
      KILN_SYM(kiln_abi_cat),
      KILN_SYM(kiln_abi_stack),
      KILN_SYM(kiln_abi_copy),
      KILN_SYM(kiln_abi_uniform),
      KILN_SYM(kiln_abi_normal),
      KILN_SYM(kiln_abi_randint),
      KILN_SYM(kiln_abi_dropout_mask),
  };
#undef KILN_SYM
  return symbols;
}

}  // namespace kiln::jit
