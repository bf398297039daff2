#include "kiln/nn/conv.h"

#include <cmath>
#include <sstream>

#include "kiln/nn/init.h"
#include "kiln/ops.h"

namespace kiln::nn {

namespace {

// PyTorch's _ConvNd.reset_parameters: kaiming_uniform_(a = sqrt(5)) on the weight, and the bias
// U(±1/sqrt(fan_in)) with fan_in computed from the weight (size(1) * receptive field).
void reset_conv(const Tensor& weight, const Tensor& bias) {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    auto [fan_in, fan_out] = init::calculate_fan_in_and_fan_out(weight);
    const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}

void check_channels(const char* op, int64_t in, int64_t out, int64_t groups) {
  KILN_CHECK(groups > 0 && in > 0 && out > 0, op,
             "expected positive channels and groups, got in_channels=", in, " out_channels=", out,
             " groups=", groups);
  KILN_CHECK(in % groups == 0 && out % groups == 0, op,
             "in_channels and out_channels must be divisible by groups, got in_channels=", in,
             " out_channels=", out, " groups=", groups);
}

PadMode to_pad_mode(PaddingMode m) {
  return m == PaddingMode::Reflect ? PadMode::Reflect : PadMode::Replicate;
}

const char* mode_name(PaddingMode m) {
  switch (m) {
    case PaddingMode::Zeros:
      return "zeros";
    case PaddingMode::Reflect:
      return "reflect";
    case PaddingMode::Replicate:
      return "replicate";
  }
  return "?";
}

std::string pair_str(Pair2 p) {
  std::ostringstream os;
  os << "(" << p.h << ", " << p.w << ")";
  return os.str();
}

}  // namespace

Conv1d::Conv1d(Conv1dOptions o)
    : Module("Conv1d"),
      options((check_channels("Conv1d", o.in_channels(), o.out_channels(), o.groups()), o)),
      weight(register_parameter(
          "weight",
          kiln::empty({o.out_channels(), o.in_channels() / o.groups(), o.kernel_size()}))),
      bias(register_parameter("bias", o.bias() ? kiln::empty({o.out_channels()}) : Tensor())) {
  reset_parameters();
}

void Conv1d::reset_parameters() {
  reset_conv(weight, bias);
}

Tensor Conv1d::forward(const Tensor& input) {
  const auto& o = options;
  if (o.padding_mode() != PaddingMode::Zeros && o.padding() > 0) {
    Tensor padded = kiln::pad(input, {o.padding(), o.padding()}, to_pad_mode(o.padding_mode()));
    return kiln::conv1d(padded, weight, bias, o.stride(), 0, o.dilation(), o.groups());
  }
  return kiln::conv1d(input, weight, bias, o.stride(), o.padding(), o.dilation(), o.groups());
}

std::string Conv1d::extra_repr() const {
  const auto& o = options;
  std::ostringstream os;
  os << o.in_channels() << ", " << o.out_channels() << ", kernel_size=(" << o.kernel_size()
     << ",), stride=(" << o.stride() << ",)";
  if (o.padding() != 0) os << ", padding=(" << o.padding() << ",)";
  if (o.dilation() != 1) os << ", dilation=(" << o.dilation() << ",)";
  if (o.groups() != 1) os << ", groups=" << o.groups();
  if (!o.bias()) os << ", bias=False";
  if (o.padding_mode() != PaddingMode::Zeros)
    os << ", padding_mode=" << mode_name(o.padding_mode());
  return os.str();
}

Conv2d::Conv2d(Conv2dOptions o)
    : Module("Conv2d"),
      options((check_channels("Conv2d", o.in_channels(), o.out_channels(), o.groups()), o)),
      weight(
          register_parameter("weight", kiln::empty({o.out_channels(), o.in_channels() / o.groups(),
                                                    o.kernel_size().h, o.kernel_size().w}))),
      bias(register_parameter("bias", o.bias() ? kiln::empty({o.out_channels()}) : Tensor())) {
  reset_parameters();
}

void Conv2d::reset_parameters() {
  reset_conv(weight, bias);
}

Tensor Conv2d::forward(const Tensor& input) {
  const auto& o = options;
  if (o.padding_mode() != PaddingMode::Zeros && (o.padding().h > 0 || o.padding().w > 0)) {
    Tensor padded = kiln::pad(input, {o.padding().w, o.padding().w, o.padding().h, o.padding().h},
                              to_pad_mode(o.padding_mode()));
    return kiln::conv2d(padded, weight, bias, o.stride(), 0, o.dilation(), o.groups());
  }
  return kiln::conv2d(input, weight, bias, o.stride(), o.padding(), o.dilation(), o.groups());
}

std::string Conv2d::extra_repr() const {
  const auto& o = options;
  std::ostringstream os;
  os << o.in_channels() << ", " << o.out_channels() << ", kernel_size=" << pair_str(o.kernel_size())
     << ", stride=" << pair_str(o.stride());
  if (o.padding().h != 0 || o.padding().w != 0) os << ", padding=" << pair_str(o.padding());
  if (o.dilation().h != 1 || o.dilation().w != 1) os << ", dilation=" << pair_str(o.dilation());
  if (o.groups() != 1) os << ", groups=" << o.groups();
  if (!o.bias()) os << ", bias=False";
  if (o.padding_mode() != PaddingMode::Zeros)
    os << ", padding_mode=" << mode_name(o.padding_mode());
  return os.str();
}

ConvTranspose2d::ConvTranspose2d(ConvTranspose2dOptions o)
    : Module("ConvTranspose2d"),
      options(
          (check_channels("ConvTranspose2d", o.in_channels(), o.out_channels(), o.groups()), o)),
      weight(
          register_parameter("weight", kiln::empty({o.in_channels(), o.out_channels() / o.groups(),
                                                    o.kernel_size().h, o.kernel_size().w}))),
      bias(register_parameter("bias", o.bias() ? kiln::empty({o.out_channels()}) : Tensor())) {
  reset_parameters();
}

void ConvTranspose2d::reset_parameters() {
  reset_conv(weight, bias);
}

Tensor ConvTranspose2d::forward(const Tensor& input) {
  const auto& o = options;
  return kiln::conv_transpose2d(input, weight, bias, o.stride(), o.padding(), o.output_padding(),
                                o.groups(), o.dilation());
}

std::string ConvTranspose2d::extra_repr() const {
  const auto& o = options;
  std::ostringstream os;
  os << o.in_channels() << ", " << o.out_channels() << ", kernel_size=" << pair_str(o.kernel_size())
     << ", stride=" << pair_str(o.stride());
  if (o.padding().h != 0 || o.padding().w != 0) os << ", padding=" << pair_str(o.padding());
  if (o.output_padding().h != 0 || o.output_padding().w != 0)
    os << ", output_padding=" << pair_str(o.output_padding());
  if (o.groups() != 1) os << ", groups=" << o.groups();
  if (!o.bias()) os << ", bias=False";
  return os.str();
}

}  // namespace kiln::nn
