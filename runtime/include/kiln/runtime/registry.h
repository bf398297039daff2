#pragma once
// The kernel registry: op name (as in the IR, `conv2d` for `kiln.conv2d`) -> the runtime kernel
// that runs it and its argument schema (DESIGN.md §1, "one op, one name, everywhere"). The artifact
// executor looks every instruction up here at load time; an artifact naming a kernel that is not
// registered is rejected before anything runs.
//
// Attributes are decoded once, at load, into a per-instruction parameter struct (`KernelParams`);
// running an instruction never parses an attribute again.
//
// The registry is a plain object: the core (loader, verifier, executor) does not reference any
// kernel, so a program that registers only the kernels its model needs links only those
// (`register_builtin_kernels` / `builtin_registry()` pull in all of them).

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/runtime/tensor.h"

namespace kiln::rt {

enum class AttrType : uint8_t { Int = 0, Float, Bool, Ints, String };
std::string_view attr_type_name(AttrType t);

// One attribute of an op: its name, type, and whether an artifact must carry it; when it may be
// absent, the value the kernel assumes (numbers and booleans as a double; Ints default to empty).
struct AttrSpec {
  std::string_view name;
  AttrType type;
  bool required = true;
  double fallback = 0;
};

// An attribute as stored in the artifact (views into the mapped file, valid while the model lives).
struct AttrValue {
  std::string_view name;
  AttrType type = AttrType::Int;
  int64_t i = 0;
  double f = 0;
  std::span<const int64_t> ints;
  std::string_view s;
};

// The attributes of one instruction, with typed accessors that throw kiln::Error naming the op,
// the attribute, and what was expected. Used only while decoding (at load).
// An optional attribute absent from the artifact reads as its spec's fallback (the op schema's
// default) through the accessors without a fallback argument; the ones with one return theirs.
class AttrMap {
 public:
  AttrMap(std::string_view op, std::span<const AttrValue> values,
          std::span<const AttrSpec> specs = {})
      : op_(op), values_(values), specs_(specs) {}
  const AttrValue* find(std::string_view name) const;
  // Whether the op has this attribute (present, or in its signature): decoders shared by several
  // ops read only the attributes of the op at hand.
  bool declares(std::string_view name) const;
  int64_t i(std::string_view name) const;
  int64_t i(std::string_view name, int64_t fallback) const;
  double f(std::string_view name) const;
  double f(std::string_view name, double fallback) const;
  bool b(std::string_view name) const;
  bool b(std::string_view name, bool fallback) const;
  std::span<const int64_t> ints(std::string_view name) const;
  std::string_view s(std::string_view name) const;
  // An Ints attribute of exactly n values (stride, padding, ...).
  std::span<const int64_t> ints(std::string_view name, size_t n) const;
  std::string_view op() const { return op_; }

 private:
  const AttrValue& get(std::string_view name, AttrType type) const;
  const AttrSpec* optional_spec(std::string_view name) const;  // nullptr: required or unknown
  std::string_view op_;
  std::span<const AttrValue> values_;
  std::span<const AttrSpec> specs_;
};

// Decoded attributes of one instruction; each kernel derives its own.
struct KernelParams {
  virtual ~KernelParams() = default;
};

// An elementwise chain the artifact's generated code computes on each block of a product's output
// while it is in cache (kiln.fbs: Instruction.block_epilogue; kernels::BlockEpilogue): fn(ctx, c,
// offset, ldc, rows, cols) maps c[r * ldc + j], element offset + r * ldc + j of the dense float32
// output, in place.
using BlockEpilogueFn = void (*)(const void* ctx, float* c, int64_t offset, int64_t ldc,
                                 int64_t rows, int64_t cols);

// Operands of one call: absent optional inputs are nullptr. Outputs are preallocated by the
// executor with the shapes and dtypes the artifact declares.
struct KernelCall {
  const KernelParams* params;
  std::span<TensorImpl* const> inputs;
  std::span<TensorImpl* const> outputs;
  // What KernelDef::prepare returned for this instruction (null: nothing prepared).
  const void* prepared = nullptr;
  // Only for a kernel whose KernelDef::block_epilogue is set: the generated chain to run on each
  // finished block of output 0 (null: none).
  BlockEpilogueFn block_fn = nullptr;
  const void* block_ctx = nullptr;
  // Only for a kernel whose KernelDef::block_prologue is set: generated code computing input 0
  // block by block (that input's tensor then holds no values; null: none).
  BlockEpilogueFn prologue_fn = nullptr;
  const void* prologue_ctx = nullptr;
};

// Work done once per instruction before its first run, from the inputs that are constants (the
// model's weights that no training step writes): conv weights packed for the GEMM microkernel or
// transformed for Winograd. Shared read-only by every session of the model.
struct PreparedInputs {
  std::shared_ptr<const void> data;  // handed to run as KernelCall::prepared
  size_t bytes = 0;                  // memory it holds (reported in Model::prepared_stats)
  std::string_view algorithm;        // what was prepared ("winograd", "gemm"): static storage
};

struct KernelDef {
  std::string_view name;
  int min_inputs = 1;
  int max_inputs = 1;  // -1: variadic
  int num_outputs = 1;
  std::span<const AttrSpec> attrs = {};
  // Attributes -> parameters (may throw kiln::Error). nullptr: the kernel takes no attributes.
  std::unique_ptr<KernelParams> (*decode)(const AttrMap&) = nullptr;
  void (*run)(const KernelCall&) = nullptr;
  // Bit i set: input i may be absent (slot -1, passed as nullptr). Others must be present.
  uint32_t optional_inputs = 0;
  // An output may occupy exactly the bytes of an input (elementwise kernels computing in place,
  // views aliasing their input). Any other overlap between an instruction's operands is refused
  // at load: a kernel that checks its inputs (indices, shapes) and then overwrites them while
  // reading would read out of bounds.
  bool inplace_ok = false;
  // Output 0 may occupy exactly the bytes of input 0 (and of no other input): an update kernel
  // (index_add, scatter*, masked_fill: the op schema's `update` trait) computing its result in
  // its input's buffer, as a loop's carried output sequence is written; its copy of the input is
  // then skipped.
  bool update_ok = false;
  // Optional: `call` as in run (outputs preallocated, arena contents undefined); bit i of
  // `constant_inputs` set when input i is a constant whose values may be read now. nullptr result:
  // nothing to prepare.
  PreparedInputs (*prepare)(const KernelCall& call, uint32_t constant_inputs) = nullptr;
  // Bit i set: output i may be passed as nullptr, which the loader does when nothing reads it
  // (max_pool2d's indices in an inference plan): the kernel skips that work.
  uint32_t optional_outputs = 0;
  // The kernel runs KernelCall::block_fn on each block of its (float32, dense) output 0 it
  // finishes: a product whose elementwise chain the artifact's generated code computes.
  bool block_epilogue = false;
  // The kernel can compute its input 0 block by block with KernelCall::prologue_fn instead of
  // reading it: a linear or matmul whose input is an elementwise chain of generated code.
  bool block_prologue = false;
};

// What the op schema (ir/ops.toml) says about a kernel's interface: inputs (optional ones may be
// absent), outputs and attributes. Generated at build time; the builtin kernels take theirs from
// it.
struct OpSignature {
  std::string_view name;
  int min_inputs;
  int max_inputs;  // -1: variadic
  int num_outputs;
  uint32_t optional_inputs;
  std::span<const AttrSpec> attrs = {};
};
std::span<const OpSignature> op_signatures();
const OpSignature* find_op_signature(std::string_view name);
// `impl` (name, decode, run and the kernel's own flags) completed with the schema's signature for
// impl.name; an op the schema does not list is an error.
KernelDef with_signature(KernelDef impl);

class Registry {
 public:
  // Adds or replaces an entry (a later registration of the same name wins).
  void add(const KernelDef& def);
  const KernelDef* find(std::string_view name) const;
  std::vector<std::string_view> names() const;
  size_t size() const { return defs_.size(); }

  // Runtime functions an artifact's generated code may call (CodeObject.imports, by C ABI name:
  // "kiln_abi_alloc", ...), bound into the code when it is loaded. A runtime without those it
  // imports runs generated instructions in their portable form.
  void add_function(std::string_view name, void* fn);
  void* function(std::string_view name) const;

 private:
  std::vector<KernelDef> defs_;                           // sorted by name
  std::vector<std::pair<std::string, void*>> functions_;  // few: searched in order
};

// Every kernel kiln ships (elementwise, reductions, shapes, nn, fused conv/linear), and the
// functions of register_abi_core.
void register_builtin_kernels(Registry& r);
// The C ABI's core (kiln/runtime/abi.h: alloc and free, the scratch lease, parallel_for, the
// error slot) as functions generated code may import; the error slot is also how a session
// learns that generated code failed.
void register_abi_core(Registry& r);
// A process-wide registry holding the builtin kernels (built on first use, then read-only).
const Registry& builtin_registry();

}  // namespace kiln::rt
