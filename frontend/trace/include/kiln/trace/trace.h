#pragma once
// kiln::jit::trace — run a function eagerly with a trace hook active and record every dispatched
// op into an MLIR module (`func.func @forward`) in the kiln dialect. The result can be printed,
// parsed back, saved as bytecode, and executed by the reference interpreter on the runtime's
// kernels.
//
// Headers here name MLIR types only through forward declarations: including this file does not
// pull MLIR into a user's translation unit.

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::nn {
class Module;
}

namespace mlir {
class MLIRContext;
class Operation;
class ModuleOp;
}  // namespace mlir

namespace kiln::jit {

// A value read back from a tensor while tracing (item()): the trace is specialized to it and
// checks it at run time with a kiln.guard (a GuardError when the input gives another value).
struct ReadBack {
  double value = 0;
  std::string file;
  unsigned line = 0;
  std::string function;
};

// The assumption the trace makes about one argument: its shape and dtype.
struct Guard {
  std::string name;
  Dims sizes;
  DType dtype;
};

// A host number the trace depends on (an optimizer's hyper-parameter, dispatch::TraceHook::
// on_host_scalar / on_host_guard), read again before every call of the trace.
struct HostValue {
  std::string name;
  double traced = 0;  // its value while tracing
  std::function<double()> read;
  // The argument read() refreshes (a captured 0-dim float64); none: a guard, read() must still
  // equal `traced` (else GuardError).
  std::optional<size_t> capture;
};
// What every call of a trace does first (interpreted or compiled): writes each host scalar's
// current value into its capture and checks the host guards.
void refresh_host_values(const std::vector<HostValue>& values, const TensorList& captures);

struct TraceOptions {
  // Names for tensors the function reads that are not inputs (parameters, buffers): they become
  // named function arguments. Unnamed captured tensors become arguments "capture<N>", except
  // small ones (<= max_inline_constant elements), which become constants.
  std::vector<std::pair<std::string, Tensor>> named_captures;
  int64_t max_inline_constant = 16;
  // Print a warning for each value read back from a tensor during tracing.
  bool warn_on_read_back = true;
};

class TracedFunction {
 public:
  TracedFunction();
  ~TracedFunction();
  TracedFunction(TracedFunction&&) noexcept;
  TracedFunction& operator=(TracedFunction&&) noexcept;

  // The module's text (the MLIR generic-free, pretty form kiln-opt reads).
  std::string str() const;
  // MLIR bytecode of the module.
  std::string bytecode() const;
  mlir::ModuleOp module() const;
  mlir::MLIRContext& context() const;

  // Arguments of @forward in order: the inputs, then the captured tensors.
  const std::vector<std::string>& arg_names() const { return arg_names_; }
  const TensorList& captures() const { return captures_; }
  const std::vector<Guard>& guards() const { return guards_; }
  const std::vector<ReadBack>& read_backs() const { return read_backs_; }
  const std::vector<HostValue>& host_values() const { return host_values_; }
  size_t num_inputs() const { return num_inputs_; }
  // Captures the function wrote in place; @forward returns their new values after its outputs.
  const std::vector<size_t>& mutated_captures() const { return mutated_captures_; }

  // Runs the traced module with the reference interpreter (inputs checked against the guards;
  // captured tensors supplied from the trace).
  TensorList operator()(const TensorList& inputs) const;

 private:
  friend class Tracer;
  friend void freeze(TracedFunction&);
  friend void eliminate_gradients(TracedFunction&, bool);
  friend TracedFunction trace(const std::function<TensorList(const TensorList&)>&,
                              const TensorList&, const TraceOptions&, TensorList*);
  struct State;
  std::unique_ptr<State> state_;
  std::vector<std::string> arg_names_;
  TensorList captures_;
  std::vector<Guard> guards_;
  std::vector<ReadBack> read_backs_;
  std::vector<HostValue> host_values_;
  size_t num_inputs_ = 0;
  size_t num_outputs_ = 0;
  std::vector<size_t> mutated_captures_;
  // The capture holding the random-number state ("rng_state"), when the trace draws random numbers.
  std::optional<size_t> rng_capture_;
  TensorList frozen_;  // storage the frozen module's constants point into (see freeze.h)
};

// Runs fn(example_inputs) eagerly while recording it; `eager_results`, when given, receives what
// that run returned (its side effects, such as a training step's update, happened once).
TracedFunction trace(const std::function<TensorList(const TensorList&)>& fn,
                     const TensorList& example_inputs, const TraceOptions& options = {},
                     TensorList* eager_results = nullptr);

// Traces module.forward(inputs[0]) with its parameters and buffers as named arguments
// ("conv1.weight", "bn1.running_mean", ... in named_parameters() then named_buffers() order of
// first use).
TracedFunction trace(nn::Module& module, const TensorList& example_inputs,
                     TraceOptions options = {});

// While tracing, accepts `t`'s current value as a constant of the trace (a captured argument
// when large): for a tensor filled through data_ptr() whose contents do not depend on the
// function's inputs (a lookup table), which the tracer otherwise refuses. Outside tracing: nothing.
void mark_constant(const Tensor& t);

// PyTorch's check_trace: traces fn on input_sets[0], then runs fn eagerly and the trace (the
// reference interpreter) on every other input set and compares. The report names each input set
// on which they differ: an output beyond rtol/atol (its index and largest difference), a different
// shape, or the trace refusing the input (a GuardError: a value it read back differs). fn runs
// once for the first set and twice for each other, so it should have no side effects.
struct TraceCheck {
  bool ok = true;
  std::string report;  // one line per divergence; empty when ok
};
TraceCheck check_trace(const std::function<TensorList(const TensorList&)>& fn,
                       const std::vector<TensorList>& input_sets, double rtol = 1e-5,
                       double atol = 1e-6, const TraceOptions& options = {});

// Parses kiln IR text or bytecode into a module owned by `ctx`; throws kiln::Error on failure.
// The returned module must be destroyed (module->erase()) or kept for the context's lifetime.
mlir::ModuleOp parse_module(mlir::MLIRContext& ctx, const std::string& text_or_bytecode);

// The reference interpreter: executes @forward op by op on the eager ops (and so the runtime's
// kernels). `args` are all of @forward's arguments in order.
TensorList interpret(mlir::ModuleOp module, const TensorList& args);
// The value of a kiln.constant op: a frozen weight (dense resource) read in place, else a copy of
// its elements.
Tensor constant_value(mlir::Operation* constant);
// Whether the reference interpreter runs ops named `op_name` ("kiln.conv2d"); region ops of the
// upstream dialects it also runs (scf.if, scf.for) answer true as well.
bool interpreter_supports(std::string_view op_name);

}  // namespace kiln::jit
