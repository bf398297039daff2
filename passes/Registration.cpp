#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassRegistry.h"

#include "kiln/passes/Passes.h"

namespace kiln::passes {

void register_passes() {
  static bool done = false;  // MLIR's registry refuses a second registration of a name
  if (done) return;
  done = true;
  mlir::registerPass([] { return create_cleanup_pass(); });
  mlir::registerPass([] { return create_freeze_pass(); });
  mlir::registerPass([] { return create_fold_batch_norm_pass(); });
  mlir::registerPass([] { return create_fuse_epilogues_pass(); });
  mlir::registerPass([] { return create_fuse_block_epilogues_pass(); });
  mlir::registerPass([] { return create_fuse_block_prologues_pass(); });
  mlir::registerPass([] { return create_fuse_mbconv_pass(); });
  mlir::registerPass([] { return create_fuse_conv_avgpool_pass(); });
  mlir::registerPass([] { return create_fuse_attention_pass(); });
  mlir::registerPass([] { return create_matmul_to_linear_pass(); });
  mlir::registerPass([] { return create_recognize_gelu_pass(); });
  mlir::registerPass([] { return create_recognize_layer_norm_pass(); });
  mlir::registerPass([] { return create_fold_qdq_pass(); });
  mlir::registerPass([] { return create_fuse_qconv_add_pass(); });
  mlir::registerPass([] { return create_insert_qdq_pass(); });
  mlir::registerPass([] { return create_mbconv_channels_last_pass(); });
  mlir::registerPass([] { return create_eliminate_gradients_pass(); });
  mlir::registerPass([] { return create_fuse_elementwise_pass(); });
  mlir::registerPass([] { return create_choose_layout_pass(); });
  register_pipelines();
  mlir::registerPass([] { return create_plan_memory_pass(); });
}

}  // namespace kiln::passes
