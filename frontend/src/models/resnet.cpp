#include "kiln/models.h"
#include "kiln/ops.h"

namespace kiln::models {

namespace {
std::shared_ptr<nn::Conv2d> conv3x3(int64_t in, int64_t out, int64_t stride = 1) {
  return std::make_shared<nn::Conv2d>(
      nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false));
}
std::shared_ptr<nn::Conv2d> conv1x1(int64_t in, int64_t out, int64_t stride = 1) {
  return std::make_shared<nn::Conv2d>(nn::Conv2dOptions(in, out, 1).stride(stride).bias(false));
}
}  // namespace

BasicBlock::BasicBlock(int64_t inplanes, int64_t planes, int64_t stride, nn::ModulePtr ds)
    : Module("BasicBlock") {
  conv1 = register_module("conv1", conv3x3(inplanes, planes, stride));
  bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(planes));
  relu = register_module("relu", std::make_shared<nn::ReLU>());
  conv2 = register_module("conv2", conv3x3(planes, planes));
  bn2 = register_module("bn2", std::make_shared<nn::BatchNorm2d>(planes));
  if (ds) downsample = register_module("downsample", ds);
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor out = (*relu)((*bn1)((*conv1)(x)));
  out = (*bn2)((*conv2)(out));
  Tensor identity = downsample ? (*downsample)(x) : x;
  return (*relu)(out + identity);
}

Bottleneck::Bottleneck(int64_t inplanes, int64_t planes, int64_t stride, nn::ModulePtr ds)
    : Module("Bottleneck") {
  const int64_t width = planes;  // groups = 1, base_width = 64
  conv1 = register_module("conv1", conv1x1(inplanes, width));
  bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(width));
  conv2 = register_module("conv2", conv3x3(width, width, stride));
  bn2 = register_module("bn2", std::make_shared<nn::BatchNorm2d>(width));
  conv3 = register_module("conv3", conv1x1(width, planes * expansion));
  bn3 = register_module("bn3", std::make_shared<nn::BatchNorm2d>(planes * expansion));
  relu = register_module("relu", std::make_shared<nn::ReLU>());
  if (ds) downsample = register_module("downsample", ds);
}

Tensor Bottleneck::forward(const Tensor& x) {
  Tensor out = (*relu)((*bn1)((*conv1)(x)));
  out = (*relu)((*bn2)((*conv2)(out)));
  out = (*bn3)((*conv3)(out));
  Tensor identity = downsample ? (*downsample)(x) : x;
  return (*relu)(out + identity);
}

ResNet::ResNet(Block block, std::vector<int64_t> layers, int64_t num_classes) : Module("ResNet") {
  KILN_CHECK(layers.size() == 4, "ResNet", "expected 4 stage sizes, got ", layers.size());
  const int64_t expansion = block == Block::Basic ? BasicBlock::expansion : Bottleneck::expansion;
  conv1 = register_module(
      "conv1",
      std::make_shared<nn::Conv2d>(nn::Conv2dOptions(3, 64, 7).stride(2).padding(3).bias(false)));
  bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(64));
  relu = register_module("relu", std::make_shared<nn::ReLU>());
  maxpool = register_module("maxpool", std::make_shared<nn::MaxPool2d>(3, 2, 1));
  layer1 = register_module("layer1", make_layer(block, 64, layers[0], 1));
  layer2 = register_module("layer2", make_layer(block, 128, layers[1], 2));
  layer3 = register_module("layer3", make_layer(block, 256, layers[2], 2));
  layer4 = register_module("layer4", make_layer(block, 512, layers[3], 2));
  avgpool = register_module("avgpool", std::make_shared<nn::AdaptiveAvgPool2d>(1));
  fc = register_module("fc", std::make_shared<nn::Linear>(512 * expansion, num_classes));
  // torchvision: convs kaiming_normal_(fan_out, relu); batch norms weight 1, bias 0 (their
  // constructors already do that); fc keeps Linear's default.
  for (const auto& m : modules()) {
    if (auto* c = dynamic_cast<nn::Conv2d*>(m.get())) {
      nn::init::kaiming_normal_(c->weight, 0.0, nn::init::FanMode::FanOut,
                                nn::init::Nonlinearity::ReLU);
    }
  }
}

std::shared_ptr<nn::Sequential> ResNet::make_layer(Block block, int64_t planes, int64_t blocks,
                                                   int64_t stride) {
  const int64_t expansion = block == Block::Basic ? BasicBlock::expansion : Bottleneck::expansion;
  nn::ModulePtr ds;
  if (stride != 1 || inplanes_ != planes * expansion) {
    ds = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
        conv1x1(inplanes_, planes * expansion, stride),
        std::make_shared<nn::BatchNorm2d>(planes * expansion)});
  }
  auto seq = std::make_shared<nn::Sequential>();
  auto make = [&](int64_t s, nn::ModulePtr d) -> nn::ModulePtr {
    if (block == Block::Basic) return std::make_shared<BasicBlock>(inplanes_, planes, s, d);
    return std::make_shared<Bottleneck>(inplanes_, planes, s, d);
  };
  seq->push_back(make(stride, ds));
  inplanes_ = planes * expansion;
  for (int64_t i = 1; i < blocks; ++i) seq->push_back(make(1, nullptr));
  return seq;
}

Tensor ResNet::forward(const Tensor& x) {
  KILN_CHECK(x.dim() == 4 && x.size(1) == 3, "ResNet", "expected input (N, 3, H, W), got ",
             x.sizes());
  Tensor h = (*maxpool)((*relu)((*bn1)((*conv1)(x))));
  h = (*layer4)((*layer3)((*layer2)((*layer1)(h))));
  h = (*avgpool)(h).flatten(1);
  return (*fc)(h);
}

std::shared_ptr<ResNet> resnet18(int64_t num_classes) {
  return std::make_shared<ResNet>(ResNet::Block::Basic, std::vector<int64_t>{2, 2, 2, 2},
                                  num_classes);
}
std::shared_ptr<ResNet> resnet34(int64_t num_classes) {
  return std::make_shared<ResNet>(ResNet::Block::Basic, std::vector<int64_t>{3, 4, 6, 3},
                                  num_classes);
}
std::shared_ptr<ResNet> resnet50(int64_t num_classes) {
  return std::make_shared<ResNet>(ResNet::Block::Bottleneck, std::vector<int64_t>{3, 4, 6, 3},
                                  num_classes);
}

}  // namespace kiln::models
