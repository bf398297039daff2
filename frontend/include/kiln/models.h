#pragma once
// kiln::models — a small model zoo. ResNet and MobileNetV2 name their parameters exactly as
// torchvision does (conv1.weight, layer1.0.downsample.0.weight, fc.weight; features.0.0.weight ...
// classifier.1.weight), so torchvision state dicts load by name.

#include <memory>
#include <vector>

#include "kiln/nn.h"

namespace kiln::models {

// Linear layers sizes[0] -> sizes[1] -> ... with ReLU between them (not after the last):
// Sequential "0" Linear, "1" ReLU, "2" Linear, ...
std::shared_ptr<nn::Sequential> mlp(const std::vector<int64_t>& sizes);

// LeNet-5 for 1x28x28 inputs: conv1(1, 6, 5, padding 2) - relu - maxpool 2 - conv2(6, 16, 5) -
// relu - maxpool 2 - flatten - fc1(400, 120) - relu - fc2(120, 84) - relu - fc3(84, classes).
class LeNet : public nn::Module {
 public:
  explicit LeNet(int64_t num_classes = 10);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::Linear> fc1, fc2, fc3;
};
std::shared_ptr<LeNet> lenet(int64_t num_classes = 10);

// --- ResNet (torchvision's v1.5: the stride of a bottleneck sits on its 3x3 conv)
class BasicBlock : public nn::Module {
 public:
  static constexpr int64_t expansion = 1;
  BasicBlock(int64_t inplanes, int64_t planes, int64_t stride, nn::ModulePtr downsample);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2;
  std::shared_ptr<nn::ReLU> relu;
  nn::ModulePtr downsample;  // null when the identity fits
};

class Bottleneck : public nn::Module {
 public:
  static constexpr int64_t expansion = 4;
  Bottleneck(int64_t inplanes, int64_t planes, int64_t stride, nn::ModulePtr downsample);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<nn::Conv2d> conv1, conv2, conv3;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2, bn3;
  std::shared_ptr<nn::ReLU> relu;
  nn::ModulePtr downsample;
};

class ResNet : public nn::Module {
 public:
  enum class Block { Basic, Bottleneck };
  // layers: blocks per stage, e.g. {2, 2, 2, 2} for ResNet-18.
  ResNet(Block block, std::vector<int64_t> layers, int64_t num_classes = 1000);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<nn::Conv2d> conv1;
  std::shared_ptr<nn::BatchNorm2d> bn1;
  std::shared_ptr<nn::ReLU> relu;
  std::shared_ptr<nn::MaxPool2d> maxpool;
  std::shared_ptr<nn::Sequential> layer1, layer2, layer3, layer4;
  std::shared_ptr<nn::AdaptiveAvgPool2d> avgpool;
  std::shared_ptr<nn::Linear> fc;

 private:
  std::shared_ptr<nn::Sequential> make_layer(Block block, int64_t planes, int64_t blocks,
                                             int64_t stride);
  int64_t inplanes_ = 64;
};
std::shared_ptr<ResNet> resnet18(int64_t num_classes = 1000);
std::shared_ptr<ResNet> resnet34(int64_t num_classes = 1000);
std::shared_ptr<ResNet> resnet50(int64_t num_classes = 1000);

// --- MobileNetV2 (torchvision): features.0 conv-bn-relu6, features.1..17 inverted residuals,
// features.18 1x1 conv-bn-relu6, classifier = (Dropout(0.2), Linear(1280, classes)).
class InvertedResidual : public nn::Module {
 public:
  InvertedResidual(int64_t inp, int64_t oup, int64_t stride, int64_t expand_ratio);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<nn::Sequential> conv;
  bool use_res_connect;
};

class MobileNetV2 : public nn::Module {
 public:
  explicit MobileNetV2(int64_t num_classes = 1000, double width_mult = 1.0, double dropout = 0.2);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<nn::Sequential> features;
  std::shared_ptr<nn::Sequential> classifier;
};
std::shared_ptr<MobileNetV2> mobilenet_v2(int64_t num_classes = 1000, double width_mult = 1.0);

// --- sequence classifiers over int64 token ids (N, T)

// Token embedding + learned positional embedding (pos_embedding [max_len, d_model]), a stack of
// batch-first TransformerEncoderLayers (pre-norm, GELU), a final LayerNorm, mean pooling over the
// non-padded positions, and a linear head.
struct TransformerClassifierOptions {
  int64_t vocab_size, num_classes;
  int64_t d_model = 64, nhead = 4, num_layers = 2, dim_feedforward = 128, max_len = 256;
  double dropout = 0.1;
  std::optional<int64_t> padding_idx = std::nullopt;  // tokens equal to it are masked out
};
class TransformerClassifier : public nn::Module {
 public:
  explicit TransformerClassifier(TransformerClassifierOptions options);
  Tensor forward(const Tensor& tokens) override;
  TransformerClassifierOptions options;
  std::shared_ptr<nn::Embedding> embedding;
  Tensor& pos_embedding;
  std::shared_ptr<nn::ModuleList> layers;
  std::shared_ptr<nn::LayerNorm> norm;
  std::shared_ptr<nn::Linear> head;
};
std::shared_ptr<TransformerClassifier> transformer_classifier(int64_t vocab_size,
                                                              int64_t num_classes,
                                                              int64_t d_model = 64,
                                                              int64_t nhead = 4,
                                                              int64_t num_layers = 2);

// Embedding -> (batch-first) LSTM -> the last layer's final hidden state(s) -> Linear.
struct LSTMClassifierOptions {
  int64_t vocab_size, num_classes;
  int64_t embedding_dim = 64, hidden_size = 128, num_layers = 1;
  bool bidirectional = false;
  double dropout = 0.0;
};
class LSTMClassifier : public nn::Module {
 public:
  explicit LSTMClassifier(LSTMClassifierOptions options);
  Tensor forward(const Tensor& tokens) override;
  LSTMClassifierOptions options;
  std::shared_ptr<nn::Embedding> embedding;
  std::shared_ptr<nn::LSTM> lstm;
  std::shared_ptr<nn::Linear> fc;
};
std::shared_ptr<LSTMClassifier> lstm_classifier(int64_t vocab_size, int64_t num_classes,
                                                int64_t embedding_dim = 64,
                                                int64_t hidden_size = 128);

}  // namespace kiln::models
