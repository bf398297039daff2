// Model zoo against torchvision's architecture: state_dict names and shapes, parameter counts
// (torchvision's documented 11,689,512 / 25,557,032 / 3,504,872), and logits for deterministic
// weights, all from tests/data/nn/gen_model_reference.py (a transcription of torchvision 0.14's
// ResNet and MobileNetV2 run in PyTorch 1.13, float64); the same for the TransformerClassifier,
// built there from torch.nn's encoder layers. Plus: MLP wiring, LeNet training.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "data/nn/model_reference.inc"
#include "kiln/kiln.h"
#include "kiln/models.h"

using namespace kiln;

namespace {

constexpr DType F64 = DType::Float64;

const model_ref::Model& ref_model(const std::string& name) {
  for (const auto& m : model_ref::models())
    if (m.name == name) return m;
  throw std::runtime_error("no reference model " + name);
}

// Mirrors det_fill in gen_model_reference.py.
Tensor det_fill(const std::string& key, int64_t k, const Dims& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  auto ends = [&](const char* suffix) {
    std::string s = suffix;
    return key.size() >= s.size() && key.compare(key.size() - s.size(), s.size(), s) == 0;
  };
  if (ends("num_batches_tracked")) return kiln::zeros(shape, TensorOptions(DType::Int64));
  Tensor t = kiln::empty(shape, TensorOptions(F64));
  double* p = t.data_ptr<double>();
  for (int64_t j = 0; j < n; ++j) {
    const double i = static_cast<double>(j), kk = static_cast<double>(k);
    double v;
    if (ends("running_var")) {
      v = 1.0 + 0.25 * (1.0 + std::sin(0.7 * i + 0.3 * kk));
    } else if (ends("running_mean")) {
      v = 0.1 * std::sin(0.9 * i + 0.5 * kk);
    } else if (shape.size() == 1 && ends("weight")) {
      v = 1.0 + 0.1 * std::sin(0.37 * i + 0.11 * kk);
    } else if (shape.size() == 1) {
      v = 0.1 * std::sin(0.37 * i + 0.11 * kk + 0.5);
    } else {
      const double fan_in = static_cast<double>(n / shape[0]);
      v = std::sqrt(3.0 / fan_in) * std::sin(0.37 * i + 0.11 * kk + 0.5);
    }
    p[j] = v;
  }
  return t;
}

Tensor det_input(const std::vector<int64_t>& shape) {
  Tensor t = kiln::empty(Dims(shape), TensorOptions(F64));
  for (int64_t j = 0; j < t.numel(); ++j)
    t.data_ptr<double>()[j] = std::sin(0.013 * static_cast<double>(j) + 0.1);
  return t;
}

// Mirrors det_tokens in gen_model_reference.py: (N, T) tokens in [1, vocab_size - 1], row n
// padded after T - 2 - 4n tokens.
Tensor det_tokens(const std::vector<int64_t>& shape, int64_t vocab_size, int64_t padding_idx) {
  Tensor t = kiln::empty(Dims(shape), TensorOptions(DType::Int64));
  const int64_t N = shape[0], T = shape[1];
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < T; ++j)
      t.data_ptr<int64_t>()[n * T + j] =
          j < T - 2 - 4 * n ? 1 + (7 * n + 5 * j + 3) % (vocab_size - 1) : padding_idx;
  return t;
}

// The model's state_dict names and shapes equal the reference's, in order.
void expect_same_state_layout(nn::Module& m, const model_ref::Model& ref) {
  auto sd = m.state_dict();
  ASSERT_EQ(sd.size(), ref.state.size()) << ref.name;
  for (size_t i = 0; i < sd.size(); ++i) {
    EXPECT_EQ(sd[i].first, ref.state[i].name) << ref.name << " entry " << i;
    EXPECT_EQ(sd[i].second.sizes(), Dims(ref.state[i].shape)) << ref.state[i].name;
  }
  EXPECT_EQ(m.num_parameters(), ref.num_parameters) << ref.name;
}

// Loads det_fill weights into a model with the reference's head and compares eval logits in float64
// (weights loaded in float64) and float32, on det_input or on the given input (integer tokens stay
// as they are for the float32 run).
void expect_reference_logits(const std::shared_ptr<nn::Module>& m, const model_ref::Model& ref,
                             double f32_tol, Tensor x = {}) {
  m->to(F64);
  nn::StateDict sd;
  int64_t k = 0;
  for (const auto& [name, t] : m->state_dict()) sd.insert(name, det_fill(name, k++, t.sizes()));
  m->load_state_dict(sd);
  m->eval();
  Tensor want = kiln::empty({static_cast<int64_t>(ref.logits.size())}, TensorOptions(F64));
  for (size_t i = 0; i < ref.logits.size(); ++i) want.data_ptr<double>()[i] = ref.logits[i];
  if (!x.defined()) x = det_input(ref.input_shape);
  ASSERT_EQ(x.sizes(), Dims(ref.input_shape)) << ref.name;
  autograd::NoGradGuard ng;
  Tensor got64 = (*m)(x).reshape({-1});
  EXPECT_LT(amax(abs(got64 - want)).item<double>(), 1e-9) << ref.name << " f64";
  m->to(DType::Float32);
  Tensor got32 = (*m)(x.is_floating_point() ? x.to(DType::Float32) : x).reshape({-1});
  EXPECT_EQ(got32.dtype(), DType::Float32);
  EXPECT_LT(amax(abs(got32.to(F64) - want)).item<double>(), f32_tol) << ref.name << " f32";
}

}  // namespace

TEST(Models, Mlp) {
  auto net = models::mlp({4, 8, 8, 3});
  EXPECT_EQ(net->state_dict().keys(), (std::vector<std::string>{"0.weight", "0.bias", "2.weight",
                                                                "2.bias", "4.weight", "4.bias"}));
  EXPECT_EQ(net->size(), 5u);  // no ReLU after the last layer
  EXPECT_EQ(net->num_parameters(), 4 * 8 + 8 + 8 * 8 + 8 + 8 * 3 + 3);
  Tensor x = kiln::linspace(-1, 1, 8).reshape({2, 4});
  auto l = [&](size_t i) { return net->at<nn::Linear>(i); };
  Tensor want = kiln::linear(
      relu(kiln::linear(relu(kiln::linear(x, l(0)->weight, l(0)->bias)), l(2)->weight, l(2)->bias)),
      l(4)->weight, l(4)->bias);
  EXPECT_LT(amax(abs((*net)(x)-want)).item<double>(), 1e-6);
  EXPECT_THROW(models::mlp({4}), Error);
}

TEST(Models, LeNetMatchesReference) {
  const auto& ref = ref_model("lenet");
  auto net = models::lenet();
  expect_same_state_layout(*net, ref);
  EXPECT_EQ(net->num_parameters(), 61706);
  expect_reference_logits(net, ref, 1e-4);
  EXPECT_THROW((*net)(kiln::zeros({1, 1, 32, 32}, F64)), Error);
}

TEST(Models, LeNetTrainsOnAFixedBatch) {
  nn::init::manual_seed(0);
  auto net = models::lenet();
  std::mt19937 gen(3);
  std::normal_distribution<float> nd;
  Tensor x = kiln::empty({16, 1, 28, 28});
  for (int64_t i = 0; i < x.numel(); ++i) x.data_ptr<float>()[i] = nd(gen);
  Tensor y = kiln::empty({16}, TensorOptions(DType::Int64));
  for (int64_t i = 0; i < 16; ++i) y.data_ptr<int64_t>()[i] = i % 10;
  nn::CrossEntropyLoss loss_fn;
  double first = 0, last = 0;
  TensorList params = net->parameters(), velocity;
  for (const Tensor& p : params) velocity.push_back(kiln::zeros_like(p));
  // SGD with momentum 0.9, written out.
  for (int step = 0; step < 40; ++step) {
    net->zero_grad();
    Tensor loss = loss_fn((*net)(x), y);
    loss.backward();
    if (step == 0) first = loss.item<double>();
    last = loss.item<double>();
    autograd::NoGradGuard ng;
    for (size_t i = 0; i < params.size(); ++i) {
      mul_(velocity[i], 0.9);
      add_(velocity[i], params[i].grad());
      sub_(params[i], velocity[i], 0.05);
    }
  }
  EXPECT_NEAR(first, std::log(10.0), 0.3);  // near-uniform predictions at init
  EXPECT_LT(last, 0.5 * first) << "first " << first << " last " << last;
}

TEST(Models, ResNet18) {
  const auto& ref = ref_model("resnet18");
  nn::init::manual_seed(1);
  auto net = models::resnet18();
  expect_same_state_layout(*net, ref);
  auto sd = net->state_dict();
  EXPECT_EQ(sd.size(), 122u);
  EXPECT_EQ(net->num_parameters(), 11689512);
  EXPECT_EQ(sd.keys().front(), "conv1.weight");
  EXPECT_EQ(sd.keys().back(), "fc.bias");
  EXPECT_TRUE(sd.contains("layer1.0.conv1.weight"));
  EXPECT_TRUE(sd.contains("bn1.running_mean"));
  EXPECT_FALSE(sd.contains("layer1.0.downsample.0.weight"));
  EXPECT_EQ(sd["layer2.0.downsample.0.weight"].sizes(), (Dims{128, 64, 1, 1}));
  EXPECT_EQ(sd["fc.weight"].sizes(), (Dims{1000, 512}));
  // torchvision's conv init: kaiming_normal_(fan_out, relu): conv1 std = sqrt(2 / (64 * 49)).
  EXPECT_NEAR(kiln::std(net->conv1->weight.to(F64)).item<double>(), std::sqrt(2.0 / (64 * 49)),
              0.05 * std::sqrt(2.0 / (64 * 49)));
  EXPECT_EQ(amin(net->bn1->weight).item<double>(), 1.0);
  // Train-mode forward/backward on a tiny batch reaches every parameter.
  Tensor x = kiln::linspace(-1, 1, 2 * 3 * 32 * 32).reshape({2, 3, 32, 32});
  sum((*net)(x)).backward();
  for (const auto& [name, p] : net->named_parameters()) EXPECT_TRUE(p.grad().defined()) << name;
  EXPECT_EQ(net->bn1->num_batches_tracked.item<int64_t>(), 1);

  // A 10-class head (replace_module keeps the registry and the member in step).
  net->fc = net->replace_module("fc", std::make_shared<nn::Linear>(512, 10));
  EXPECT_EQ(net->state_dict()["fc.weight"].sizes(), (Dims{10, 512}));
  expect_reference_logits(net, ref, 2e-3);
}

TEST(Models, ResNet50) {
  const auto& ref = ref_model("resnet50");
  auto net = models::resnet50();
  expect_same_state_layout(*net, ref);
  EXPECT_EQ(net->state_dict().size(), 320u);
  EXPECT_EQ(net->num_parameters(), 25557032);
  EXPECT_EQ(net->get_parameter("layer1.0.downsample.0.weight").sizes(), (Dims{256, 64, 1, 1}));
  // v1.5: the stride sits on the 3x3 conv.
  EXPECT_EQ(net->layer2->at<models::Bottleneck>(0)->conv2->options.stride().h, 2);
  EXPECT_EQ(net->layer2->at<models::Bottleneck>(0)->conv1->options.stride().h, 1);
  net->fc = net->replace_module("fc", std::make_shared<nn::Linear>(2048, 10));
  expect_reference_logits(net, ref, 2e-3);
}

TEST(Models, MobileNetV2) {
  const auto& ref = ref_model("mobilenet_v2");
  auto net = models::mobilenet_v2();
  expect_same_state_layout(*net, ref);
  auto sd = net->state_dict();
  EXPECT_EQ(net->num_parameters(), 3504872);
  EXPECT_EQ(sd.keys().front(), "features.0.0.weight");
  EXPECT_EQ(sd["features.0.0.weight"].sizes(), (Dims{32, 3, 3, 3}));
  EXPECT_EQ(sd["features.1.conv.0.0.weight"].sizes(), (Dims{32, 1, 3, 3}));  // depthwise
  EXPECT_EQ(sd["features.1.conv.1.weight"].sizes(), (Dims{16, 32, 1, 1}));
  EXPECT_EQ(sd["features.2.conv.0.0.weight"].sizes(), (Dims{96, 16, 1, 1}));
  EXPECT_EQ(sd["features.18.0.weight"].sizes(), (Dims{1280, 320, 1, 1}));
  EXPECT_EQ(sd.keys().back(), "classifier.1.bias");
  EXPECT_EQ(sd["classifier.1.weight"].sizes(), (Dims{1000, 1280}));
  // torchvision init: classifier N(0, 0.01), bias 0.
  EXPECT_NEAR(kiln::std(sd["classifier.1.weight"].to(F64)).item<double>(), 0.01, 0.0005);
  EXPECT_EQ(amax(abs(sd["classifier.1.bias"])).item<double>(), 0.0);
  auto block = net->features->at<models::InvertedResidual>(3);  // 24 -> 24, stride 1
  EXPECT_TRUE(block->use_res_connect);
  EXPECT_FALSE(net->features->at<models::InvertedResidual>(2)->use_res_connect);
  // A 10-class head: replacing a Sequential's child also changes what its forward calls.
  net->classifier->replace_module("1", std::make_shared<nn::Linear>(1280, 10));
  expect_reference_logits(net, ref, 2e-3);
}

namespace {
// The small transformer both tests below build (the reference script's configuration).
models::TransformerClassifierOptions small_transformer() {
  models::TransformerClassifierOptions o{20, 3};
  o.d_model = 16;
  o.nhead = 2;
  o.num_layers = 2;
  o.dim_feedforward = 32;
  o.max_len = 12;
  o.padding_idx = 0;
  return o;
}
}  // namespace

TEST(Models, TransformerClassifier) {
  const models::TransformerClassifierOptions o = small_transformer();
  nn::init::manual_seed(4);
  auto net = std::make_shared<models::TransformerClassifier>(o);
  auto keys = net->state_dict().keys();
  EXPECT_EQ(keys[0], "pos_embedding");
  EXPECT_EQ(keys[1], "embedding.weight");
  EXPECT_EQ(keys[2], "layers.0.self_attn.in_proj_weight");
  EXPECT_EQ(keys.back(), "head.bias");
  EXPECT_EQ(keys.size(), 2u + 2u * 12u + 4u);
  net->eval();
  // Padding is masked from attention and pooling: trailing pads change nothing.
  Tensor a = kiln::tensor({{5, 6, 7, 0, 0}}, DType::Int64);
  Tensor b = kiln::tensor({{5, 6, 7, 0, 0, 0, 0, 0}}, DType::Int64);
  Tensor c = kiln::tensor({{5, 6, 7}}, DType::Int64);
  Tensor ya = (*net)(a), yb = (*net)(b), yc = (*net)(c);
  EXPECT_EQ(ya.sizes(), (Dims{1, 3}));
  EXPECT_LT(amax(abs(ya - yb)).item<double>(), 1e-5);
  EXPECT_LT(amax(abs(ya - yc)).item<double>(), 1e-5);
  // A different real token changes the output.
  EXPECT_GT(amax(abs(ya - (*net)(kiln::tensor({{5, 6, 8, 0, 0}}, DType::Int64)))).item<double>(),
            1e-6);
  EXPECT_THROW((*net)(kiln::zeros({1, 13}, DType::Int64)), Error);  // longer than max_len
  EXPECT_THROW((*net)(kiln::zeros({1, 3})), Error);                 // float tokens

  // Training: loss falls on a small separable task (label = which of tokens 1..3 comes first).
  net->train();
  Tensor tokens = kiln::empty({12, 6}, TensorOptions(DType::Int64));
  Tensor labels = kiln::empty({12}, TensorOptions(DType::Int64));
  for (int64_t i = 0; i < 12; ++i) {
    labels.data_ptr<int64_t>()[i] = i % 3;
    for (int64_t t = 0; t < 6; ++t)
      tokens.data_ptr<int64_t>()[i * 6 + t] = t == 0 ? 1 + i % 3 : 4 + (i * 7 + t * 3) % 15;
  }
  nn::CrossEntropyLoss loss_fn;
  double first = 0, last = 0;
  TensorList params = net->parameters();
  for (int step = 0; step < 25; ++step) {
    net->zero_grad();
    Tensor loss = loss_fn((*net)(tokens), labels);
    loss.backward();
    if (step == 0) first = loss.item<double>();
    last = loss.item<double>();
    autograd::NoGradGuard ng;
    for (Tensor& p : params) sub_(p, p.grad(), 0.1);
  }
  EXPECT_LT(last, 0.5 * first) << "first " << first << " last " << last;
}

// The positional embedding, the padding mask (attention keys and pooling), pre-norm, GELU, the
// final LayerNorm and the head, against torch.nn's TransformerEncoderLayer(batch_first,
// norm_first, gelu) on two rows with 2 and 6 padding tokens.
TEST(Models, TransformerClassifierReferenceLogits) {
  const auto& ref = ref_model("transformer_classifier");
  const models::TransformerClassifierOptions o = small_transformer();
  auto net = std::make_shared<models::TransformerClassifier>(o);
  expect_same_state_layout(*net, ref);
  expect_reference_logits(net, ref, 1e-5, det_tokens(ref.input_shape, o.vocab_size, 0));
}

TEST(Models, LSTMClassifier) {
  for (bool bidir : {false, true}) {
    models::LSTMClassifierOptions o{30, 4};
    o.embedding_dim = 8;
    o.hidden_size = 6;
    o.num_layers = 2;
    o.bidirectional = bidir;
    auto net = std::make_shared<models::LSTMClassifier>(o);
    auto keys = net->state_dict().keys();
    EXPECT_EQ(keys.front(), "embedding.weight");
    EXPECT_EQ(keys[1], "lstm.weight_ih_l0");
    EXPECT_EQ(keys.back(), "fc.bias");
    EXPECT_EQ(keys.size(), 1u + 8u * (bidir ? 2u : 1u) + 2u);
    Tensor tokens = kiln::tensor({{1, 2, 3, 4}, {5, 6, 7, 8}, {9, 9, 9, 9}}, DType::Int64);
    Tensor y = (*net)(tokens);
    EXPECT_EQ(y.sizes(), (Dims{3, 4}));
    // The head reads the last layer's final states: the forward direction's last output and,
    // when bidirectional, the backward direction's first output.
    Tensor out = (*net->lstm)((*net->embedding)(tokens)).output;  // (N, T, D * H)
    Tensor h = out.select(1, 3).narrow(1, 0, 6);
    if (bidir) h = kiln::cat({h, out.select(1, 0).narrow(1, 6, 6)}, 1);
    EXPECT_LT(amax(abs(y - (*net->fc)(h))).item<double>(), 1e-6);
    sum(y).backward();
    for (const auto& [name, p] : net->named_parameters()) EXPECT_TRUE(p.grad().defined()) << name;
  }
}
