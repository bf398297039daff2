#pragma once
// Tensor transforms (torchvision/torch::data::transforms style). Each is a callable
// Tensor -> Tensor and can be given to MapDataset.

#include <vector>

#include "kiln/tensor.h"

namespace kiln::data::transforms {

// (x - mean) / std. With one value per channel, the channel dim is dim -3 (so [C,H,W] examples and
// [N,C,H,W] batches both work); a single value applies to every element. Integer inputs are
// converted to float32 first.
class Normalize {
 public:
  Normalize(double mean, double stddev);
  Normalize(std::vector<double> mean, std::vector<double> stddev);
  Tensor operator()(const Tensor& x) const;

 private:
  std::vector<double> mean_, std_;
};

}  // namespace kiln::data::transforms
