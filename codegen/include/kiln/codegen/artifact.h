#pragma once
// The artifact writer: a kiln module (@forward, after the inference pipeline) -> `.kiln` bytes
// (schema: runtime/schema/kiln.fbs). Runtime-kernel ops become instructions by name with their
// attributes; the groups compile_native_code marked (`kiln.symbol`, native_code.h) become
// generated instructions calling `code`, each followed by its ops as kernels; frozen
// `kiln.constant`s and still-unfrozen parameter arguments become 64-byte aligned weight blobs.
// Offsets come from --kiln-plan-memory when it ran; values it did not plan (or every value, when
// it did not run) get space of their own after the planned arena.
//
// MLIR appears only as forward declarations here.

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace mlir {
class ModuleOp;
}

namespace kiln::codegen {

// An ELF shared object for one target and the symbols instructions call in it.
struct CodeBlob {
  std::string target_triple;
  std::vector<std::string> cpu_features;
  std::vector<uint8_t> elf;
  std::vector<std::string> symbols;
  // Runtime functions the code calls, in the order its kiln_code_bind receives them.
  std::vector<std::string> imports;
};

// The dialect-resource key under which an embedded module refers to the artifact blob NAME:
// kArtifactBlobResourcePrefix + NAME (the resource itself carries no data).
inline constexpr char kArtifactBlobResourcePrefix[] = "kiln_artifact_blob.";

struct ArtifactOptions {
  std::string name = "model";
  std::string producer = "kiln";
  // @forward's first `num_inputs` arguments are inputs (-1: every argument without a weight).
  int64_t num_inputs = -1;
  // Names of the inputs and outputs (default: kiln.arg_names, then "output<i>").
  std::vector<std::string> input_names, output_names;
  // Bytes of the parameter arguments by name (kiln.arg_names), row-major, their dtype.
  std::map<std::string, std::span<const uint8_t>> weights;
  // Training steps: results from `num_outputs` on are new values of these argument indices.
  int64_t num_outputs = -1;
  std::vector<int64_t> state_args;
  std::string target_triple;  // empty: portable (runtime kernels only)
  std::vector<std::string> cpu_features;
  std::vector<CodeBlob> code;
  // Store the module as MLIR bytecode (for `kiln compile`); its weight constants refer to the
  // artifact's blobs by name (kArtifactBlobResourcePrefix) rather than holding their bytes.
  bool embed_mlir_bytecode = false;
  std::vector<std::pair<std::string, std::string>> metadata;
};

// Throws kiln::Error (naming the op) on what the artifact cannot express (dynamic shapes,
// unsupported attribute kinds, missing weights).
std::vector<uint8_t> write_artifact(mlir::ModuleOp module, const ArtifactOptions& options);
void write_artifact_file(mlir::ModuleOp module, const ArtifactOptions& options,
                         const std::string& path);

}  // namespace kiln::codegen
