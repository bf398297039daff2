#include "kiln/nn/activation.h"

#include <sstream>

#include "kiln/nn_ops.h"
#include "kiln/ops.h"

namespace kiln::nn {

Tensor ReLU::forward(const Tensor& input) {
  return kiln::relu(input);
}
Tensor ReLU6::forward(const Tensor& input) {
  return kiln::clamp(input, 0.0, 6.0);
}
Tensor LeakyReLU::forward(const Tensor& input) {
  return kiln::leaky_relu(input, negative_slope);
}

std::string LeakyReLU::extra_repr() const {
  std::ostringstream os;
  os << "negative_slope=" << negative_slope;
  return os.str();
}

GELU::GELU(std::string approx) : Module("GELU"), approximate(std::move(approx)) {
  KILN_CHECK(approximate == "none" || approximate == "tanh", "GELU",
             "approximate must be 'none' or 'tanh', got '", approximate, "'");
}
Tensor GELU::forward(const Tensor& input) {
  return kiln::gelu(input, approximate == "tanh");
}
std::string GELU::extra_repr() const {
  return "approximate='" + approximate + "'";
}

Tensor SiLU::forward(const Tensor& input) {
  return kiln::silu(input);
}
Tensor Sigmoid::forward(const Tensor& input) {
  return kiln::sigmoid(input);
}
Tensor Tanh::forward(const Tensor& input) {
  return kiln::tanh(input);
}
Tensor Softmax::forward(const Tensor& input) {
  return kiln::softmax(input, dim);
}
std::string Softmax::extra_repr() const {
  return "dim=" + std::to_string(dim);
}
Tensor LogSoftmax::forward(const Tensor& input) {
  return kiln::log_softmax(input, dim);
}
std::string LogSoftmax::extra_repr() const {
  return "dim=" + std::to_string(dim);
}

}  // namespace kiln::nn
