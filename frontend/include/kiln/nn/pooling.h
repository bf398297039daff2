#pragma once
// MaxPool2d, AvgPool2d, AdaptiveAvgPool2d.

#include <optional>

#include "kiln/nn/module.h"
#include "kiln/nn_ops.h"

namespace kiln::nn {

// stride defaults to kernel_size.
class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Pair2 kernel_size, std::optional<Pair2> stride = std::nullopt,
                     Pair2 padding = 0, Pair2 dilation = 1, bool ceil_mode = false)
      : Module("MaxPool2d"),
        kernel_size(kernel_size),
        stride(stride.value_or(kernel_size)),
        padding(padding),
        dilation(dilation),
        ceil_mode(ceil_mode) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  Pair2 kernel_size, stride, padding, dilation;
  bool ceil_mode;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Pair2 kernel_size, std::optional<Pair2> stride = std::nullopt,
                     Pair2 padding = 0, bool ceil_mode = false, bool count_include_pad = true)
      : Module("AvgPool2d"),
        kernel_size(kernel_size),
        stride(stride.value_or(kernel_size)),
        padding(padding),
        ceil_mode(ceil_mode),
        count_include_pad(count_include_pad) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  Pair2 kernel_size, stride, padding;
  bool ceil_mode, count_include_pad;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Pair2 output_size)
      : Module("AdaptiveAvgPool2d"), output_size(output_size) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  Pair2 output_size;
};

}  // namespace kiln::nn
