// kiln::jit::save: pipeline + writer glue (the writer lives in codegen, which may not see the
// frontend; this library may see both).

#include "kiln/jit/save.h"

#include <fstream>
#include <map>
#include <stdexcept>

#include "kiln/codegen/artifact.h"
#include "kiln/passes/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

namespace kiln::jit {

std::vector<uint8_t> save_to_bytes(const TracedFunction& fn, const SaveOptions& options) {
  mlir::OwningOpRef<mlir::ModuleOp> module = fn.module().clone();
  auto forward = module->lookupSymbol<mlir::func::FuncOp>("forward");
  KILN_CHECK(forward, "kiln::jit::save", "the traced module has no @forward");
  mlir::Builder b(&fn.context());
  forward->setAttr("kiln.num_inputs", b.getI64IntegerAttr(static_cast<int64_t>(fn.num_inputs())));
  if (options.optimize) {
    // The inference pipeline: canonicalize, then plan memory (last: it annotates final values).
    mlir::PassManager pm(&fn.context());
    pm.addNestedPass<mlir::func::FuncOp>(passes::create_cleanup_pass());
    pm.addNestedPass<mlir::func::FuncOp>(passes::create_plan_memory_pass());
    KILN_CHECK(mlir::succeeded(pm.run(*module)), "kiln::jit::save", "the pass pipeline failed");
  }

  codegen::ArtifactOptions o;
  o.name = options.name;
  o.producer = options.producer;
  o.num_inputs = static_cast<int64_t>(fn.num_inputs());
  o.input_names = options.input_names;
  o.output_names = options.output_names;
  o.embed_mlir_bytecode = options.embed_mlir_bytecode;
  o.metadata = options.metadata;
  // Parameter bytes: the captured tensors, made contiguous (kept alive until written).
  std::vector<Tensor> keep;
  for (size_t k = 0; k < fn.captures().size(); ++k) {
    Tensor t = fn.captures()[k].contiguous();
    keep.push_back(t);
    const auto* p = static_cast<const uint8_t*>(t.impl()->data());
    o.weights[fn.arg_names()[fn.num_inputs() + k]] =
        std::span<const uint8_t>(p, t.impl()->nbytes());
  }
  const size_t num_results = forward.getFunctionType().getNumResults();
  o.num_outputs = static_cast<int64_t>(num_results - fn.mutated_captures().size());
  for (size_t k : fn.mutated_captures())
    o.state_args.push_back(static_cast<int64_t>(fn.num_inputs() + k));
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
