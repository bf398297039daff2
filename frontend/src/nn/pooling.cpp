#include "kiln/nn/pooling.h"

#include <sstream>

namespace kiln::nn {

namespace {
std::string pair_str(Pair2 p) {
  if (p.h == p.w) return std::to_string(p.h);
  std::ostringstream os;
  os << "(" << p.h << ", " << p.w << ")";
  return os.str();
}
}  // namespace

Tensor MaxPool2d::forward(const Tensor& input) {
  return kiln::max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode);
}

std::string MaxPool2d::extra_repr() const {
  std::ostringstream os;
  os << "kernel_size=" << pair_str(kernel_size) << ", stride=" << pair_str(stride)
     << ", padding=" << pair_str(padding) << ", dilation=" << pair_str(dilation)
     << ", ceil_mode=" << (ceil_mode ? "True" : "False");
  return os.str();
}

Tensor AvgPool2d::forward(const Tensor& input) {
  return kiln::avg_pool2d(input, kernel_size, stride, padding, ceil_mode, count_include_pad);
}

std::string AvgPool2d::extra_repr() const {
  std::ostringstream os;
  os << "kernel_size=" << pair_str(kernel_size) << ", stride=" << pair_str(stride)
     << ", padding=" << pair_str(padding);
  return os.str();
}

Tensor AdaptiveAvgPool2d::forward(const Tensor& input) {
  return kiln::adaptive_avg_pool2d(input, output_size);
}

std::string AdaptiveAvgPool2d::extra_repr() const {
  std::ostringstream os;
  os << "output_size=(" << output_size.h << ", " << output_size.w << ")";
  return os.str();
}

}  // namespace kiln::nn
