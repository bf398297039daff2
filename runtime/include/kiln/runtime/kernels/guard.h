#pragma once
// Run-time checks compiled code and artifacts carry (kiln.guard).

#include <string_view>

#include "kiln/runtime/tensor.h"

namespace kiln::kernels {

// Throws GuardError unless x's single element equals `value` (NaN equals NaN): the check a trace
// keeps for each value it read back. `where` is the source location the value was read at.
void guard(const TensorImpl& x, double value, std::string_view where);

}  // namespace kiln::kernels
