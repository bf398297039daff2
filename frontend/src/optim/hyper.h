#pragma once
// A hyper-parameter in an optimizer step's arithmetic, so that each step is written once for eager
// execution and for tracing. Eagerly it is a number, and the step runs the fused forms it always
// did (add_ with alpha). Under tracing it is also a 0-dim float64 tensor that the trace takes as
// an argument and refreshes from the optimizer's options before every call
// (dispatch::TraceHook::on_host_scalar): a scheduler's later change reaches a traced, compiled or
// saved step. Options that choose the form of the update (momentum != 0, amsgrad) are host guards
// instead: a call after they changed fails with a GuardError (jit::compile(fn) re-traces).
//
// A traced step refers to its optimizer to read them: keep the optimizer alive while it is used.

#include <functional>
#include <string>

#include "kiln/optim/optimizer.h"
#include "kiln/tensor.h"

namespace kiln::optim::detail {

struct Hyper {
  double value = 0;
  Tensor traced;  // defined under tracing only
};

bool tracing();
// The hyper-parameter `name` of `owner`; read() gives its current value.
Hyper hyper(const void* owner, const std::string& name, std::function<double()> read);
// Under tracing, every call of the trace checks that read() still gives today's value.
void guard_host(const void* owner, const std::string& name, std::function<double()> read);

// Arithmetic on hyper-parameters: on the host, and on the traced tensors when there are some.
Hyper constant(double v);
Hyper operator+(const Hyper& a, const Hyper& b);
Hyper operator-(const Hyper& a, const Hyper& b);
Hyper operator*(const Hyper& a, const Hyper& b);
Hyper operator/(const Hyper& a, const Hyper& b);
Hyper operator-(const Hyper& a);
Hyper one_minus(const Hyper& a);
Hyper sqrt(const Hyper& a);
Hyper pow(const Hyper& a, const Hyper& b);

// The tensor forms a step needs.
void scale_(Tensor& x, const Hyper& h);                                // x *= h
void axpy_(Tensor& y, const Tensor& x, const Hyper& h);                // y += h * x
void shift_(Tensor& x, const Hyper& h);                                // x += h
Tensor plus_scaled(const Tensor& y, const Tensor& x, const Hyper& h);  // y + h * x
Tensor divided(const Tensor& x, const Hyper& h);                       // x / h

// Advances the step count state[key] (created at 0) and returns the new count. Under tracing the
// count becomes a 0-dim float64 tensor, updated in place by the trace (an in-out value), so bias
// corrections follow it from call to call.
Hyper advance_step(ParamState& state, const std::string& key);

// Reads an option of group `g` of `opt`, as `field` gives it: the read() of a hyper-parameter.
template <typename Options>
std::function<double()> option_reader(const Optimizer* opt, size_t g,
                                      double (*field)(const Options&)) {
  return [opt, g, field] { return field(opt->param_groups()[g].options_as<Options>()); };
}

}  // namespace kiln::optim::detail
