#pragma once
// Running a `.kiln` artifact (DESIGN.md §5): `Model::load` maps the file, verifies its structure
// (FlatBuffers Verifier) and its meaning (every index, offset, size, dtype and shape in range,
// every kernel registered, target and CPU features matching) and decodes each instruction's
// attributes once. A Model is immutable and shared; weights are read in place from the mapping.
//
// A `Session` owns one arena (allocated once) and a prebuilt tensor per value, and runs the plan:
// no allocation on the hot path except the returned outputs (`run_into` writes into the caller's
// buffers instead). Sessions are independent: N threads may each run their own session of one
// model concurrently.
//
//   auto model = kiln::rt::Model::load("m.kiln");
//   kiln::rt::Session session(model);
//   std::vector<kiln::TensorImplPtr> y = session.run({x.get()});

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/runtime/registry.h"
#include "kiln/runtime/tensor.h"

namespace kiln::rt {

// The newest artifact format this runtime reads; it reads every older one too. 2 added
// control-flow instructions (If/For); 3 generated instructions (compiled code with a portable
// form) and splat weights. A writer marks a file with the oldest version holding what it uses.
inline constexpr uint32_t kFormatVersion = 3;

// A named input or output and its guard (dtype + shape), checked on every call.
struct TensorSpec {
  std::string name;
  DType dtype = DType::Float32;
  Dims shape;
};

struct LoadOptions {
  // Skip the target triple / CPU feature check (tools that only inspect a foreign artifact).
  bool allow_foreign_target = false;
  // Map the file with MAP_POPULATE: page-table entries for the weights are made at load, so the
  // first run does not pay a page fault per 4 KiB of weights (see bench/artifact.cpp).
  bool populate = true;
  // Let kernels prepare constant weights once (conv, linear and matmul weights packed for the
  // GEMM, conv weights transformed for Winograd: faster runs for more memory, e.g. ResNet-18
  // +71 MiB). false: kernels read the weights as stored (for memory-constrained devices).
  bool prepare_weights = true;
  // Load the artifact's compiled code for this host (an ELF object, dlopen'ed: it runs native
  // code). false, for services that load files they do not trust (the verifier bounds what the
  // interpreted plan can do, not what native code does): no code is loaded; generated
  // instructions run their portable form, and a file with compiled instructions lacking one is
  // refused at load.
  bool allow_native_code = true;
  // The most times one instruction may run in a call: the product of the trip counts of the loops
  // around it (0: no bound). A file beyond it is refused at load, so a service that loads files
  // it does not trust bounds each call's work (the fuzzer uses it).
  uint64_t max_instruction_runs = 0;
};

// A code object the artifact embeds (generated code for one target) and whether this runtime
// runs it.
struct CodeObjectInfo {
  std::string target_triple;
  std::vector<std::string> cpu_features;  // the CPU must have them all
  size_t bytes = 0;
  size_t num_symbols = 0;
  bool loaded = false;
  std::string why_not;  // when not loaded: "is for another architecture", ...
};

// What `kiln inspect` shows; filled from the verified file.
struct ModelStats {
  size_t file_bytes = 0;
  size_t weight_bytes = 0;
  size_t code_bytes = 0;
  size_t num_slots = 0;
  size_t num_instructions = 0;
  uint64_t arena_bytes = 0;
  uint64_t naive_bytes = 0;
  std::vector<std::pair<std::string, size_t>> op_counts;  // kernel or symbol -> instructions
  std::vector<CodeObjectInfo> code_objects;
  // Generated instructions, and those of them running compiled code here (the others run their
  // portable form).
  size_t generated_instructions = 0, native_instructions = 0;
  // Of those, elementwise chains a product's kernel runs here on each block of its output
  // (generated block epilogues), and chains a linear's or matmul's kernel runs to compute each
  // block of its input (generated block prologues).
  size_t block_epilogues = 0, block_prologues = 0;
};

// What the kernels prepared once from the model's constant weights (GEMM-packed conv, linear and
// matmul weights, Winograd-transformed conv weights), shared by all sessions: extra memory for
// speed.
struct PreparedStats {
  bool ready = false;  // false until the first Session has been created
  size_t bytes = 0;
  std::vector<std::pair<std::string, size_t>> counts;  // "conv2d_fused: winograd" -> instructions
};

class Session;

class Model {
 public:
  // Maps and verifies `path`; throws kiln::Error naming what is wrong and where.
  static std::shared_ptr<const Model> load(const std::string& path,
                                           const Registry& registry = builtin_registry(),
                                           const LoadOptions& options = {});
  // Verifies an in-memory artifact (copied into an aligned buffer the model owns).
  static std::shared_ptr<const Model> from_bytes(std::span<const uint8_t> bytes,
                                                 const Registry& registry = builtin_registry(),
                                                 const LoadOptions& options = {});
  ~Model();

  const std::string& name() const;
  const std::string& producer() const;
  const std::string& target_triple() const;
  const std::vector<std::string>& cpu_features() const;
  const std::vector<TensorSpec>& inputs() const;
  const std::vector<TensorSpec>& outputs() const;
  // A training step's state (parameters and optimizer state it updates in place), by weight name;
  // empty for an inference model. Session::state reads their current values.
  std::vector<std::string> state_names() const;
  const std::vector<std::pair<std::string, std::string>>& metadata() const;
  // The module's MLIR bytecode when the writer embedded it (for re-compilation), else empty.
  std::span<const uint8_t> mlir_bytecode() const;
  // The bytes of the blob stored under `name` (a weight is stored under its argument's name), or
  // nullopt: with mlir_bytecode, what `kiln compile` needs to compile the artifact again.
  std::optional<std::span<const uint8_t>> blob(std::string_view name) const;
  uint64_t arena_bytes() const;
  const ModelStats& stats() const;
  PreparedStats prepared_stats() const;
  // Index of the named input/output, or -1.
  int input_index(std::string_view name) const;
  int output_index(std::string_view name) const;
  // One line per instruction (kernel, operand slots, shapes): `kiln inspect --ops`.
  std::string describe_plan() const;

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class Session {
 public:
  explicit Session(std::shared_ptr<const Model> model);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Checks the guards, runs the plan and returns new tensors holding the outputs.
  std::vector<TensorImplPtr> run(std::span<const TensorImpl* const> inputs);
  std::vector<TensorImplPtr> run(std::initializer_list<const TensorImpl*> inputs) {
    return run(std::span<const TensorImpl* const>(inputs.begin(), inputs.size()));
  }
  // Inputs by name (any order); every input must be given exactly once.
  std::vector<TensorImplPtr> run_named(
      std::span<const std::pair<std::string_view, const TensorImpl*>> inputs);
  // Same, writing into caller-provided outputs of the declared shapes and dtypes.
  void run_into(std::span<const TensorImpl* const> inputs, std::span<TensorImpl* const> outputs);

  const Model& model() const { return *model_; }

  // Per-instruction wall time of the runs that follow (off by default; when off it costs one
  // branch per instruction). Enabling again starts from zero.
  void enable_profiling(bool on = true);
  struct InstructionTime {
    size_t index;      // in the plan (kiln inspect --ops)
    std::string what;  // kernel or symbol, output shape, prepared algorithm
    double total_ms;   // over `runs` runs
    uint64_t runs;
    bool generated;  // code the compiler generated (a symbol), not a library kernel
  };
  std::vector<InstructionTime> profile() const;
  // Current value of a training-step state tensor (weights updated in place), by weight name.
  const TensorImpl* state(std::string_view name) const;

 private:
  void execute(std::span<const TensorImpl* const> inputs);
  void run_range(size_t begin, size_t end);
  void run_instruction(size_t k);
  void prepare_model();
  void direct_inputs();
  void scratch_gaps();
  std::shared_ptr<const Model> model_;
  struct State;
  std::unique_ptr<State> s_;
};

// "[1,3,224,224] f32": the form guard messages use.
std::string describe_spec(std::span<const int64_t> shape, DType dtype);

}  // namespace kiln::rt
