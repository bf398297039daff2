#include "hyper.h"

#include <cmath>

#include "kiln/dispatch.h"
#include "kiln/ops.h"

namespace kiln::optim::detail {

namespace {
Tensor as_tensor(const Hyper& h) {
  return h.traced.defined() ? h.traced : scalar_tensor(h.value, TensorOptions(DType::Float64));
}
template <typename HostFn, typename TensorFn>
Hyper combine(const Hyper& a, const Hyper& b, HostFn host, TensorFn traced) {
  Hyper r{host(a.value, b.value), {}};
  if (a.traced.defined() || b.traced.defined()) r.traced = traced(as_tensor(a), as_tensor(b));
  return r;
}
}  // namespace

bool tracing() {
  return dispatch::tracer() != nullptr;
}

Hyper hyper(const void* owner, const std::string& name, std::function<double()> read) {
  if (auto* hook = dispatch::tracer()) {
    Tensor t = hook->on_host_scalar(owner, name, read);
    return {read(), t};
  }
  return {read(), {}};
}

void guard_host(const void* owner, const std::string& name, std::function<double()> read) {
  if (auto* hook = dispatch::tracer()) hook->on_host_guard(owner, name, std::move(read));
}

Hyper constant(double v) {
  return {v, {}};
}
Hyper operator+(const Hyper& a, const Hyper& b) {
  return combine(
      a, b, [](double x, double y) { return x + y; },
      [](const Tensor& x, const Tensor& y) { return add(x, y); });
}
Hyper operator-(const Hyper& a, const Hyper& b) {
  return combine(
      a, b, [](double x, double y) { return x - y; },
      [](const Tensor& x, const Tensor& y) { return sub(x, y); });
}
Hyper operator*(const Hyper& a, const Hyper& b) {
  return combine(
      a, b, [](double x, double y) { return x * y; },
      [](const Tensor& x, const Tensor& y) { return mul(x, y); });
}
Hyper operator/(const Hyper& a, const Hyper& b) {
  return combine(
      a, b, [](double x, double y) { return x / y; },
      [](const Tensor& x, const Tensor& y) { return div(x, y); });
}
Hyper operator-(const Hyper& a) {
  return {-a.value, a.traced.defined() ? neg(a.traced) : Tensor()};
}
Hyper one_minus(const Hyper& a) {
  return {1.0 - a.value, a.traced.defined() ? rsub(a.traced, 1.0) : Tensor()};
}
Hyper sqrt(const Hyper& a) {
  return {std::sqrt(a.value), a.traced.defined() ? kiln::sqrt(a.traced) : Tensor()};
}
Hyper pow(const Hyper& a, const Hyper& b) {
  return combine(
      a, b, [](double x, double y) { return std::pow(x, y); },
      [](const Tensor& x, const Tensor& y) { return kiln::pow(x, y); });
}

void scale_(Tensor& x, const Hyper& h) {
  if (h.traced.defined()) {
    mul_(x, h.traced);
  } else {
    mul_(x, h.value);
  }
}
void axpy_(Tensor& y, const Tensor& x, const Hyper& h) {
  if (h.traced.defined()) {
    add_(y, mul(x, h.traced));
  } else {
    add_(y, x, h.value);
  }
}
void shift_(Tensor& x, const Hyper& h) {
  if (h.traced.defined()) {
    add_(x, h.traced);
  } else {
    add_(x, h.value);
  }
}
Tensor plus_scaled(const Tensor& y, const Tensor& x, const Hyper& h) {
  return h.traced.defined() ? add(y, mul(x, h.traced)) : add(y, x, h.value);
}
Tensor divided(const Tensor& x, const Hyper& h) {
  return h.traced.defined() ? div(x, h.traced) : div(x, h.value);
}

Hyper advance_step(ParamState& state, const std::string& key) {
  auto it = state.find(key);
  if (it == state.end()) it = state.emplace(key, int64_t{0}).first;
  if (tracing()) {
    if (auto* n = std::get_if<int64_t>(&it->second)) {
      it->second = scalar_tensor(static_cast<double>(*n), TensorOptions(DType::Float64));
    }
  }
  if (auto* t = std::get_if<Tensor>(&it->second)) {
    add_(*t, 1.0);
    double now;
    {
      dispatch::TraceGuard untraced(nullptr);  // the host copy of the count is not a read-back
      now = t->item_double();
    }
    return {now, tracing() ? *t : Tensor()};
  }
  const int64_t next = std::get<int64_t>(it->second) + 1;
  it->second = next;
  return {static_cast<double>(next), {}};
}

}  // namespace kiln::optim::detail
