// The default pass pipelines: --kiln-inference-pipeline (what the compiler runs on a frozen
// model) and --kiln-training-pipeline (for compiled training steps, where weights stay arguments
// and every value backward needs must survive). Both end with memory planning
// (--kiln-plan-memory, passes/MemoryPlan.cpp) unless PipelineOptions or set_memory_plan_hook()
// substitute another planner or turn it off.

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

#include "kiln/passes/Passes.h"

namespace kiln::passes {
namespace {

std::function<void(mlir::OpPassManager&)>& memory_plan_hook() {
  static std::function<void(mlir::OpPassManager&)> hook;
  return hook;
}

void append_memory_plan(mlir::OpPassManager& pm, const PipelineOptions& options) {
  if (!options.plan_memory) return;
  if (options.memory_plan) {
    options.memory_plan(pm);
  } else if (memory_plan_hook()) {
    memory_plan_hook()(pm);
  } else {
    pm.addNestedPass<mlir::func::FuncOp>(create_plan_memory_pass());
  }
}

}  // namespace

void set_memory_plan_hook(std::function<void(mlir::OpPassManager&)> hook) {
  memory_plan_hook() = std::move(hook);
}

void build_inference_pipeline(mlir::OpPassManager& pm, const PipelineOptions& options) {
  pm.addNestedPass<mlir::func::FuncOp>(create_freeze_pass());
  pm.addNestedPass<mlir::func::FuncOp>(create_cleanup_pass());
  pm.addPass(create_eliminate_gradients_pass(options.drop_loss_head, /*eval_mode=*/true));
  pm.addNestedPass<mlir::func::FuncOp>(create_cleanup_pass());
  pm.addNestedPass<mlir::func::FuncOp>(create_fold_batch_norm_pass());
  // Before epilogue fusion, which would take the float layers' relu.
  pm.addNestedPass<mlir::func::FuncOp>(create_fold_qdq_pass());
  pm.addNestedPass<mlir::func::FuncOp>(create_fuse_qconv_add_pass());
  // Before epilogue fusion, which then takes the bias add and activation after the product.
  pm.addNestedPass<mlir::func::FuncOp>(create_matmul_to_linear_pass());
  pm.addNestedPass<mlir::func::FuncOp>(create_recognize_gelu_pass());
  pm.addNestedPass<mlir::func::FuncOp>(create_recognize_layer_norm_pass());
  // Before elementwise fusion, which would take the scale and the mask add.
  pm.addNestedPass<mlir::func::FuncOp>(create_fuse_attention_pass());
  pm.addNestedPass<mlir::func::FuncOp>(create_fuse_epilogues_pass());
  pm.addNestedPass<mlir::func::FuncOp>(create_fuse_mbconv_pass(options.mbconv));
  pm.addNestedPass<mlir::func::FuncOp>(create_fuse_conv_avgpool_pass());
  pm.addNestedPass<mlir::func::FuncOp>(create_mbconv_channels_last_pass());
  pm.addNestedPass<mlir::func::FuncOp>(create_cleanup_pass());
  pm.addNestedPass<mlir::func::FuncOp>(create_fuse_elementwise_pass());
  pm.addNestedPass<mlir::func::FuncOp>(create_cleanup_pass());
  pm.addNestedPass<mlir::func::FuncOp>(create_choose_layout_pass());
  // The layout's conversions between consecutive channels-last layers cancel.
  pm.addNestedPass<mlir::func::FuncOp>(create_cleanup_pass());
  // Last: it moves products next to their chains, which cleanup's CSE could move apart again.
  if (options.block_epilogues)
    pm.addNestedPass<mlir::func::FuncOp>(create_fuse_block_epilogues_pass());
  // Block prologues only with generated code: a portable plan runs the chain as its own
  // instruction anyway, and moving it down to its linear would only keep its inputs live longer.
  if (options.block_prologues && options.native_code)
    pm.addNestedPass<mlir::func::FuncOp>(create_fuse_block_prologues_pass());
  append_memory_plan(pm, options);
}

void build_training_pipeline(mlir::OpPassManager& pm, const PipelineOptions& options) {
  pm.addNestedPass<mlir::func::FuncOp>(create_cleanup_pass());
  // Only single-use chains fuse, so values the backward pass reads stay materialized.
  pm.addNestedPass<mlir::func::FuncOp>(create_fuse_epilogues_pass());
  pm.addNestedPass<mlir::func::FuncOp>(create_fuse_elementwise_pass());
  pm.addNestedPass<mlir::func::FuncOp>(create_cleanup_pass());
  pm.addNestedPass<mlir::func::FuncOp>(create_choose_layout_pass());
  if (options.block_epilogues)
    pm.addNestedPass<mlir::func::FuncOp>(create_fuse_block_epilogues_pass());
  if (options.block_prologues)
    pm.addNestedPass<mlir::func::FuncOp>(create_fuse_block_prologues_pass());
  append_memory_plan(pm, options);
}

void register_pipelines() {
  static bool done = false;
  if (done) return;
  done = true;
  mlir::PassPipelineRegistration<>(
      "kiln-inference-pipeline",
      "freeze folds, cleanup, gradient elimination, bn folding, matmul by constants to linear, "
      "GELU and layer norm recognition, "
      "attention fusion, conv/linear "
      "epilogue fusion, "
      "mbconv fusion, conv + global average pool fusion, channels-last mbconv chains, elementwise "
      "fusion, cleanup, layout, block epilogues",
      [](mlir::OpPassManager& pm) { build_inference_pipeline(pm); });
  mlir::PassPipelineRegistration<>("kiln-training-pipeline",
                                   "cleanup, epilogue and elementwise fusion, layout, block "
                                   "epilogues and prologues for training steps",
                                   [](mlir::OpPassManager& pm) { build_training_pipeline(pm); });
}

}  // namespace kiln::passes
