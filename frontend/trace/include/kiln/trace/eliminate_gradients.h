#pragma once
// kiln::jit::eliminate_gradients — turn a traced training step into the inference function it
// contains, as a callable TracedFunction.

#include "kiln/trace/trace.h"

namespace kiln::jit {

// Runs --kiln-eliminate-gradients (eval mode) and --kiln-cleanup on `fn`'s module and updates the
// calling convention to match: only the traced outputs are returned (with drop_loss_head, a loss
// output is replaced by its prediction input, e.g. the logits), the parameters are no longer
// written back, and inputs or captures nothing reads any more (loss targets, optimizer state)
// leave the argument list. Afterwards `fn` can be frozen (kiln::jit::freeze).
void eliminate_gradients(TracedFunction& fn, bool drop_loss_head = false);

}  // namespace kiln::jit
