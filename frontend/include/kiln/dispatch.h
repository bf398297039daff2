#pragma once
// The single point every op passes through after its kernel ran: autograd recording (see
// autograd.h: record) and tracer notification. With no tracer active the cost is one predictable
// branch on a global pointer.

#include <cstdint>
#include <functional>
#include <source_location>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::dispatch {

using AttrValue = std::variant<int64_t, double, bool, Dims, std::string>;
using Attrs = std::vector<std::pair<std::string, AttrValue>>;

// Implemented by kiln_trace. Every dispatched op calls on_op; every value read back from a
// tensor (item(), bool conversion) calls on_read_back with the caller's source location.
class TraceHook {
 public:
  virtual ~TraceHook() = default;
  virtual void on_op(const char* op, const TensorList& inputs, const TensorList& outputs,
                     const Attrs& attrs) = 0;
  virtual void on_read_back(const Tensor& t, double value, const std::source_location& where) = 0;
  // Tensor::data_ptr()/data() handed out `t`'s memory: whatever is written through it is
  // invisible to the hook.
  virtual void on_raw_access(const Tensor& t, const std::source_location& where) = 0;
  // A custom autograd::Function (custom_function.h) named `name` returned `outputs`.
  virtual void on_custom_function(const std::string& name, const TensorList& outputs) = 0;
  // jit::mark_constant: `t`'s current value is a constant of the trace.
  virtual void on_mark_constant(const Tensor& t) = 0;
  // A host number the computation uses as a value (an optimizer's learning rate): the hook returns
  // a 0-dim float64 tensor holding read() that the recorded computation takes as an argument
  // named `name`, refreshed from read() before every later call. The same (owner, name) gives
  // the same tensor.
  virtual Tensor on_host_scalar(const void* owner, const std::string& name,
                                std::function<double()> read) = 0;
  // A host number the recorded structure depends on (momentum != 0 chose an update): every later
  // call checks that read() still gives today's value.
  virtual void on_host_guard(const void* owner, const std::string& name,
                             std::function<double()> read) = 0;
  // Explicit control flow (control_flow.h): the hook records region ops and returns the values
  // eager execution produces.
  virtual TensorList on_cond(const Tensor& pred, const std::function<TensorList()>& then_fn,
                             const std::function<TensorList()>& else_fn) = 0;
  virtual TensorList on_loop(
      int64_t n, const std::function<TensorList(const Tensor&, const TensorList&)>& body,
      const TensorList& carry) = 0;
};

namespace detail {
extern thread_local TraceHook* active_hook;
}

inline TraceHook* tracer() {
  return detail::active_hook;
}

// Installs `hook` for this thread until the guard goes out of scope.
class TraceGuard {
 public:
  explicit TraceGuard(TraceHook* hook) : prev_(detail::active_hook) { detail::active_hook = hook; }
  ~TraceGuard() { detail::active_hook = prev_; }
  TraceGuard(const TraceGuard&) = delete;
  TraceGuard& operator=(const TraceGuard&) = delete;

 private:
  TraceHook* prev_;
};

inline void trace(const char* op, const TensorList& inputs, const TensorList& outputs,
                  const Attrs& attrs = {}) {
  if (auto* hook = detail::active_hook) hook->on_op(op, inputs, outputs, attrs);
}

}  // namespace kiln::dispatch

// Notifies the tracer, if any, building the argument lists only when one is active.
#define KILN_TRACE(op, inputs, outputs, ...)                                              \
  do {                                                                                    \
    if (::kiln::dispatch::detail::active_hook) [[unlikely]]                               \
      ::kiln::dispatch::trace(op, inputs, outputs, ::kiln::dispatch::Attrs{__VA_ARGS__}); \
  } while (0)
