#include "kiln/nn/init.h"

#include <cmath>
#include <vector>

#include "kiln/autograd.h"
#include "kiln/ops.h"
#include "kiln/runtime/kernels/random.h"

namespace kiln::nn::init {

Generator& generator() {
  return kiln::default_generator();
}

void manual_seed(uint64_t seed) {
  kiln::manual_seed(seed);
}

namespace {

void check_fillable(const Tensor& t, const char* op) {
  KILN_CHECK(t.defined(), op, "expected a defined tensor");
  KILN_CHECK(t.is_floating_point(), op, "expected a floating-point tensor, got ", t.dtype());
}

// In-place writes straight through the runtime kernels: parameters stay leaves, their version
// moves on (saved copies in a graph notice).
void bump(const Tensor& t) {
  t.impl()->storage()->bump_version();
}

}  // namespace

double calculate_gain(Nonlinearity nl, std::optional<double> param) {
  switch (nl) {
    case Nonlinearity::Linear:
    case Nonlinearity::Conv1D:
    case Nonlinearity::Conv2D:
    case Nonlinearity::Conv3D:
    case Nonlinearity::ConvTranspose1D:
    case Nonlinearity::ConvTranspose2D:
    case Nonlinearity::ConvTranspose3D:
    case Nonlinearity::Sigmoid:
      return 1.0;
    case Nonlinearity::Tanh:
      return 5.0 / 3.0;
    case Nonlinearity::ReLU:
      return std::sqrt(2.0);
    case Nonlinearity::LeakyReLU: {
      const double slope = param.value_or(0.01);
      return std::sqrt(2.0 / (1.0 + slope * slope));
    }
    case Nonlinearity::SELU:
      return 3.0 / 4.0;
  }
  return 1.0;
}

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t) {
  KILN_CHECK(t.dim() >= 2, "calculate_fan_in_and_fan_out",
             "fan in and fan out can not be computed for tensor with fewer than 2 dimensions, got ",
             t.sizes());
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

Tensor uniform_(const Tensor& t, double a, double b) {
  check_fillable(t, "init::uniform_");
  KILN_CHECK(a <= b, "init::uniform_", "expected a <= b, got a=", a, " b=", b);
  if (a == b) return constant_(t, a);
  kernels::uniform_(*t.impl(), a, b, &generator());
  bump(t);
  return t;
}

Tensor normal_(const Tensor& t, double mean, double std) {
  KILN_CHECK(std >= 0, "init::normal_", "expected std >= 0, got ", std);
  if (std == 0) return constant_(t, mean);
  check_fillable(t, "init::normal_");
  kernels::normal_(*t.impl(), mean, std, &generator());
  bump(t);
  return t;
}

Tensor trunc_normal_(const Tensor& t, double mean, double std, double a, double b) {
  KILN_CHECK(a < b && std > 0, "init::trunc_normal_", "expected a < b and std > 0, got a=", a,
             " b=", b, " std=", std);
  check_fillable(t, "init::trunc_normal_");
  // Draw in float64, redraw the values outside [a, b], then copy in.
  Tensor v = kiln::empty(t.sizes(), TensorOptions(DType::Float64));
  kernels::normal_(*v.impl(), mean, std, &generator());
  double* p = v.data_ptr<double>();
  std::vector<int64_t> bad;
  for (int64_t i = 0; i < v.numel(); ++i)
    if (p[i] < a || p[i] > b) bad.push_back(i);
  for (int round = 0; !bad.empty() && round < 100; ++round) {
    Tensor r = kiln::empty({static_cast<int64_t>(bad.size())}, TensorOptions(DType::Float64));
    kernels::normal_(*r.impl(), mean, std, &generator());
    std::vector<int64_t> still;
    for (size_t k = 0; k < bad.size(); ++k) {
      const double x = r.data_ptr<double>()[k];
      p[bad[k]] = x;
      if (x < a || x > b) still.push_back(bad[k]);
    }
    bad.swap(still);
  }
  for (int64_t i : bad) p[i] = std::min(std::max(mean, a), b);
  autograd::NoGradGuard no_grad;
  Tensor dst = t;
  copy_(dst, v);
  return t;
}

Tensor constant_(const Tensor& t, double value) {
  KILN_CHECK(t.defined(), "init::constant_", "expected a defined tensor");
  autograd::NoGradGuard no_grad;
  Tensor dst = t;
  fill_(dst, value);
  return t;
}

Tensor zeros_(const Tensor& t) {
  return constant_(t, 0.0);
}
Tensor ones_(const Tensor& t) {
  return constant_(t, 1.0);
}

namespace {
double kaiming_std(const Tensor& t, double a, FanMode mode, Nonlinearity nl, const char* op) {
  KILN_CHECK(t.defined(), op, "expected a defined tensor");
  KILN_CHECK(t.numel() > 0, op, "initializing a zero-element tensor is a no-op");
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  const double fan = static_cast<double>(mode == FanMode::FanIn ? fan_in : fan_out);
  return calculate_gain(nl, a) / std::sqrt(fan);
}
}  // namespace

Tensor kaiming_uniform_(const Tensor& t, double a, FanMode mode, Nonlinearity nl) {
  const double bound = std::sqrt(3.0) * kaiming_std(t, a, mode, nl, "init::kaiming_uniform_");
  return uniform_(t, -bound, bound);
}

Tensor kaiming_normal_(const Tensor& t, double a, FanMode mode, Nonlinearity nl) {
  return normal_(t, 0.0, kaiming_std(t, a, mode, nl, "init::kaiming_normal_"));
}

Tensor xavier_uniform_(const Tensor& t, double gain) {
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  const double std = gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out));
  const double a = std::sqrt(3.0) * std;
  return uniform_(t, -a, a);
}

Tensor xavier_normal_(const Tensor& t, double gain) {
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  const double std = gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out));
  return normal_(t, 0.0, std);
}

}  // namespace kiln::nn::init
