#pragma once
// The verified, decoded form of an artifact that sessions execute. Everything here was checked by
// the loader (loader.cpp); sessions trust it.

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/runtime/model.h"

namespace kiln::rt {

enum class SlotKind : uint8_t { Arena = 0, Weight = 1, None = 2 };

struct SlotInfo {
  SlotKind kind = SlotKind::None;
  DType dtype = DType::Float32;
  Dims shape;
  uint64_t offset = 0;  // Arena: byte offset
  uint32_t weight = 0;  // Weight: blob index
  size_t nbytes = 0;
  bool splat = false;  // Weight: the blob's one element repeated (expanded at load)
};

using CompiledFn = void (*)(void* const* operands);

enum class Control : uint8_t { None = 0, If = 1, For = 2, Generated = 3 };

struct InstrInfo {
  const KernelDef* def = nullptr;   // runtime kernel, or
  CompiledFn fn = nullptr;          // compiled function, or
  Control control = Control::None;  // a control instruction (kiln.fbs: Instruction)
  std::string name;                 // kernel name or symbol
  std::unique_ptr<KernelParams> params;
  std::vector<int32_t> inputs, outputs;  // slot indices, -1 = absent
  // Bit i: output i is not computed (KernelDef::optional_outputs and nothing reads its slot).
  uint32_t discarded_outputs = 0;
  // Control instructions: region sizes (instructions after this one), the slots copied at region
  // ends, the loop's range and counter slot. `staged`: a yield is another position's carried
  // slot, so the copies go through `outputs` (a parallel copy).
  uint32_t body_size = 0, else_size = 0;
  std::vector<int32_t> yields, else_yields, carried;
  int32_t counter = -1;
  int64_t begin = 0, end = 0, step = 1;
  bool staged = false;
  // The portable form of a generated instruction whose code runs (never executed).
  bool unused = false;
  // A product kernel whose output's elementwise chain (the generated instruction `block_chain`
  // right after it) its kernel runs on each finished block through `block_fn`; that instruction
  // then has `by_product` set and is skipped (kiln.fbs: Instruction.block_epilogue).
  BlockEpilogueFn block_fn = nullptr;
  uint32_t block_chain = 0;
  // Likewise a linear or matmul whose input 0 the generated instruction `prologue_chain` before
  // it computes block by block through `prologue_fn` (Instruction.block_prologue).
  BlockEpilogueFn prologue_fn = nullptr;
  uint32_t prologue_chain = 0;
  bool by_product = false;
};

struct BlobInfo {
  std::string name;
  const uint8_t* data = nullptr;
  size_t size = 0;
};

// The file's bytes: an mmap of the artifact or an owned aligned copy.
struct Mapping {
  const uint8_t* data = nullptr;
  size_t size = 0;
  bool mapped = false;
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping();
};

// A loaded code object (dlopen handle of a memfd).
struct CodeHandle {
  void* handle = nullptr;
  int fd = -1;
  ~CodeHandle();
};

struct Model::Impl {
  std::unique_ptr<Mapping> file;
  std::string name, producer, target_triple;
  std::vector<std::string> cpu_features;
  std::vector<TensorSpec> inputs, outputs;
  std::vector<uint32_t> input_slots, output_slots;
  std::vector<SlotInfo> slots;
  std::vector<InstrInfo> instrs;
  std::vector<BlobInfo> blobs;
  std::vector<std::pair<uint32_t, uint32_t>> state_updates;  // (value slot, weight blob)
  std::vector<std::pair<std::string, std::string>> metadata;
  std::vector<TensorImplPtr> weight_tensors;  // per slot; null unless a Weight slot
  std::vector<std::unique_ptr<CodeHandle>> code;
  // The registry's error slot (register_abi_core), read after each call of compiled code; null
  // when the registry has none (the code then reports no errors).
  char* (*take_error)() = nullptr;
  void (*free_error)(char*) = nullptr;
  uint64_t arena_bytes = 0;
  std::span<const uint8_t> mlir_bytecode;  // into the file
  ModelStats stats;
  // Per instruction, what its kernel prepared from constant weights (KernelDef::prepare): built
  // by the first session, then shared read-only.
  mutable std::once_flag prepare_once;
  mutable std::vector<PreparedInputs> prepared;
  mutable std::atomic<bool> prepared_ready{false};  // `prepared` is complete (read-only from now)
  bool prepare_weights = true;                      // LoadOptions::prepare_weights
};

// Loads an ELF shared object blob with memfd_create + dlopen; throws kiln::Error.
std::unique_ptr<CodeHandle> load_code_object(const uint8_t* data, size_t size,
                                             const std::string& what);
CompiledFn find_symbol(const CodeHandle& code, const std::string& symbol);

// The host this runtime runs on: architecture name as in a target triple ("x86_64", "aarch64").
std::string_view host_arch();
// Whether the CPU has `feature` ("avx2", "avx512f", ...); throws on a name it does not know.
bool host_has_feature(std::string_view feature);

std::unique_ptr<Model::Impl> verify_and_decode(std::unique_ptr<Mapping> file,
                                               const Registry& registry,
                                               const LoadOptions& options);

}  // namespace kiln::rt
