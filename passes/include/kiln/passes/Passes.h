#pragma once
// kiln's MLIR passes. Each pass lives in its own file under passes/ and is registered here so
// kiln-opt can run it by name. This header names MLIR types only by forward declaration.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

namespace mlir {
class Operation;
class Pass;
class OpPassManager;
class ModuleOp;
}  // namespace mlir

namespace kiln::passes {

// --kiln-cleanup: canonicalization (x*1, x+0, double transpose, reshape chains, no-op shape ops),
// constant folding of small constant subgraphs, CSE and dead-code removal.
std::unique_ptr<mlir::Pass> create_cleanup_pass();

// --kiln-freeze: eval-mode folds (dropout -> identity). Weights are bound by freeze() below.
std::unique_ptr<mlir::Pass> create_freeze_pass();

// Bytes of one weight, owned by the caller: they must outlive the module and stay unchanged.
struct WeightRef {
  const void* data = nullptr;
  size_t bytes = 0;
};
using WeightMap = std::map<std::string, WeightRef>;

// Replaces each @forward argument named (func attr kiln.arg_names) in `weights` by a kiln.constant
// referencing the caller's memory (a DenseResourceElementsAttr over an unmanaged blob: no copy),
// removes those arguments, then applies the eval-mode folds. The types come from the signature;
// the byte size must match. Returns false after emitting an MLIR diagnostic on the module (no
// @forward, size mismatch, unaligned data, a name no argument has).
bool freeze(mlir::ModuleOp module, const WeightMap& weights);

// --kiln-fold-batch-norm: eval-mode batch_norm over a conv2d / linear with constant weights folds
// into new weight and bias constants.
std::unique_ptr<mlir::Pass> create_fold_batch_norm_pass();

// --kiln-fuse-epilogues: conv2d / linear absorb a constant bias add, a residual add and one
// activation into kiln.conv2d_fused / kiln.linear_fused.
std::unique_ptr<mlir::Pass> create_fuse_epilogues_pass();

// --kiln-fuse-block-epilogues: the elementwise chain (kiln.fused, or one elementwise op) that is
// the only user of a float32 conv2d / linear (fused or not) / matmul (rank >= 1) and maps its
// result in place is marked kiln.block_epilogue, to run on each block of the output the GEMM
// finishes (after elementwise fusion).
std::unique_ptr<mlir::Pass> create_fuse_block_epilogues_pass();
// --kiln-fuse-block-prologues: the elementwise chain (kiln.fused, or one elementwise op) whose
// float32 result is only the input of a linear / linear_fused (or the left operand of a matmul by
// a [K, N] matrix) is marked kiln.block_prologue and moved to just before it, for the product to
// compute it block by block as it reads it (after block epilogues).
std::unique_ptr<mlir::Pass> create_fuse_block_prologues_pass();

// --kiln-fuse-mbconv: expand 1x1 -> depthwise -> project 1x1 chains of kiln.conv2d_fused
// (MobileNetV2's inverted residual) become one kiln.mbconv when the expanded tensor holds at least
// `min_bytes` (without an expansion: x, and at least `no_expand_min_bytes`; the runtime runs it
// band by band), or when one image's share of it is at most `small_max_bytes` (channels-last);
// blocks in between run as fast unfused (see FuseMBConv.cpp). The strategy is recorded on the op.
// kiln::jit::save passes the target description's values (runtime/target.h mbconv_*); these
// defaults (Zen 4's) serve kiln-opt and the pass tests.
struct MBConvThresholds {
  int64_t min_bytes = int64_t(1) << 20;
  int64_t no_expand_min_bytes = int64_t(8) << 20;
  int64_t small_max_bytes = int64_t(640) << 10;  // -1: no small blocks
};
std::unique_ptr<mlir::Pass> create_fuse_mbconv_pass(const MBConvThresholds& thresholds = {});
// --kiln-fold-qdq: dequantize -> conv2d / linear / add (-> relu) -> quantize, the QDQ form of an
// int8 layer, becomes one kiln.qconv2d / kiln.qlinear / kiln.qadd (a float bias becomes int32 at
// x_scale * w_scale when the scales and bias are constants); an average pool between them,
// kiln.qavg_pool2d.
std::unique_ptr<mlir::Pass> create_fold_qdq_pass();
// --kiln-fuse-qconv-add: kiln.qadd of a kiln.qconv2d's single-use result, read at the
// convolution's own scale and zero point, becomes one kiln.qconv2d_add (the add applied to each
// span of the convolution's output while it is in cache).
std::unique_ptr<mlir::Pass> create_fuse_qconv_add_pass();
// Whether --kiln-fold-qdq runs `op` on the bytes when it reads a per-tensor dequantize: it only
// moves or selects its one input's values (the schema's view ops; max_pool2d without its
// indices). kiln::quant's report asks the same question.
bool moves_values_only(mlir::Operation* op);
// Whether --kiln-fold-qdq makes `op` a kiln.qavg_pool2d when it sits between a per-tensor
// dequantize and a quantize: an avg_pool2d, or an adaptive_avg_pool2d whose windows all have
// one size (a global pool).
bool average_pool_on_bytes(mlir::Operation* op);
// --kiln-insert-qdq: a quantization plan written on the IR (kiln.qparams on values, kiln.qweight
// on conv2d / linear: see InsertQuantDequant.cpp) becomes quantize/dequantize pairs and int8
// weight constants, the form --kiln-fold-qdq folds.
std::unique_ptr<mlir::Pass> create_insert_qdq_pass();
// --kiln-fuse-conv-avgpool: a conv2d / conv2d_fused without residual whose only user is an
// adaptive_avg_pool2d to 1x1 (a classifier head) becomes one kiln.conv2d_avgpool.
std::unique_ptr<mlir::Pass> create_fuse_conv_avgpool_pass();
// --kiln-matmul-to-linear: kiln.matmul(x, W) with W a constant float32 [K, N] matrix read by
// nothing else becomes kiln.linear(x, Wᵀ) (a new transposed constant), so its epilogue fuses.
std::unique_ptr<mlir::Pass> create_matmul_to_linear_pass();
// --kiln-recognize-gelu: x * 0.5 * (1 + erf(x / sqrt(2))) in elementwise ops (ONNX exports
// before opset 20) becomes kiln.gelu, which epilogue fusion then takes into a linear.
std::unique_ptr<mlir::Pass> create_recognize_gelu_pass();
// --kiln-recognize-layer-norm: (x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) [* w] [+ b]
// over trailing dims (ONNX exports before opset 17) becomes kiln.layer_norm.
std::unique_ptr<mlir::Pass> create_recognize_layer_norm_pass();
// --kiln-fuse-attention: matmul(q, kᵀ) -> scale -> mask add -> softmax -> matmul(., v), each
// intermediate used only by the chain, becomes one kiln.attention (seq_first when q, k, v and the
// result are transposes of a sequence-first layout).
std::unique_ptr<mlir::Pass> create_fuse_attention_pass();
// --kiln-mbconv-channels-last: consecutive kiln.mbconv blocks that run channels-last hand their
// activations over channels-last (channels_last_out / channels_last_in), where only such blocks
// read them.
std::unique_ptr<mlir::Pass> create_mbconv_channels_last_pass();
// --kiln-eliminate-gradients (module pass): keep @forward's first kiln.num_outputs results, drop
// backward/optimizer ops, in-out results and arguments nothing reads; optionally return the loss's
// prediction input instead of the loss; eval_mode switches batch_norm/dropout to inference.
std::unique_ptr<mlir::Pass> create_eliminate_gradients_pass(bool drop_loss_head = false,
                                                            bool eval_mode = true);

// --kiln-fuse-elementwise: chains of elementwise ops become kiln.fused regions.
std::unique_ptr<mlir::Pass> create_fuse_elementwise_pass();

// --kiln-choose-layout: records the conv activation layout (NCHW today; see ChooseLayout.cpp).
std::unique_ptr<mlir::Pass> create_choose_layout_pass();

struct PipelineOptions {
  bool drop_loss_head = false;
  // --kiln-fuse-mbconv's thresholds (min 0: fuse every matching block with an expansion; small
  // -1: no small ones).
  MBConvThresholds mbconv;
  // --kiln-fuse-block-epilogues (false: the chains after convs and linears stay their own kernels;
  // benchmarks compare the two).
  bool block_epilogues = true;
  // --kiln-fuse-block-prologues in the training pipeline (the one the JIT and AOT compilers run;
  // false: a chain computing a linear's input stays its own kernel). The inference pipeline runs
  // it only for a module that will carry generated code (`native_code`): a portable plan runs
  // the chain as an instruction of its own anyway.
  bool block_prologues = true;
  // The module's groups will be compiled as an artifact's generated code
  // (codegen::compile_native_code), which runs block prologues too.
  bool native_code = false;
  // Memory planning runs last (it annotates the final values): `memory_plan` when set, else the
  // hook from set_memory_plan_hook(), else --kiln-plan-memory. plan_memory = false skips it.
  bool plan_memory = true;
  std::function<void(mlir::OpPassManager&)> memory_plan;
};

// Module-level pipelines (pm anchored on builtin.module). Inference: freeze folds, cleanup,
// gradient elimination, cleanup, bn folding, epilogue fusion, mbconv fusion, cleanup, elementwise
// fusion, cleanup, layout, block epilogues, memory plan. Training: cleanup, epilogue fusion,
// elementwise fusion, cleanup, layout, block epilogues, block prologues, memory plan.
void build_inference_pipeline(mlir::OpPassManager& pm, const PipelineOptions& options = {});
void build_training_pipeline(mlir::OpPassManager& pm, const PipelineOptions& options = {});

// Replaces the default memory planner in both pipelines (an empty function restores it).
void set_memory_plan_hook(std::function<void(mlir::OpPassManager&)> hook);

// Registers the pipelines (kiln-inference-pipeline, kiln-training-pipeline) by name.
void register_pipelines();

// --kiln-plan-memory: liveness, in-place and view aliasing, greedy-by-size arena offsets
// (`kiln.arena_offsets` on ops; `kiln.arg_offsets`, `kiln.arena_bytes`, `kiln.naive_bytes` on the
// func). Arguments from `kiln.num_inputs` on (captured parameters) are weights, not arena values.
std::unique_ptr<mlir::Pass> create_plan_memory_pass();

// Registers every kiln pass and pipeline with MLIR's global pass registry.
void register_passes();

}  // namespace kiln::passes
