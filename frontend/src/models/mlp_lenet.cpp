#include "kiln/models.h"
#include "kiln/nn_ops.h"
#include "kiln/ops.h"

namespace kiln::models {

std::shared_ptr<nn::Sequential> mlp(const std::vector<int64_t>& sizes) {
  KILN_CHECK(sizes.size() >= 2, "models::mlp", "expected at least 2 sizes (in, out), got ",
             sizes.size());
  auto seq = std::make_shared<nn::Sequential>();
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    seq->push_back(std::make_shared<nn::Linear>(sizes[i], sizes[i + 1]));
    if (i + 2 < sizes.size()) seq->push_back(std::make_shared<nn::ReLU>());
  }
  return seq;
}

LeNet::LeNet(int64_t num_classes) : Module("LeNet") {
  conv1 =
      register_module("conv1", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(1, 6, 5).padding(2)));
  conv2 = register_module("conv2", std::make_shared<nn::Conv2d>(6, 16, 5));
  fc1 = register_module("fc1", std::make_shared<nn::Linear>(400, 120));
  fc2 = register_module("fc2", std::make_shared<nn::Linear>(120, 84));
  fc3 = register_module("fc3", std::make_shared<nn::Linear>(84, num_classes));
}

Tensor LeNet::forward(const Tensor& x) {
  KILN_CHECK(x.dim() == 4 && x.size(1) == 1 && x.size(2) == 28 && x.size(3) == 28, "LeNet",
             "expected input (N, 1, 28, 28), got ", x.sizes());
  Tensor h = kiln::max_pool2d(kiln::relu((*conv1)(x)), 2);  // (N, 6, 14, 14)
  h = kiln::max_pool2d(kiln::relu((*conv2)(h)), 2);         // (N, 16, 5, 5)
  h = h.flatten(1);
  h = kiln::relu((*fc1)(h));
  h = kiln::relu((*fc2)(h));
  return (*fc3)(h);
}

std::shared_ptr<LeNet> lenet(int64_t num_classes) {
  return std::make_shared<LeNet>(num_classes);
}

}  // namespace kiln::models
