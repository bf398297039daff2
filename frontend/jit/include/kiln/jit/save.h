#pragma once
// kiln::jit::save — a traced function -> a `.kiln` artifact the runtime (kiln_runtime alone) can
// load and run: runs the inference pipeline (cleanup, memory planning), takes the parameter
// values from the trace's captures, and writes the file (kiln/codegen/artifact.h). A training
// step's host scalars (an optimizer's "SGD.group0.lr", betas, ...: TracedFunction::host_values)
// are inputs of the artifact after the trace's own, so the caller passes them at every run (a
// scheduler works); its parameters and optimizer state are state the session updates in place.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kiln/runtime/registry.h"
#include "kiln/trace/trace.h"

namespace kiln::jit {

struct SaveOptions {
  std::string name = "model";
  std::string producer = "kiln::jit::save";
  // Input/output names (default: the trace's argument names, "output<i>").
  std::vector<std::string> input_names, output_names;
  bool optimize = true;  // run the pass pipeline before writing
  // Inverted-residual blocks (MobileNetV2) whose expanded tensor has at least this many bytes run
  // as one fused kernel (--kiln-fuse-mbconv); -1: the active target description's
  // mbconv_banded_min_bytes (its L2; KILN_CPU or the host), 0: every one with an expansion. The
  // other thresholds, and the strategy recorded on each block, come from that description too.
  int64_t mbconv_min_bytes = -1;
  // Store the module too (MLIR bytecode whose weight constants refer to the artifact's own
  // weights, so it adds little): what `kiln compile M.kiln` compiles to native code.
  bool embed_mlir_bytecode = true;
  std::vector<std::pair<std::string, std::string>> metadata;
  // Embed generated code for these CPU targets next to the portable plan ("host", "x86-64-v3",
  // "x86-64-v4", "aarch64", or a triple[:cpu]; kiln/codegen/native_code.h): fused elementwise
  // chains, softmax, log-softmax, layer norm, reductions over the last dim and the copies the
  // portable plan makes of permutes, transposes, slices, selects and expands then run code
  // compiled for the CPU when a runtime's CPU can run one of them (and
  // LoadOptions::allow_native_code), runtime kernels otherwise. Most specialized first. Needs the
  // system toolchain to link (as kiln compile).
  std::vector<std::string> native_code;
  // The elementwise chain after a conv2d, linear or matmul whose value only it reads runs as
  // the product's block epilogue (passes::create_fuse_block_epilogues_pass): with native code,
  // generated code the product's kernel calls on each block of its output, in place (kiln.fbs:
  // Instruction.block_epilogue); false: an instruction of its own after the product.
  bool block_epilogues = true;
  // With native code, a chain whose value is only a linear's (or a matmul's by a [K, N] matrix)
  // input runs as its block prologue (passes::create_fuse_block_prologues_pass), computed a block
  // of rows at a time as the product reads it, never stored whole (Instruction.block_prologue);
  // false: an instruction of its own before the product.
  bool block_prologues = true;
  // The kernels of the runtime that will run the artifact (a program may register only what its
  // models need); null: every builtin kernel. Saving fails, before anything is written, with one
  // error listing every op it lacks and where each is.
  const rt::Registry* registry = nullptr;
};

// Throws kiln::Error when the module cannot become an artifact.
std::vector<uint8_t> save_to_bytes(const TracedFunction& fn, const SaveOptions& options = {});
void save(const TracedFunction& fn, const std::string& path, const SaveOptions& options = {});

}  // namespace kiln::jit
