#pragma once
// kiln::nn::init — in-place initializers with PyTorch's names, fan computations and gains
// (torch.nn.init). Each writes through the tensor's storage under NoGradGuard and returns the
// tensor, so parameters keep their identity.
//
// Randomness comes from kiln's global Philox generator (kiln::default_generator(), seeded by
// kiln::manual_seed or nn::init::manual_seed), as torch.manual_seed seeds torch.nn.init: the
// values depend only on the seed and the order of draws, never on the thread count.

#include <cstdint>
#include <optional>
#include <utility>

#include "kiln/runtime/kernels/random.h"
#include "kiln/tensor.h"

namespace kiln::nn::init {

enum class FanMode { FanIn, FanOut };
enum class Nonlinearity {
  Linear,
  Conv1D,
  Conv2D,
  Conv3D,
  ConvTranspose1D,
  ConvTranspose2D,
  ConvTranspose3D,
  Sigmoid,
  Tanh,
  ReLU,
  LeakyReLU,
  SELU,
};

// The generator every initializer draws from (kiln::default_generator()).
Generator& generator();
// kiln::manual_seed(seed).
void manual_seed(uint64_t seed);

// torch.nn.init.calculate_gain; `param` is LeakyReLU's negative slope (0.01 when not given).
double calculate_gain(Nonlinearity nonlinearity, std::optional<double> param = std::nullopt);
// (fan_in, fan_out) = (size(1) * receptive field, size(0) * receptive field); needs dim >= 2.
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t);

Tensor uniform_(const Tensor& t, double a = 0.0, double b = 1.0);
Tensor normal_(const Tensor& t, double mean = 0.0, double std = 1.0);
Tensor constant_(const Tensor& t, double value);
Tensor zeros_(const Tensor& t);
Tensor ones_(const Tensor& t);
// Normal(mean, std) redrawn until inside [a, b].
Tensor trunc_normal_(const Tensor& t, double mean = 0.0, double std = 1.0, double a = -2.0,
                     double b = 2.0);
// U(-bound, bound), bound = gain * sqrt(3 / fan); gain from (nonlinearity, a).
Tensor kaiming_uniform_(const Tensor& t, double a = 0.0, FanMode mode = FanMode::FanIn,
                        Nonlinearity nonlinearity = Nonlinearity::LeakyReLU);
// N(0, std), std = gain / sqrt(fan).
Tensor kaiming_normal_(const Tensor& t, double a = 0.0, FanMode mode = FanMode::FanIn,
                       Nonlinearity nonlinearity = Nonlinearity::LeakyReLU);
// U(-a, a), a = gain * sqrt(6 / (fan_in + fan_out)).
Tensor xavier_uniform_(const Tensor& t, double gain = 1.0);
// N(0, std), std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor xavier_normal_(const Tensor& t, double gain = 1.0);

}  // namespace kiln::nn::init
