// Tensor transforms.
#include "kiln/data/transforms.h"

#include "kiln/ops.h"

namespace kiln::data::transforms {

Normalize::Normalize(double mean, double stddev)
    : Normalize(std::vector<double>{mean}, std::vector<double>{stddev}) {}

Normalize::Normalize(std::vector<double> mean, std::vector<double> stddev)
    : mean_(std::move(mean)), std_(std::move(stddev)) {
  KILN_CHECK(!mean_.empty() && mean_.size() == std_.size(), "Normalize",
             "expected as many means as stds (at least one), got ", mean_.size(), " and ",
             std_.size());
  for (size_t i = 0; i < std_.size(); ++i)
    KILN_CHECK(std_[i] != 0.0, "Normalize", "std[", i, "] is zero");
}

Tensor Normalize::operator()(const Tensor& input) const {
  Tensor x = input.is_floating_point() ? input : input.to(DType::Float32);
  if (mean_.size() == 1) return (x - mean_[0]) / std_[0];
  const int64_t c = static_cast<int64_t>(mean_.size());
  KILN_CHECK(x.dim() >= 3 && x.size(-3) == c, "Normalize", "expected ", c,
             " channels in dim -3 ([..., C, H, W]), got ", describe(*x.impl()));
  std::vector<float> m(mean_.begin(), mean_.end()), s(std_.begin(), std_.end());
  const Dims shape{c, 1, 1};
  Tensor mt = tensor(m, shape).to(x.dtype());
  Tensor st = tensor(s, shape).to(x.dtype());
  return (x - mt) / st;
}

}  // namespace kiln::data::transforms
