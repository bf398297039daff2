#include "kiln/runtime/kernels/guard.h"

#include <cmath>

#include "kiln/runtime/error.h"
#include "kiln/runtime/kernels/copy.h"

namespace kiln::kernels {

void guard(const TensorImpl& x, double value, std::string_view where) {
  KILN_CHECK(x.numel() == 1, "guard", "expected a tensor of one element, got shape ", x.sizes());
  double actual = 0;
  copy_(*from_blob(&actual, x.sizes(), DType::Float64), x);
  if (actual == value || (std::isnan(actual) && std::isnan(value))) return;
  throw GuardError("guard", detail::concat("the trace read the value ", value, " at ", where,
                                           "; this input gives ", actual,
                                           ": the computation would take a path the trace did "
                                           "not record. Trace again with this input"));
}

}  // namespace kiln::kernels
