#include <cmath>

#include "kiln/models.h"
#include "kiln/nn_ops.h"
#include "kiln/ops.h"

namespace kiln::models {

namespace {
// torchvision's _make_divisible: round to the nearest multiple of 8, never down by more than 10%.
int64_t make_divisible(double v, int64_t divisor = 8) {
  int64_t nv =
      std::max<int64_t>(divisor, static_cast<int64_t>(v + divisor / 2.0) / divisor * divisor);
  if (static_cast<double>(nv) < 0.9 * v) nv += divisor;
  return nv;
}

// Conv2dNormActivation: Sequential(Conv2d(bias=False), BatchNorm2d, ReLU6) named 0, 1, 2.
std::shared_ptr<nn::Sequential> conv_bn_relu6(int64_t in, int64_t out, int64_t kernel,
                                              int64_t stride, int64_t groups) {
  return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Conv2d>(nn::Conv2dOptions(in, out, kernel)
                                       .stride(stride)
                                       .padding((kernel - 1) / 2)
                                       .groups(groups)
                                       .bias(false)),
      std::make_shared<nn::BatchNorm2d>(out), std::make_shared<nn::ReLU6>()});
}
}  // namespace

InvertedResidual::InvertedResidual(int64_t inp, int64_t oup, int64_t stride, int64_t expand_ratio)
    : Module("InvertedResidual"), use_res_connect(stride == 1 && inp == oup) {
  KILN_CHECK(stride == 1 || stride == 2, "InvertedResidual", "stride should be 1 or 2, got ",
             stride);
  const int64_t hidden = inp * expand_ratio;
  conv = std::make_shared<nn::Sequential>();
  if (expand_ratio != 1) conv->push_back(conv_bn_relu6(inp, hidden, 1, 1, 1));
  conv->push_back(conv_bn_relu6(hidden, hidden, 3, stride, hidden));  // depthwise
  conv->push_back(
      std::make_shared<nn::Conv2d>(nn::Conv2dOptions(hidden, oup, 1).bias(false)));  // pointwise
  conv->push_back(std::make_shared<nn::BatchNorm2d>(oup));
  register_module("conv", conv);
}

Tensor InvertedResidual::forward(const Tensor& x) {
  Tensor y = (*conv)(x);
  return use_res_connect ? x + y : y;
}

MobileNetV2::MobileNetV2(int64_t num_classes, double width_mult, double dropout)
    : Module("MobileNetV2") {
  // t (expansion), c (channels), n (repeats), s (first stride)
  const int64_t setting[7][4] = {{1, 16, 1, 1}, {6, 24, 2, 2},  {6, 32, 3, 2}, {6, 64, 4, 2},
                                 {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
  int64_t input_channel = make_divisible(32 * width_mult);
  const int64_t last_channel = make_divisible(1280 * std::max(1.0, width_mult));
  features = std::make_shared<nn::Sequential>();
  features->push_back(conv_bn_relu6(3, input_channel, 3, 2, 1));
  for (const auto& row : setting) {
    const int64_t out = make_divisible(static_cast<double>(row[1]) * width_mult);
    for (int64_t i = 0; i < row[2]; ++i) {
      features->push_back(
          std::make_shared<InvertedResidual>(input_channel, out, i == 0 ? row[3] : 1, row[0]));
      input_channel = out;
    }
  }
  features->push_back(conv_bn_relu6(input_channel, last_channel, 1, 1, 1));
  register_module("features", features);
  classifier = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Dropout>(dropout),
      std::make_shared<nn::Linear>(last_channel, num_classes)});
  register_module("classifier", classifier);
  // torchvision: convs kaiming_normal_(fan_out), bias zeros; BN 1/0; Linear N(0, 0.01), bias 0.
  for (const auto& m : modules()) {
    if (auto* c = dynamic_cast<nn::Conv2d*>(m.get())) {
      nn::init::kaiming_normal_(c->weight, 0.0, nn::init::FanMode::FanOut);
      if (c->bias.defined()) nn::init::zeros_(c->bias);
    } else if (auto* l = dynamic_cast<nn::Linear*>(m.get())) {
      nn::init::normal_(l->weight, 0.0, 0.01);
      nn::init::zeros_(l->bias);
    }
  }
}

Tensor MobileNetV2::forward(const Tensor& x) {
  KILN_CHECK(x.dim() == 4 && x.size(1) == 3, "MobileNetV2", "expected input (N, 3, H, W), got ",
             x.sizes());
  Tensor h = (*features)(x);
  h = kiln::adaptive_avg_pool2d(h, 1).flatten(1);
  return (*classifier)(h);
}

std::shared_ptr<MobileNetV2> mobilenet_v2(int64_t num_classes, double width_mult) {
  return std::make_shared<MobileNetV2>(num_classes, width_mult);
}

}  // namespace kiln::models
