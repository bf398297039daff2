// kiln::cond / kiln::loop: eager control flow, or region ops when a tracer is active.

#include "kiln/control_flow.h"

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

}  // namespace kiln
