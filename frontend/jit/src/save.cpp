// kiln::jit::save: pipeline + writer glue (the writer lives in codegen, which may not see the
// frontend; this library may see both).
//
// Inference functions are frozen (parameters and buffers become constants over the captured
// tensors' memory), then run through kiln::passes' inference pipeline (batch-norm folding,
// conv/linear epilogue fusion, elementwise fusion, ...) ending in --kiln-plan-memory; the
// constants become the artifact's weights. Training steps keep their parameters as arguments
// (state the session updates in place) and run the training pipeline.

#include "kiln/jit/save.h"

#include "arguments.h"
#include "pipeline.h"

#include <cstdio>
#include <fstream>
#include <map>
#include <stdexcept>

#include "kiln/codegen/aot.h"
#include "kiln/codegen/artifact.h"
#include "kiln/codegen/native_code.h"
#include "kiln/ir/KilnDialect.h"
#include "kiln/passes/Passes.h"
#include "kiln/runtime/registry.h"
#include "kiln/runtime/target.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

namespace kiln::jit {
namespace {

void add_memory_plan(mlir::OpPassManager& pm) {
  pm.addNestedPass<mlir::func::FuncOp>(passes::create_plan_memory_pass());
}

// Every op the artifact would run by name must be a kernel of `registry`: one error lists each
// op it lacks, with its location, before anything is written (generated code needs them too, for
// its portable form). The constants the writer stores as weights and fused regions (their body
// ops are checked) are not kernels.
void check_runtime_coverage(mlir::ModuleOp module, const rt::Registry& registry) {
  std::string missing;
  size_t count = 0, index = 0;
  auto forward = module.lookupSymbol<mlir::func::FuncOp>("forward");
  forward.walk<mlir::WalkOrder::PreOrder>([&](mlir::Operation* op) {
    if (op == forward.getOperation()) return mlir::WalkResult::advance();
    const size_t position = index++;  // as codegen numbers @forward's ops in its errors
    llvm::StringRef name = op->getName().getStringRef();
    // The runtime's registry is keyed by the artifact's kernel names ("conv2d" for kiln.conv2d).
    if (!name.consume_front("kiln.") ||
        mlir::isa<ir::NoneOp, ir::ConstantOp, ir::FusedOp, ir::YieldOp>(op) ||
        registry.find(std::string_view(name.data(), name.size())))
      return mlir::WalkResult::advance();
    std::string where;
    llvm::raw_string_ostream os(where);
    op->getLoc().print(os);
    missing += "\n  kiln." + name.str() + " (op #" + std::to_string(position) + " of @forward, " +
               where + ")";
    ++count;
    return mlir::WalkResult::advance();
  });
  KILN_CHECK(count == 0, "kiln::jit::save", "the runtime has no kernel for ", count,
             count == 1 ? " op" : " ops", " of this function:", missing);
}

}  // namespace

std::vector<uint8_t> save_to_bytes(const TracedFunction& fn, const SaveOptions& options) {
  mlir::MLIRContext& ctx = fn.context();
  mlir::OwningOpRef<mlir::ModuleOp> module = fn.module().clone();
  auto forward = module->lookupSymbol<mlir::func::FuncOp>("forward");
  KILN_CHECK(forward, "kiln::jit::save", "the traced module has no @forward");
  mlir::Builder b(&ctx);
  const size_t num_results = forward.getFunctionType().getNumResults();
  const bool training = !fn.mutated_captures().empty();
  const size_t num_outputs = num_results - fn.mutated_captures().size();
  // Host scalars (an optimizer's learning rate, betas, ...) become inputs after the trace's own.
  check_host_guards_hold(fn, "kiln::jit::save");
  const ArgumentOrder args = host_scalars_as_inputs(fn);
  const size_t num_inputs = args.num_inputs;
  const std::vector<bool>& host = args.host;
  const std::vector<int64_t>& position = args.position;
  if (num_inputs != fn.num_inputs()) permute_arguments(forward, args.order);
  forward->setAttr("kiln.num_inputs", b.getI64IntegerAttr(static_cast<int64_t>(num_inputs)));

  // Parameter bytes: the captured tensors, made contiguous (kept alive until written; frozen
  // constants point at them without a copy).
  std::vector<Tensor> keep;
  std::map<std::string, std::span<const uint8_t>> weights;
  passes::WeightMap frozen;
  for (size_t k = 0; k < fn.captures().size(); ++k) {
    if (host[k]) continue;  // an input now
    Tensor t = fn.captures()[k].detach().contiguous();
    keep.push_back(t);
    const auto* p = static_cast<const uint8_t*>(t.impl()->data());
    const std::string& name = fn.arg_names()[fn.num_inputs() + k];
    weights[name] = std::span<const uint8_t>(p, t.impl()->nbytes());
    frozen[name] = {p, t.impl()->nbytes()};
  }

  // With generated code the memory plan runs after the groups are marked (it keeps a group's
  // inputs live through the group and its outputs off its inputs' bytes).
  const bool native = !options.native_code.empty();
  const bool plan = options.optimize;
  if (options.optimize && !training) {
    forward->setAttr("kiln.num_outputs", b.getI64IntegerAttr(static_cast<int64_t>(num_outputs)));
    KILN_CHECK(passes::freeze(*module, frozen), "kiln::jit::save",
               "freezing the parameters failed");
    const std::string err = run_pipeline(ctx, *module, [&](mlir::OpPassManager& pm) {
      passes::PipelineOptions po;
      po.memory_plan = add_memory_plan;
      po.plan_memory = !native;
      po.block_epilogues = options.block_epilogues;
      po.block_prologues = options.block_prologues;
      po.native_code = native;
      // The fusion thresholds from the active target (KILN_CPU or the host): the artifact
      // records the blocks fused and the strategy chosen for each.
      const rt::TargetParams& tp = rt::target_params();
      po.mbconv.min_bytes =
          options.mbconv_min_bytes >= 0 ? options.mbconv_min_bytes : tp.mbconv_banded_min_bytes;
      po.mbconv.no_expand_min_bytes = tp.mbconv_no_expand_min_bytes;
      po.mbconv.small_max_bytes = tp.mbconv_whole_image_bytes;
      passes::build_inference_pipeline(pm, po);
    });
    KILN_CHECK(err.empty(), "kiln::jit::save", "inference pipeline: ", err);
  } else if (options.optimize) {
    const std::string err = run_pipeline(ctx, *module, [&](mlir::OpPassManager& pm) {
      passes::PipelineOptions po;
      po.memory_plan = add_memory_plan;
      po.plan_memory = !native;
      po.block_epilogues = options.block_epilogues;
      po.block_prologues = options.block_prologues;
      passes::build_training_pipeline(pm, po);
    });
    KILN_CHECK(err.empty(), "kiln::jit::save", "training pipeline: ", err);
  }

  check_runtime_coverage(*module, options.registry ? *options.registry : rt::builtin_registry());

  codegen::ArtifactOptions o;
  if (!options.native_code.empty()) {
    try {
      std::vector<codegen::Target> targets;
      for (const std::string& spec : options.native_code)
        targets.push_back(codegen::native_code_target(spec));
      o.code = codegen::compile_native_code(*module, targets);
    } catch (const codegen::AotError& e) {
      fail("kiln::jit::save", "generated code: ", e.what());
    }
    if (plan) {
      const std::string err = run_pipeline(ctx, *module, add_memory_plan);
      KILN_CHECK(err.empty(), "kiln::jit::save", "memory plan: ", err);
    }
  }
  o.name = options.name;
  o.producer = options.producer;
  o.num_inputs = static_cast<int64_t>(num_inputs);
  o.input_names = options.input_names;
  o.output_names = options.output_names;
  o.embed_mlir_bytecode = options.embed_mlir_bytecode;
  o.metadata = options.metadata;
  o.weights = weights;  // arguments still present (training, or optimize = false) read these
  o.num_outputs = static_cast<int64_t>(num_outputs);
  for (size_t k : fn.mutated_captures()) o.state_args.push_back(position[fn.num_inputs() + k]);
  try {
    return codegen::write_artifact(*module, o);
  } catch (const std::runtime_error& e) {
    fail("kiln::jit::save", e.what());
  }
}

void save(const TracedFunction& fn, const std::string& path, const SaveOptions& options) {
  const std::vector<uint8_t> bytes = save_to_bytes(fn, options);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  KILN_CHECK(f, "kiln::jit::save", "cannot open \"", path, "\" for writing");
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  KILN_CHECK(f, "kiln::jit::save", "cannot write \"", path, "\"");
}

}  // namespace kiln::jit
