// The op schema's columns at run time: for each op of ir/ops.toml, the backends it declares and
// its traits (generated into KilnOpSchema.inc at build time). `kiln ops` prints them; the
// coverage tests compare them with what each backend implements; the tracer refuses to record an
// op the schema does not declare for eager.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace kiln::ir {

enum OpBackend : uint32_t {
  kBackendEager = 1u << 0,
  kBackendInterpreter = 1u << 1,
  kBackendRuntime = 1u << 2,
  kBackendLlvm = 1u << 3,
  kBackendAarch64 = 1u << 4,
  kBackendCuda = 1u << 5,
};

enum OpTrait : uint32_t {
  kTraitElementwise = 1u << 0,
  kTraitReduction = 1u << 1,
  kTraitView = 1u << 2,
  kTraitAlias = 1u << 3,    // the result may share the input's buffer (the memory plan aliases it)
  kTraitInplace = 1u << 4,  // the kernel may write its result over a same-shaped input
  kTraitRandom = 1u << 5,
  kTraitFused = 1u << 6,
  kTraitEffect = 1u << 7,  // a run-time check: kept even when nothing uses it
  // The result is operand 0 with some elements replaced or added to (index_add, scatter*,
  // masked_fill): the kernel may compute it in operand 0's own buffer, skipping the copy.
  kTraitUpdate = 1u << 8,
};

struct OpSchema {
  std::string_view name;  // without the "kiln." prefix
  uint32_t backends;      // OpBackend bits
  uint32_t traits;        // OpTrait bits
  int32_t num_operands;   // optional operands count (kiln.none when absent); -1: variadic
  int32_t num_results;
};

// Every op of the schema, in its order.
std::span<const OpSchema> op_schemas();
// The op named `name` ("kiln.add" or "add"), or nullptr.
const OpSchema* find_op_schema(std::string_view name);

}  // namespace kiln::ir
