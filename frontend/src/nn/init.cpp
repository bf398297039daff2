#include "kiln/nn/init.h"

#include <cmath>
#include <vector>

#include "kiln/autograd.h"
#include "kiln/ops.h"

namespace kiln::nn::init {

std::mt19937_64& generator() {
  static std::mt19937_64 gen(67280421310721ULL);
  return gen;
}

void manual_seed(uint64_t seed) {
  generator().seed(seed);
}

namespace {

// Writes values produced by `next()` into t in row-major order.
template <typename Next>
Tensor fill_with(const Tensor& t, const char* op, Next next) {
  KILN_CHECK(t.defined(), op, "expected a defined tensor");
  KILN_CHECK(t.is_floating_point(), op, "expected a floating-point tensor, got ", t.dtype());
  std::vector<double> buf(static_cast<size_t>(t.numel()));
  for (double& v : buf) v = next();
  autograd::NoGradGuard no_grad;
  Tensor src = from_blob(buf.data(), t.sizes(), TensorOptions(DType::Float64));
  Tensor dst = t;
  copy_(dst, src);
  return t;
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
  std::uniform_real_distribution<double> dist(a, b);
  return fill_with(t, "init::uniform_", [&] { return dist(generator()); });
}

Tensor normal_(const Tensor& t, double mean, double std) {
  KILN_CHECK(std >= 0, "init::normal_", "expected std >= 0, got ", std);
  if (std == 0) return constant_(t, mean);
  std::normal_distribution<double> dist(mean, std);
  return fill_with(t, "init::normal_", [&] { return dist(generator()); });
}

Tensor trunc_normal_(const Tensor& t, double mean, double std, double a, double b) {
  KILN_CHECK(a < b && std > 0, "init::trunc_normal_", "expected a < b and std > 0, got a=", a,
             " b=", b, " std=", std);
  std::normal_distribution<double> dist(mean, std);
  return fill_with(t, "init::trunc_normal_", [&] {
    for (int tries = 0; tries < 1000; ++tries) {
      double v = dist(generator());
      if (v >= a && v <= b) return v;
    }
    return std::min(std::max(mean, a), b);
  });
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
