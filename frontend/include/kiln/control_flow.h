#pragma once
// Explicit control flow that survives tracing: the C++ answer to TorchScript's script mode.
// In eager mode these are plain `if` and `for`. Under kiln::jit::trace they record region ops
// (scf.if / scf.for) holding both branches or the loop body, instead of baking in the path the
// example inputs took; the JIT, AOT code and saved artifacts (the runtime's If/For
// instructions) all keep them.
//
// Under tracing the regions record forward computation only: gradients do not flow through a
// traced cond/loop (they run with grad mode off), and a branch or body may not write a tensor
// defined outside it in place — return the new value instead.

#include <functional>

#include "kiln/tensor.h"

namespace kiln {

// then_fn() if `pred` (a one-element tensor; nonzero = true) holds, else else_fn(). Both branches
// must return the same number of tensors with matching shapes and dtypes.
TensorList cond(const Tensor& pred, const std::function<TensorList()>& then_fn,
                const std::function<TensorList()>& else_fn);

// Runs carry = body(i, carry) for i = 0 .. n-1 (i is a 0-dim int64 tensor) and returns the final
// carry. body must return tensors with the carry's shapes and dtypes.
TensorList loop(int64_t n,
                const std::function<TensorList(const Tensor& i, const TensorList& carry)>& body,
                const TensorList& carry);

// A recurrent network's time steps: state = step(xs[t], state) for t = 0 .. T-1 (T-1 .. 0 when
// `reverse`), xs [T, ...] (the input projections of every step); state[0] is each step's output.
// Returns the outputs stacked in time order ([T, state[0]'s shape]) and the final state. Under a
// tracer that records no gradients through it (`weights`: the tensors `step` reads besides its
// arguments) the steps are one kiln::loop whose body is `step`, recorded once; else a C++ loop.
std::pair<Tensor, TensorList> recurrence(
    const Tensor& xs, TensorList state, const TensorList& weights, bool reverse,
    const std::function<TensorList(const Tensor& x_t, const TensorList& state)>& step);

namespace detail {
// Shape/dtype agreement of two value lists (branch results, or a loop body's result vs carry).
void check_same_signature(const char* op, const char* what, const TensorList& expected,
                          const TensorList& actual);
}  // namespace detail

}  // namespace kiln
