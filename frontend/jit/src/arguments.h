#pragma once
// A traced function's @forward arguments in the order saved artifacts and AOT-compiled code take
// them: the trace's inputs, then its host scalars (an optimizer's learning rate, betas, ...:
// inputs the caller passes at every run, as the traced function read them before every call, so
// a scheduler drives the saved or compiled step too), then the other captured tensors (weights,
// or a training step's state).

#include <cstdint>
#include <vector>

#include "kiln/trace/trace.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace kiln::jit {

struct ArgumentOrder {
  std::vector<unsigned> order;    // new argument position -> the traced argument
  std::vector<int64_t> position;  // traced argument -> its new position
  std::vector<bool> host;         // per capture: a host scalar (an input now)
  size_t num_inputs = 0;          // the trace's inputs and the host scalars
};

ArgumentOrder host_scalars_as_inputs(const TracedFunction& fn);

// Saved and AOT code cannot check the trace's host guards (an optimizer's form: momentum != 0,
// first step): each must hold now, or `op` fails naming it. A trace of a first step (before the
// optimizer's state existed) fails here, as its form is already stale.
void check_host_guards_hold(const TracedFunction& fn, const char* op);

// Reorders @forward's arguments: new argument i is old argument order[i] (kiln.arg_names too).
void permute_arguments(mlir::func::FuncOp fn, const std::vector<unsigned>& order);

}  // namespace kiln::jit
