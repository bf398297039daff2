#include "kiln/ir/OpSchema.h"

namespace kiln::ir {
namespace {

constexpr OpSchema kSchemas[] = {
#include "kiln/ir/KilnOpSchema.inc"
};

}  // namespace

std::span<const OpSchema> op_schemas() {
  return kSchemas;
}

const OpSchema* find_op_schema(std::string_view name) {
  if (name.starts_with("kiln.")) name.remove_prefix(5);
  for (const OpSchema& s : kSchemas)
    if (s.name == name) return &s;
  return nullptr;
}

}  // namespace kiln::ir
