#pragma once
// kiln::jit::freeze — bind a traced function's parameters and buffers into its module.

#include "kiln/trace/trace.h"

namespace kiln::jit {

// Turns every captured tensor (named parameters and buffers, other captures) of `fn` into a
// kiln.constant that references the tensor's storage (kiln::passes::freeze: a dense resource
// attribute, no copy) and applies the eval-mode folds (dropout -> identity). Afterwards @forward
// takes only the inputs and `fn` keeps the captured storage alive; writing to those tensors later
// changes what the frozen function computes, as it would in eager mode. Throws kiln::Error for a
// trace that writes its captures (a training step: eliminate gradients first, or do not freeze).
void freeze(TracedFunction& fn);

}  // namespace kiln::jit
