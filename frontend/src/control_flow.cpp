// kiln::cond / kiln::loop: eager control flow, or region ops when a tracer is active.

#include "kiln/control_flow.h"

#include "kiln/autograd.h"
#include "kiln/dispatch.h"
#include "kiln/ops.h"

namespace kiln {

namespace detail {
void check_same_signature(const char* op, const char* what, const TensorList& expected,
                          const TensorList& actual) {
  KILN_CHECK(expected.size() == actual.size(), op, what, ": expected ", expected.size(),
             " tensors, got ", actual.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    KILN_CHECK(expected[i].defined() && actual[i].defined(), op, what, ": value ", i,
               " is undefined");
    KILN_CHECK(expected[i].sizes() == actual[i].sizes() && expected[i].dtype() == actual[i].dtype(),
               op, what, ": value ", i, " expected ", expected[i].sizes(), " ",
               dtype_short_name(expected[i].dtype()), ", got ", actual[i].sizes(), " ",
               dtype_short_name(actual[i].dtype()));
  }
}
}  // namespace detail

namespace {
bool truth(const Tensor& pred) {
  KILN_CHECK(pred.defined() && pred.numel() == 1, "cond",
             "the predicate must be a one-element tensor, got shape ",
             pred.defined() ? pred.sizes() : Dims{});
  return pred.item_double() != 0.0;
}
}  // namespace

TensorList cond(const Tensor& pred, const std::function<TensorList()>& then_fn,
                const std::function<TensorList()>& else_fn) {
  if (auto* hook = dispatch::tracer()) return hook->on_cond(pred, then_fn, else_fn);
  return truth(pred) ? then_fn() : else_fn();
}

TensorList loop(int64_t n,
                const std::function<TensorList(const Tensor& i, const TensorList& carry)>& body,
                const TensorList& carry) {
  KILN_CHECK(n >= 0, "loop", "the trip count must be >= 0, got ", n);
  if (auto* hook = dispatch::tracer()) return hook->on_loop(n, body, carry);
  TensorList state = carry;
  for (int64_t i = 0; i < n; ++i) {
    TensorList next = body(scalar_tensor(i, TensorOptions(DType::Int64)), state);
    detail::check_same_signature("loop", " body result", state, next);
    state = std::move(next);
  }
  return state;
}

std::pair<Tensor, TensorList> recurrence(
    const Tensor& xs, TensorList state, const TensorList& weights, bool reverse,
    const std::function<TensorList(const Tensor& x_t, const TensorList& state)>& step) {
  const int64_t T = xs.size(0);
  // Gradients do not flow through a traced loop: a trace that records them unrolls the steps.
  bool differentiable = xs.requires_grad();
  for (const TensorList* list : {static_cast<const TensorList*>(&state), &weights})
    for (const Tensor& t : *list) differentiable |= t.defined() && t.requires_grad();
  if (dispatch::tracer() && !(autograd::grad_enabled() && differentiable)) {
    // The carry is the state and the output sequence; step t overwrites row t of the latter (the
    // code generators update it in place). Every row is written, so the sequence starts as any
    // tensor of its shape: a view of the inputs where they are wide enough (a zero constant
    // would be stored in artifacts).
    Dims out_shape{T};
    for (int64_t d : state[0].sizes()) out_shape.push_back(d);
    const int64_t width = state[0].size(-1);
    Tensor seq = xs.dim() == static_cast<int64_t>(out_shape.size()) && xs.size(-1) >= width
                     ? xs.narrow(-1, 0, width)
                     : zeros(out_shape, TensorOptions(state[0].dtype()));
    const Tensor last = scalar_tensor(static_cast<double>(T - 1), TensorOptions(DType::Int64));
    state.push_back(seq);
    TensorList out = loop(
        T,
        [&](const Tensor& i, const TensorList& carry) {
          const Tensor t = (reverse ? sub(last, i) : i).reshape({1});
          TensorList next =
              step(index_select(xs, 0, t).squeeze(0), {carry.begin(), carry.end() - 1});
          next.push_back(index_copy(carry.back(), 0, t, next[0].unsqueeze(0)));
          return next;
        },
        state);
    Tensor ys = out.back();
    out.pop_back();
    return {ys, out};
  }
  TensorList ys(static_cast<size_t>(T));
  for (int64_t s = 0; s < T; ++s) {
    const int64_t t = reverse ? T - 1 - s : s;
    state = step(xs.select(0, t), state);
    ys[static_cast<size_t>(t)] = state[0];
  }
  return {stack(ys, 0), state};
}

}  // namespace kiln
