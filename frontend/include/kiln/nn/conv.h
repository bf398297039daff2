#pragma once
// Conv1d, Conv2d, ConvTranspose2d with PyTorch's weight layouts and default initialization
// (weight kaiming_uniform_(a = sqrt(5)), bias U(±1/sqrt(fan_in)), fan_in from weight.size(1)).

#include "kiln/nn/module.h"
#include "kiln/nn/options.h"
#include "kiln/nn_ops.h"

namespace kiln::nn {

enum class PaddingMode { Zeros, Reflect, Replicate };

struct Conv1dOptions {
  Conv1dOptions(int64_t in_channels, int64_t out_channels, int64_t kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  KILN_NN_ARG(int64_t, in_channels);
  KILN_NN_ARG(int64_t, out_channels);
  KILN_NN_ARG(int64_t, kernel_size);
  KILN_NN_ARG(int64_t, stride) = 1;
  KILN_NN_ARG(int64_t, padding) = 0;
  KILN_NN_ARG(int64_t, dilation) = 1;
  KILN_NN_ARG(int64_t, groups) = 1;
  KILN_NN_ARG(bool, bias) = true;
  KILN_NN_ARG(PaddingMode, padding_mode) = PaddingMode::Zeros;
};

struct Conv2dOptions {
  Conv2dOptions(int64_t in_channels, int64_t out_channels, Pair2 kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  KILN_NN_ARG(int64_t, in_channels);
  KILN_NN_ARG(int64_t, out_channels);
  KILN_NN_ARG(Pair2, kernel_size);
  KILN_NN_ARG(Pair2, stride) = 1;
  KILN_NN_ARG(Pair2, padding) = 0;
  KILN_NN_ARG(Pair2, dilation) = 1;
  KILN_NN_ARG(int64_t, groups) = 1;
  KILN_NN_ARG(bool, bias) = true;
  KILN_NN_ARG(PaddingMode, padding_mode) = PaddingMode::Zeros;
};

struct ConvTranspose2dOptions {
  ConvTranspose2dOptions(int64_t in_channels, int64_t out_channels, Pair2 kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  KILN_NN_ARG(int64_t, in_channels);
  KILN_NN_ARG(int64_t, out_channels);
  KILN_NN_ARG(Pair2, kernel_size);
  KILN_NN_ARG(Pair2, stride) = 1;
  KILN_NN_ARG(Pair2, padding) = 0;
  KILN_NN_ARG(Pair2, output_padding) = 0;
  KILN_NN_ARG(int64_t, groups) = 1;
  KILN_NN_ARG(bool, bias) = true;
  KILN_NN_ARG(Pair2, dilation) = 1;
};

// weight [out, in/groups, k], bias [out].
class Conv1d : public Module {
 public:
  explicit Conv1d(Conv1dOptions options);
  Conv1d(int64_t in, int64_t out, int64_t kernel) : Conv1d(Conv1dOptions(in, out, kernel)) {}
  Tensor forward(const Tensor& input) override;
  void reset_parameters();
  std::string extra_repr() const override;
  Conv1dOptions options;
  Tensor& weight;
  Tensor& bias;
};

// weight [out, in/groups, kh, kw], bias [out].
class Conv2d : public Module {
 public:
  explicit Conv2d(Conv2dOptions options);
  Conv2d(int64_t in, int64_t out, Pair2 kernel) : Conv2d(Conv2dOptions(in, out, kernel)) {}
  Tensor forward(const Tensor& input) override;
  void reset_parameters();
  std::string extra_repr() const override;
  Conv2dOptions options;
  Tensor& weight;
  Tensor& bias;
};

// weight [in, out/groups, kh, kw], bias [out].
class ConvTranspose2d : public Module {
 public:
  explicit ConvTranspose2d(ConvTranspose2dOptions options);
  ConvTranspose2d(int64_t in, int64_t out, Pair2 kernel)
      : ConvTranspose2d(ConvTranspose2dOptions(in, out, kernel)) {}
  Tensor forward(const Tensor& input) override;
  void reset_parameters();
  std::string extra_repr() const override;
  ConvTranspose2dOptions options;
  Tensor& weight;
  Tensor& bias;
};

}  // namespace kiln::nn
