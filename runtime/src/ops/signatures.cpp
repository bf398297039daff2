// The builtin kernels' signatures, generated from the op schema (ir/ops.toml): input and output
// counts, optional inputs, attributes with their types and defaults.

#include <cmath>

#include "common.h"
#include "kiln/runtime/error.h"

namespace kiln::rt {
namespace {
#include "op_signatures.inc"
}  // namespace

std::span<const OpSignature> op_signatures() {
  return kOpSignatures;
}

const OpSignature* find_op_signature(std::string_view name) {
  for (const OpSignature& s : kOpSignatures)
    if (s.name == name) return &s;
  return nullptr;
}

KernelDef with_signature(KernelDef impl) {
  const OpSignature* s = find_op_signature(impl.name);
  KILN_CHECK(s, "kernel registry", "'", impl.name,
             "' is not an op of the schema (ir/ops.toml): register it with an explicit signature");
  impl.min_inputs = s->min_inputs;
  impl.max_inputs = s->max_inputs;
  impl.num_outputs = s->num_outputs;
  impl.optional_inputs = s->optional_inputs;
  impl.attrs = s->attrs;
  return impl;
}

}  // namespace kiln::rt
