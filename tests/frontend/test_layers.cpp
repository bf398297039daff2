// nn layers against independent references: naive float64 loops, closed forms, PyTorch 1.13
// fixtures (tests/data/nn/gen_nn_reference.py -> nn_reference.inc; loading their state dicts also
// checks parameter names and shapes), hand-written LSTM/GRU cell equations, and finite
// differences (gradcheck over inputs and parameters in float64).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "data/nn/nn_reference.inc"
#include "kiln/gradcheck.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"

using namespace kiln;

namespace {

constexpr DType F64 = DType::Float64;

const nn_ref::Ref& find_ref(const std::string& name) {
  static const auto index = [] {
    std::map<std::string, const nn_ref::Ref*> m;
    for (const auto& r : nn_ref::refs()) m[r.name] = &r;
    return m;
  }();
  auto it = index.find(name);
  if (it == index.end()) throw std::runtime_error("no reference named " + name);
  return *it->second;
}

Tensor fx(const std::string& name, bool grad = false) {
  const auto& r = find_ref(name);
  Tensor t = kiln::empty(Dims(r.shape), TensorOptions(F64));
  for (int64_t i = 0; i < t.numel(); ++i) t.data_ptr<double>()[i] = r.data[i];
  if (grad) t.requires_grad_();
  return t;
}

Tensor fx_bool(const std::string& name) {
  return fx(name) != kiln::zeros({1}, F64);
}

// Loads "<prefix>.state.*" into m (strict: names and shapes must match PyTorch's).
void load_ref(nn::Module& m, const std::string& prefix) {
  const std::string p = prefix + ".state.";
  nn::StateDict sd;
  for (const auto& r : nn_ref::refs()) {
    std::string n = r.name;
    if (n.rfind(p, 0) == 0) sd.insert(n.substr(p.size()), fx(n));
  }
  m.load_state_dict(sd);
}

Tensor rnd(Dims sizes, uint32_t seed, bool grad = false, double lo = -1, double hi = 1) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Tensor t = kiln::empty(sizes, TensorOptions(F64));
  for (int64_t i = 0; i < t.numel(); ++i) t.data_ptr<double>()[i] = dist(gen);
  if (grad) t.requires_grad_();
  return t;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return amax(abs(a.to(F64) - b.to(F64))).item<double>();
}

void expect_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  EXPECT_LT(max_abs_diff(got, want), tol) << what;
}

// Compares m's parameter gradients with "<prefix>.pgrad.<name>" references.
void expect_param_grads(nn::Module& m, const std::string& prefix, double tol) {
  const std::string p = prefix + ".pgrad.";
  int n = 0;
  for (const auto& r : nn_ref::refs()) {
    std::string name = r.name;
    if (name.rfind(p, 0) != 0) continue;
    ++n;
    expect_close(m.get_parameter(name.substr(p.size())).grad(), fx(name), tol, name);
  }
  EXPECT_GT(n, 0) << prefix;
}

// Finite differences of sum(f(inputs) * R) w.r.t. the inputs requiring grad and m's parameters.
void gradcheck_module(nn::Module& m, const TensorList& inputs,
                      const std::function<Tensor(const TensorList&)>& f, const char* what) {
  TensorList all = inputs;
  for (const Tensor& p : m.parameters()) all.push_back(p);
  Tensor probe = f(inputs);
  Tensor r = rnd(probe.sizes(), 99);
  const size_t n = inputs.size();
  auto res = autograd::gradcheck(
      [&](const TensorList& v) {
        TensorList in(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n));
        return TensorList{sum(f(in) * r)};
      },
      all);
  EXPECT_TRUE(res.ok) << what << ": " << res.message;
}

// Naive conv2d in float64 (NCHW, OIHW, groups).
Tensor naive_conv2d(const Tensor& x, const Tensor& w, const Tensor& b, int64_t sh, int64_t sw,
                    int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t groups) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t O = w.size(0), Cg = w.size(1), KH = w.size(2), KW = w.size(3);
  const int64_t Ho = (H + 2 * ph - dh * (KH - 1) - 1) / sh + 1;
  const int64_t Wo = (W + 2 * pw - dw * (KW - 1) - 1) / sw + 1;
  Tensor xc = x.to(F64).contiguous(), wc = w.to(F64).contiguous();
  Tensor out = kiln::zeros({N, O, Ho, Wo}, F64);
  const double* xp = xc.data_ptr<double>();
  const double* wp = wc.data_ptr<double>();
  double* op = out.data_ptr<double>();
  const int64_t Og = O / groups;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < Ho; ++i)
        for (int64_t j = 0; j < Wo; ++j) {
          double acc = b.defined() ? b.to(F64).data_ptr<double>()[o] : 0.0;
          const int64_t g = o / Og;
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t p = 0; p < KH; ++p)
              for (int64_t q = 0; q < KW; ++q) {
                const int64_t hi = i * sh - ph + p * dh, wi = j * sw - pw + q * dw;
                if (hi < 0 || hi >= H || wi < 0 || wi >= W) continue;
                acc += xp[((n * C + g * Cg + c) * H + hi) * W + wi] *
                       wp[((o * Cg + c) * KH + p) * KW + q];
              }
          op[((n * O + o) * Ho + i) * Wo + j] = acc;
        }
  (void)C;
  return out;
}

}  // namespace

// --- Linear / Bilinear / Flatten / Identity / Embedding -------------------------------------

TEST(Layers, LinearForwardAndInit) {
  nn::init::manual_seed(3);
  nn::Linear lin(5, 3);
  EXPECT_EQ(lin.weight.sizes(), (Dims{3, 5}));
  EXPECT_EQ(lin.bias.sizes(), (Dims{3}));
  EXPECT_EQ(lin.state_dict().keys(), (std::vector<std::string>{"weight", "bias"}));
  // kaiming_uniform_(a = sqrt(5)) gives bound 1/sqrt(fan_in), as does the bias.
  const double bound = 1.0 / std::sqrt(5.0);
  EXPECT_LE(amax(abs(lin.weight)).item<double>(), bound);
  EXPECT_LE(amax(abs(lin.bias)).item<double>(), bound);
  Tensor x = rnd({4, 5}, 1).to(DType::Float32);
  Tensor y = lin(x);
  // Naive y[n, o] = sum_i x[n, i] w[o, i] + b[o].
  Tensor xd = x.to(F64), wd = lin.weight.to(F64), bd = lin.bias.to(F64);
  for (int64_t n = 0; n < 4; ++n)
    for (int64_t o = 0; o < 3; ++o) {
      double acc = bd.data_ptr<double>()[o];
      for (int64_t i = 0; i < 5; ++i)
        acc += xd.data_ptr<double>()[n * 5 + i] * wd.data_ptr<double>()[o * 5 + i];
      EXPECT_NEAR(y.index({n, o}).item<double>(), acc, 1e-5);
    }
  nn::Linear nobias(5, 3, false);
  EXPECT_EQ(nobias.state_dict().keys(), std::vector<std::string>{"weight"});
  EXPECT_THROW(lin(kiln::zeros({2, 4})), Error);
  // Batched leading dims.
  EXPECT_EQ(lin(kiln::zeros({2, 3, 5})).sizes(), (Dims{2, 3, 3}));
}

TEST(Layers, LinearInitStatistics) {
  nn::init::manual_seed(5);
  nn::Linear lin(400, 300);
  // U(-b, b): variance b^2 / 3 with b = 1/20.
  const double b = 1.0 / 20.0;
  EXPECT_NEAR(var(lin.weight.to(F64)).item<double>(), b * b / 3, 0.03 * b * b / 3);
  EXPECT_NEAR(mean(lin.weight.to(F64)).item<double>(), 0.0, 1e-3);
  EXPECT_GT(amax(abs(lin.weight)).item<double>(), 0.99 * b);
  // Same seed, same parameters.
  nn::init::manual_seed(5);
  nn::Linear again(400, 300);
  EXPECT_EQ(max_abs_diff(again.weight, lin.weight), 0.0);
}

TEST(Layers, LinearGradcheck) {
  auto lin = std::make_shared<nn::Linear>(3, 2);
  lin->to(F64);
  Tensor x = rnd({2, 3}, 7, true);
  gradcheck_module(
      *lin, {x}, [&](const TensorList& v) { return (*lin)(v[0]); }, "Linear");
}

TEST(Layers, BilinearMatchesPyTorch) {
  auto m = std::make_shared<nn::Bilinear>(3, 4, 2);
  m->to(F64);
  load_ref(*m, "bilinear");
  Tensor x1 = fx("bilinear.x1", true), x2 = fx("bilinear.x2", true);
  Tensor out = (*m)(x1, x2);
  expect_close(out, fx("bilinear.out"), 1e-12, "bilinear out");
  sum(out * fx("bilinear.R")).backward();
  expect_close(x1.grad(), fx("bilinear.grad.x1"), 1e-12, "bilinear dx1");
  expect_close(x2.grad(), fx("bilinear.grad.x2"), 1e-12, "bilinear dx2");
  expect_param_grads(*m, "bilinear", 1e-12);
}

TEST(Layers, FlattenIdentityEmbedding) {
  nn::Flatten flat;
  EXPECT_EQ(flat(kiln::zeros({2, 3, 4, 5})).sizes(), (Dims{2, 60}));
  nn::Flatten flat2(0, 1);
  EXPECT_EQ(flat2(kiln::zeros({2, 3, 4})).sizes(), (Dims{6, 4}));
  nn::Identity id;
  Tensor x = kiln::ones({3});
  EXPECT_TRUE(id(x).is_same(x));

  nn::Embedding emb(6, 3, /*padding_idx=*/-2);  // normalized to 4
  ASSERT_TRUE(emb.padding_idx.has_value());
  EXPECT_EQ(*emb.padding_idx, 4);
  EXPECT_EQ(amax(abs(emb.weight.select(0, 4))).item<double>(), 0.0);
  Tensor idx = kiln::tensor({{1, 4}, {5, 1}}, DType::Int64);
  Tensor e = emb(idx);
  EXPECT_EQ(e.sizes(), (Dims{2, 2, 3}));
  EXPECT_EQ(max_abs_diff(e.index({1, 0}), emb.weight.select(0, 5)), 0.0);
  sum(e).backward();
  // Row 1 used twice; the padding row gets no gradient.
  EXPECT_DOUBLE_EQ(emb.weight.grad().index({1, 0}).item<double>(), 2.0);
  EXPECT_DOUBLE_EQ(emb.weight.grad().index({4, 0}).item<double>(), 0.0);
  EXPECT_DOUBLE_EQ(emb.weight.grad().index({0, 0}).item<double>(), 0.0);
  // N(0, 1) initialization.
  nn::init::manual_seed(11);
  nn::Embedding big(1000, 100);
  EXPECT_NEAR(kiln::std(big.weight.to(F64)).item<double>(), 1.0, 0.02);
}

// --- convolutions ---------------------------------------------------------------------------

TEST(Layers, Conv2dAgainstNaiveLoops) {
  nn::init::manual_seed(2);
  auto conv = std::make_shared<nn::Conv2d>(
      nn::Conv2dOptions(4, 6, {3, 2}).stride({2, 1}).padding({1, 0}).dilation({1, 2}).groups(2));
  EXPECT_EQ(conv->weight.sizes(), (Dims{6, 2, 3, 2}));
  EXPECT_EQ(conv->bias.sizes(), (Dims{6}));
  // Default init: |w| and |b| <= 1/sqrt(fan_in), fan_in = 2 * 3 * 2.
  EXPECT_LE(amax(abs(conv->weight)).item<double>(), 1.0 / std::sqrt(12.0));
  EXPECT_LE(amax(abs(conv->bias)).item<double>(), 1.0 / std::sqrt(12.0));
  Tensor x = rnd({2, 4, 7, 6}, 3).to(DType::Float32);
  Tensor y = (*conv)(x);
  expect_close(y, naive_conv2d(x, conv->weight, conv->bias, 2, 1, 1, 0, 1, 2, 2), 1e-5, "conv2d");

  auto nb = std::make_shared<nn::Conv2d>(nn::Conv2dOptions(3, 2, 3).bias(false));
  EXPECT_EQ(nb->state_dict().keys(), std::vector<std::string>{"weight"});

  // Reflect padding = explicit pad then an unpadded convolution.
  auto rc = std::make_shared<nn::Conv2d>(
      nn::Conv2dOptions(2, 3, 3).padding(1).padding_mode(nn::PaddingMode::Reflect));
  rc->to(F64);
  Tensor xr = rnd({1, 2, 5, 4}, 4);
  Tensor padded = kiln::pad(xr, {1, 1, 1, 1}, PadMode::Reflect);
  expect_close((*rc)(xr), naive_conv2d(padded, rc->weight, rc->bias, 1, 1, 0, 0, 1, 1, 1), 1e-12,
               "conv2d reflect");
}

TEST(Layers, Conv2dGradcheck) {
  auto conv = std::make_shared<nn::Conv2d>(nn::Conv2dOptions(2, 2, 2).stride(2).padding(1));
  conv->to(F64);
  Tensor x = rnd({1, 2, 3, 3}, 5, true);
  gradcheck_module(
      *conv, {x}, [&](const TensorList& v) { return (*conv)(v[0]); }, "Conv2d");
}

TEST(Layers, Conv1dAgainstConv2d) {
  // conv1d over L equals conv2d over a height-1 image (checked against the naive 2-D loops).
  auto conv = std::make_shared<nn::Conv1d>(nn::Conv1dOptions(3, 4, 3).stride(2).padding(1));
  conv->to(F64);
  EXPECT_EQ(conv->weight.sizes(), (Dims{4, 3, 3}));
  Tensor x = rnd({2, 3, 9}, 6);
  Tensor want =
      naive_conv2d(x.unsqueeze(2), conv->weight.unsqueeze(2), conv->bias, 1, 2, 0, 1, 1, 1, 1)
          .squeeze(2);
  expect_close((*conv)(x), want, 1e-12, "conv1d");
}

TEST(Layers, ConvTranspose2dMatchesPyTorch) {
  auto m = std::make_shared<nn::ConvTranspose2d>(
      nn::ConvTranspose2dOptions(4, 6, 3).stride(2).padding(1).output_padding(1).groups(2));
  EXPECT_EQ(m->weight.sizes(), (Dims{4, 3, 3, 3}));
  // fan_in for a transposed conv weight is size(1) * k * k = 27.
  EXPECT_LE(amax(abs(m->weight)).item<double>(), 1.0 / std::sqrt(27.0));
  m->to(F64);
  load_ref(*m, "convt");
  expect_close((*m)(fx("convt.x")), fx("convt.out"), 1e-12, "conv_transpose2d");
}

// --- normalization ----------------------------------------------------------------------------

TEST(Layers, BatchNorm2dMatchesPyTorch) {
  for (const char* c : {"bn", "bn_cma"}) {
    const std::string cs = c;
    auto bn = std::make_shared<nn::BatchNorm2d>(
        3, 1e-5, cs == "bn" ? std::optional<double>(0.1) : std::nullopt);
    bn->to(F64);
    load_ref(*bn, cs + ".init");
    EXPECT_EQ(bn->state_dict().keys(),
              (std::vector<std::string>{"weight", "bias", "running_mean", "running_var",
                                        "num_batches_tracked"}));
    bn->train();
    expect_close((*bn)(fx(cs + ".x1")), fx(cs + ".y1"), 1e-12, cs + " y1");
    expect_close((*bn)(fx(cs + ".x2")), fx(cs + ".y2"), 1e-12, cs + " y2");
    bn->eval();
    expect_close((*bn)(fx(cs + ".x3")), fx(cs + ".y3"), 1e-12, cs + " y3 (eval)");
    expect_close(bn->running_mean, fx(cs + ".final.state.running_mean"), 1e-12, cs + " mean");
    expect_close(bn->running_var, fx(cs + ".final.state.running_var"), 1e-12, cs + " var");
    EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 2);
    EXPECT_EQ(bn->num_batches_tracked.dtype(), DType::Int64);
  }
}

TEST(Layers, BatchNorm1dByHand) {
  nn::BatchNorm1d bn(2);
  EXPECT_THROW(bn(kiln::zeros({2, 2, 2, 2})), Error);
  EXPECT_THROW(bn(kiln::zeros({4, 3})), Error);
  Tensor x = kiln::tensor({{1.0, 10.0}, {3.0, 20.0}});
  Tensor y = bn(x);
  // Channel 0: mean 2, biased var 1 -> (-1, 1)/sqrt(1 + eps).
  EXPECT_NEAR(y.index({0, 0}).item<double>(), -1.0 / std::sqrt(1.0 + 1e-5), 1e-6);
  // Channel 1: mean 15, biased var 25.
  EXPECT_NEAR(y.index({1, 1}).item<double>(), 5.0 / std::sqrt(25.0 + 1e-5), 1e-6);
  // Running stats: momentum 0.1, unbiased var (2 for channel 0, 50 for channel 1).
  EXPECT_NEAR(bn.running_mean.index({0}).item<double>(), 0.2, 1e-6);
  EXPECT_NEAR(bn.running_var.index({0}).item<double>(), 0.9 + 0.1 * 2.0, 1e-6);
  EXPECT_NEAR(bn.running_var.index({1}).item<double>(), 0.9 + 0.1 * 50.0, 1e-5);
  // No running statistics: eval still normalizes with the batch.
  nn::BatchNorm1d nostats(2, 1e-5, 0.1, true, false);
  EXPECT_EQ(nostats.state_dict().keys(), (std::vector<std::string>{"weight", "bias"}));
  nostats.eval();
  EXPECT_NEAR(nostats(x).index({0, 0}).item<double>(), -1.0 / std::sqrt(1.0 + 1e-5), 1e-6);
}

TEST(Layers, BatchNormGradcheck) {
  auto bn = std::make_shared<nn::BatchNorm2d>(2);
  bn->to(F64);
  {
    autograd::NoGradGuard ng;
    copy_(bn->weight, rnd({2}, 8));
    copy_(bn->bias, rnd({2}, 9));
  }
  Tensor x = rnd({3, 2, 2, 2}, 10, true);
  gradcheck_module(
      *bn, {x}, [&](const TensorList& v) { return (*bn)(v[0]); }, "BatchNorm2d train");
  bn->eval();
  gradcheck_module(
      *bn, {x}, [&](const TensorList& v) { return (*bn)(v[0]); }, "BatchNorm2d eval");
}

TEST(Layers, LayerNormAndGroupNormAgainstNaive) {
  auto ln = std::make_shared<nn::LayerNorm>(Dims{2, 3});
  ln->to(F64);
  {
    autograd::NoGradGuard ng;
    copy_(ln->weight, rnd({2, 3}, 12));
    copy_(ln->bias, rnd({2, 3}, 13));
  }
  Tensor x = rnd({4, 2, 3}, 14);
  // Naive: per sample, mean/var over the 6 trailing elements.
  Tensor want = kiln::empty({4, 2, 3}, F64);
  for (int64_t n = 0; n < 4; ++n) {
    double m = 0, v = 0;
    for (int64_t i = 0; i < 6; ++i) m += x.data_ptr<double>()[n * 6 + i];
    m /= 6;
    for (int64_t i = 0; i < 6; ++i) v += std::pow(x.data_ptr<double>()[n * 6 + i] - m, 2);
    v /= 6;
    for (int64_t i = 0; i < 6; ++i)
      want.data_ptr<double>()[n * 6 + i] = (x.data_ptr<double>()[n * 6 + i] - m) /
                                               std::sqrt(v + 1e-5) *
                                               ln->weight.data_ptr<double>()[i] +
                                           ln->bias.data_ptr<double>()[i];
  }
  expect_close((*ln)(x), want, 1e-12, "layer_norm");
  gradcheck_module(
      *ln, {rnd({2, 2, 3}, 15, true)}, [&](const TensorList& v) { return (*ln)(v[0]); },
      "LayerNorm");

  auto gn = std::make_shared<nn::GroupNorm>(2, 4);
  gn->to(F64);
  {
    autograd::NoGradGuard ng;
    copy_(gn->weight, rnd({4}, 16));
    copy_(gn->bias, rnd({4}, 17));
  }
  Tensor g = rnd({2, 4, 3}, 18);
  Tensor gwant = kiln::empty({2, 4, 3}, F64);
  const double* gp = g.data_ptr<double>();
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t grp = 0; grp < 2; ++grp) {
      const int64_t base = n * 12 + grp * 6;
      double m = 0, v = 0;
      for (int64_t i = 0; i < 6; ++i) m += gp[base + i];
      m /= 6;
      for (int64_t i = 0; i < 6; ++i) v += std::pow(gp[base + i] - m, 2);
      v /= 6;
      for (int64_t i = 0; i < 6; ++i) {
        const int64_t c = grp * 2 + i / 3;
        gwant.data_ptr<double>()[base + i] =
            (gp[base + i] - m) / std::sqrt(v + 1e-5) * gn->weight.data_ptr<double>()[c] +
            gn->bias.data_ptr<double>()[c];
      }
    }
  expect_close((*gn)(g), gwant, 1e-12, "group_norm");
  EXPECT_THROW(nn::GroupNorm(3, 4), Error);
}

// --- activations, pooling, containers -------------------------------------------------------

TEST(Layers, ActivationsClosedForm) {
  const std::vector<double> xs = {-7.0, -1.5, -0.2, 0.0, 0.3, 2.0, 6.5};
  Tensor x = kiln::empty({7}, F64);
  for (int i = 0; i < 7; ++i) x.data_ptr<double>()[i] = xs[i];
  auto check = [&](nn::Module& m, const std::function<double(double)>& f, const char* what) {
    Tensor y = m(x);
    for (int i = 0; i < 7; ++i)
      EXPECT_NEAR(y.index({i}).item<double>(), f(xs[i]), 1e-12) << what << " at " << xs[i];
  };
  nn::ReLU relu;
  check(
      relu, [](double v) { return v > 0 ? v : 0; }, "relu");
  nn::ReLU6 relu6;
  check(
      relu6, [](double v) { return std::min(std::max(v, 0.0), 6.0); }, "relu6");
  nn::LeakyReLU leaky(0.2);
  check(
      leaky, [](double v) { return v > 0 ? v : 0.2 * v; }, "leaky_relu");
  nn::GELU gelu;
  check(
      gelu, [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }, "gelu");
  nn::GELU gelu_tanh("tanh");
  check(
      gelu_tanh,
      [](double v) {
        return 0.5 * v * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
      },
      "gelu tanh");
  nn::SiLU silu;
  check(
      silu, [](double v) { return v / (1 + std::exp(-v)); }, "silu");
  nn::Sigmoid sig;
  check(
      sig, [](double v) { return 1 / (1 + std::exp(-v)); }, "sigmoid");
  nn::Tanh th;
  check(
      th, [](double v) { return std::tanh(v); }, "tanh");
  EXPECT_THROW(nn::GELU("fast"), Error);

  double z = 0;
  for (double v : xs) z += std::exp(v);
  nn::Softmax sm(0);
  check(
      sm, [&](double v) { return std::exp(v) / z; }, "softmax");
  nn::LogSoftmax lsm(-1);
  check(
      lsm, [&](double v) { return v - std::log(z); }, "log_softmax");
}

TEST(Layers, PoolingAgainstNaive) {
  Tensor x = rnd({2, 3, 6, 5}, 21);
  nn::MaxPool2d mp(3, 2, 1);
  Tensor y = mp(x);
  ASSERT_EQ(y.sizes(), (Dims{2, 3, 3, 3}));
  nn::AvgPool2d ap(2);
  Tensor a = ap(x);
  ASSERT_EQ(a.sizes(), (Dims{2, 3, 3, 2}));
  const double* xp = x.data_ptr<double>();
  for (int64_t p = 0; p < 6; ++p)
    for (int64_t i = 0; i < 3; ++i) {
      for (int64_t j = 0; j < 3; ++j) {
        double m = -INFINITY;
        for (int64_t u = 0; u < 3; ++u)
          for (int64_t v = 0; v < 3; ++v) {
            int64_t h = i * 2 - 1 + u, w = j * 2 - 1 + v;
            if (h >= 0 && h < 6 && w >= 0 && w < 5) m = std::max(m, xp[p * 30 + h * 5 + w]);
          }
        EXPECT_DOUBLE_EQ(y.data_ptr<double>()[p * 9 + i * 3 + j], m);
      }
      for (int64_t j = 0; j < 2; ++j) {
        double s = 0;
        for (int64_t u = 0; u < 2; ++u)
          for (int64_t v = 0; v < 2; ++v) s += xp[p * 30 + (2 * i + u) * 5 + 2 * j + v];
        EXPECT_NEAR(a.data_ptr<double>()[p * 6 + i * 2 + j], s / 4, 1e-12);
      }
    }
  nn::AdaptiveAvgPool2d gap(1);
  expect_close(gap(x), mean(x, {2, 3}, true), 1e-12, "adaptive_avg_pool2d(1)");
}

TEST(Layers, Containers) {
  auto seq = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(3, 4), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(4, 2)});
  EXPECT_EQ(seq->size(), 3u);
  EXPECT_EQ(seq->state_dict().keys(),
            (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  Tensor x = rnd({5, 3}, 22).to(DType::Float32);
  auto l0 = seq->at<nn::Linear>(0);
  auto l2 = seq->at<nn::Linear>(2);
  EXPECT_THROW(seq->at<nn::Linear>(1), Error);
  expect_close((*seq)(x),
               kiln::linear(relu(kiln::linear(x, l0->weight, l0->bias)), l2->weight, l2->bias),
               1e-6, "sequential");
  // Hooks of children run when the Sequential calls them.
  int calls = 0;
  l2->register_forward_hook([&](nn::Module&, const TensorList&, const TensorList&) {
    ++calls;
    return std::optional<TensorList>();
  });
  (*seq)(x);
  EXPECT_EQ(calls, 1);
  // replace_module swaps the child that forward calls.
  seq->replace_module("1", std::make_shared<nn::Identity>());
  EXPECT_EQ((*seq)[1]->type_name(), "Identity");
  expect_close((*seq)(x), kiln::linear(kiln::linear(x, l0->weight, l0->bias), l2->weight, l2->bias),
               1e-6, "sequential after replace");
  EXPECT_THROW(seq->replace_module("7", std::make_shared<nn::ReLU>()), Error);

  nn::Sequential named(
      {{"conv", std::make_shared<nn::Conv2d>(1, 2, 3)}, {"act", std::make_shared<nn::ReLU>()}});
  EXPECT_EQ(named.state_dict().keys(), (std::vector<std::string>{"conv.weight", "conv.bias"}));

  nn::ModuleList list({std::make_shared<nn::Linear>(2, 2), std::make_shared<nn::Linear>(2, 3)});
  list.push_back(std::make_shared<nn::ReLU>());
  EXPECT_EQ(list.size(), 3u);
  EXPECT_EQ(list.named_parameters().keys(),
            (std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias"}));
  EXPECT_EQ(list.at<nn::Linear>(1)->out_features, 3);
  EXPECT_THROW(list[3], Error);

  nn::ModuleDict dict({{"enc", std::make_shared<nn::Linear>(2, 2, false)}});
  dict.insert("dec", std::make_shared<nn::Linear>(2, 1, false));
  EXPECT_EQ(dict.keys(), (std::vector<std::string>{"enc", "dec"}));
  EXPECT_EQ(dict.state_dict().keys(), (std::vector<std::string>{"enc.weight", "dec.weight"}));
  EXPECT_TRUE(dict.contains("dec"));
  EXPECT_THROW(dict.insert("dec", std::make_shared<nn::ReLU>()), Error);
}

// --- dropout --------------------------------------------------------------------------------

TEST(Layers, Dropout) {
  nn::Dropout drop(0.25);
  Tensor x = kiln::ones({20000}).requires_grad_();
  drop.eval();
  EXPECT_EQ(max_abs_diff(drop(x), x), 0.0);
  drop.train();
  kiln::manual_seed(42);
  Tensor y = drop(x);
  // Kept values are scaled by 1 / (1 - p); about a quarter are zero.
  const double zeros = sum(y == kiln::zeros({1})).item<double>();
  EXPECT_NEAR(zeros / 20000.0, 0.25, 0.015);
  EXPECT_NEAR(amax(y).item<double>(), 1.0 / 0.75, 1e-6);
  EXPECT_NEAR(mean(y.to(F64)).item<double>(), 1.0, 0.03);
  // Gradient: the same mask and scale.
  sum(y).backward();
  EXPECT_EQ(max_abs_diff(x.grad(), y.detach()), 0.0);
  // Reproducible from the seed.
  kiln::manual_seed(42);
  EXPECT_EQ(max_abs_diff(drop(x), y), 0.0);
  nn::Dropout none(0.0);
  EXPECT_EQ(max_abs_diff(none(x), x), 0.0);
  EXPECT_THROW(nn::Dropout(1.5), Error);
  EXPECT_EQ(drop.repr(), "Dropout(p=0.25, inplace=False)");
}

// --- attention and transformer ----------------------------------------------------------------

TEST(Layers, MultiheadAttentionMatchesPyTorch) {
  {
    auto m = std::make_shared<nn::MultiheadAttention>(8, 2);
    EXPECT_EQ(m->state_dict().keys(),
              (std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight",
                                        "out_proj.bias"}));
    EXPECT_EQ(amax(abs(m->in_proj_bias)).item<double>(), 0.0);
    // xavier_uniform_ on [24, 8]: bound sqrt(6 / 32).
    EXPECT_LE(amax(abs(m->in_proj_weight)).item<double>(), std::sqrt(6.0 / 32.0));
    m->to(F64);
    load_ref(*m, "mha_a");
    Tensor q = fx("mha_a.q", true), k = fx("mha_a.k", true), v = fx("mha_a.v", true);
    auto [out, w] = (*m)(q, k, v, fx_bool("mha_a.kpm"), true, fx("mha_a.am"));
    expect_close(out, fx("mha_a.out"), 1e-12, "mha_a out");
    expect_close(w, fx("mha_a.w"), 1e-12, "mha_a weights");
    sum(out * fx("mha_a.R")).backward();
    expect_close(q.grad(), fx("mha_a.grad.q"), 1e-12, "mha_a dq");
    expect_close(k.grad(), fx("mha_a.grad.k"), 1e-12, "mha_a dk");
    expect_close(v.grad(), fx("mha_a.grad.v"), 1e-12, "mha_a dv");
    expect_param_grads(*m, "mha_a", 1e-12);
  }
  {
    auto m = std::make_shared<nn::MultiheadAttention>(
        nn::MultiheadAttentionOptions(6, 3).batch_first(true));
    m->to(F64);
    load_ref(*m, "mha_b");
    Tensor x = fx("mha_b.x", true);
    auto [out, w] = (*m)(x, x, x, {}, true, fx_bool("mha_b.mask"), false);
    expect_close(out, fx("mha_b.out"), 1e-12, "mha_b out");
    expect_close(w, fx("mha_b.w"), 1e-12, "mha_b per-head weights");
    sum(out * fx("mha_b.R")).backward();
    expect_close(x.grad(), fx("mha_b.grad.x"), 1e-12, "mha_b dx");
    expect_param_grads(*m, "mha_b", 1e-12);
  }
}

TEST(Layers, MultiheadAttentionGradcheck) {
  auto m = std::make_shared<nn::MultiheadAttention>(4, 2);
  m->to(F64);
  Tensor q = rnd({2, 1, 4}, 31, true), kv = rnd({3, 1, 4}, 32, true);
  gradcheck_module(
      *m, {q, kv}, [&](const TensorList& v) { return (*m)(v[0], v[1], v[1]).first; }, "MHA");
}

TEST(Layers, TransformerEncoderLayerMatchesPyTorch) {
  {
    auto m = std::make_shared<nn::TransformerEncoderLayer>(
        nn::TransformerEncoderLayerOptions(8, 2).dim_feedforward(16).dropout(0.0));
    EXPECT_EQ(m->state_dict().keys(),
              (std::vector<std::string>{
                  "self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
                  "self_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight",
                  "linear2.bias", "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"}));
    m->to(F64);
    load_ref(*m, "tel_post");
    Tensor src = fx("tel_post.src", true);
    Tensor out = (*m)(src, {}, fx_bool("tel_post.kpm"));
    expect_close(out, fx("tel_post.out"), 1e-12, "post-norm out");
    sum(out * fx("tel_post.R")).backward();
    expect_close(src.grad(), fx("tel_post.grad.src"), 1e-11, "post-norm dsrc");
    expect_param_grads(*m, "tel_post", 1e-11);
  }
  {
    auto m = std::make_shared<nn::TransformerEncoderLayer>(nn::TransformerEncoderLayerOptions(8, 4)
                                                               .dim_feedforward(12)
                                                               .dropout(0.0)
                                                               .activation(nn::Activation::GELU)
                                                               .batch_first(true)
                                                               .norm_first(true));
    m->to(F64);
    load_ref(*m, "tel_pre");
    Tensor src = fx("tel_pre.src", true);
    Tensor out = (*m)(src, fx_bool("tel_pre.mask"));
    expect_close(out, fx("tel_pre.out"), 1e-12, "pre-norm out");
    sum(out * fx("tel_pre.R")).backward();
    expect_close(src.grad(), fx("tel_pre.grad.src"), 1e-11, "pre-norm dsrc");
    expect_param_grads(*m, "tel_pre", 1e-11);
  }
}

// --- recurrent ------------------------------------------------------------------------------

TEST(Layers, LSTMMatchesPyTorch) {
  auto m = std::make_shared<nn::LSTM>(
      nn::RNNOptions(3, 4).num_layers(2).batch_first(true).bidirectional(true));
  auto keys = m->state_dict().keys();
  ASSERT_EQ(keys.size(), 16u);
  EXPECT_EQ(keys[0], "weight_ih_l0");
  EXPECT_EQ(keys[4], "weight_ih_l0_reverse");
  EXPECT_EQ(keys[15], "bias_hh_l1_reverse");
  EXPECT_EQ(m->get_parameter("weight_ih_l1").sizes(), (Dims{16, 8}));
  EXPECT_LE(amax(abs(m->get_parameter("weight_hh_l1"))).item<double>(), 0.5);  // 1/sqrt(4)
  m->to(F64);
  load_ref(*m, "lstm");
  Tensor x = fx("lstm.x", true), h0 = fx("lstm.h0", true), c0 = fx("lstm.c0", true);
  nn::RNNOutput r = (*m)(x, h0, c0);
  expect_close(r.output, fx("lstm.out"), 1e-12, "lstm out");
  expect_close(r.h_n, fx("lstm.hn"), 1e-12, "lstm h_n");
  expect_close(r.c_n, fx("lstm.cn"), 1e-12, "lstm c_n");
  sum(r.output * fx("lstm.R")).backward();
  expect_close(x.grad(), fx("lstm.grad.x"), 1e-12, "lstm dx");
  expect_close(h0.grad(), fx("lstm.grad.h0"), 1e-12, "lstm dh0");
  expect_close(c0.grad(), fx("lstm.grad.c0"), 1e-12, "lstm dc0");
  expect_param_grads(*m, "lstm", 1e-12);
}

TEST(Layers, GRUMatchesPyTorch) {
  auto m = std::make_shared<nn::GRU>(nn::RNNOptions(3, 4).num_layers(2));
  EXPECT_EQ(m->state_dict().keys(),
            (std::vector<std::string>{"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0",
                                      "weight_ih_l1", "weight_hh_l1", "bias_ih_l1", "bias_hh_l1"}));
  m->to(F64);
  load_ref(*m, "gru");
  Tensor x = fx("gru.x", true), h0 = fx("gru.h0", true);
  nn::RNNOutput r = (*m)(x, h0);
  expect_close(r.output, fx("gru.out"), 1e-12, "gru out");
  expect_close(r.h_n, fx("gru.hn"), 1e-12, "gru h_n");
  EXPECT_FALSE(r.c_n.defined());
  sum(r.output * fx("gru.R")).backward();
  expect_close(x.grad(), fx("gru.grad.x"), 1e-12, "gru dx");
  expect_close(h0.grad(), fx("gru.grad.h0"), 1e-12, "gru dh0");
  expect_param_grads(*m, "gru", 1e-12);
}

namespace {
double sigm(double v) {
  return 1 / (1 + std::exp(-v));
}
// Row `r` of W (rows x cols, row-major) dotted with v.
double rowdot(const Tensor& w, int64_t r, const std::vector<double>& v) {
  double s = 0;
  const int64_t cols = w.size(1);
  for (int64_t c = 0; c < cols; ++c) s += w.data_ptr<double>()[r * cols + c] * v[c];
  return s;
}
}  // namespace

TEST(Layers, LSTMAndGRUAgainstCellEquations) {
  // One layer, one sequence, plain loops over the documented gate equations.
  const int64_t I = 2, H = 3, T = 4;
  Tensor x = rnd({T, 1, I}, 41);
  auto run_ref = [&](const TensorList& w, bool lstm) {
    std::vector<double> h(H, 0.0), c(H, 0.0);
    std::vector<std::vector<double>> outs;
    auto b = [&](const Tensor& t, int64_t i) { return t.data_ptr<double>()[i]; };
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> xt = {x.data_ptr<double>()[t * I], x.data_ptr<double>()[t * I + 1]};
      std::vector<double> hn(H), cn(H);
      for (int64_t j = 0; j < H; ++j) {
        auto pre_x = [&](int64_t gate) {
          return rowdot(w[0], gate * H + j, xt) + b(w[2], gate * H + j);
        };
        auto pre_h = [&](int64_t gate) {
          return rowdot(w[1], gate * H + j, h) + b(w[3], gate * H + j);
        };
        if (lstm) {
          double i = sigm(pre_x(0) + pre_h(0)), f = sigm(pre_x(1) + pre_h(1));
          double g = std::tanh(pre_x(2) + pre_h(2)), o = sigm(pre_x(3) + pre_h(3));
          cn[j] = f * c[j] + i * g;
          hn[j] = o * std::tanh(cn[j]);
        } else {
          double r = sigm(pre_x(0) + pre_h(0)), z = sigm(pre_x(1) + pre_h(1));
          double n = std::tanh(pre_x(2) + r * pre_h(2));
          hn[j] = (1 - z) * n + z * h[j];
        }
      }
      h = hn;
      c = cn;
      outs.push_back(h);
    }
    return outs;
  };
  for (bool lstm : {true, false}) {
    std::shared_ptr<nn::RNNBase> m;
    if (lstm)
      m = std::make_shared<nn::LSTM>(I, H);
    else
      m = std::make_shared<nn::GRU>(I, H);
    m->to(F64);
    auto want = run_ref(m->layer_weights(0, 0), lstm);
    Tensor out = m->forward(x);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < H; ++j)
        EXPECT_NEAR(out.index({t, 0, j}).item<double>(), want[t][j], 1e-12)
            << (lstm ? "lstm" : "gru") << " t=" << t << " j=" << j;
    // Unbatched input gives the same sequence.
    Tensor un = m->forward(x.squeeze(1));
    EXPECT_EQ(un.sizes(), (Dims{T, H}));
    EXPECT_LT(max_abs_diff(un, out.squeeze(1)), 1e-15);
  }
}

TEST(Layers, RecurrentGradcheck) {
  auto lstm = std::make_shared<nn::LSTM>(nn::RNNOptions(2, 2).bidirectional(true));
  lstm->to(F64);
  gradcheck_module(
      *lstm, {rnd({3, 1, 2}, 51, true)}, [&](const TensorList& v) { return (*lstm)(v[0]).output; },
      "LSTM");
  auto gru = std::make_shared<nn::GRU>(nn::RNNOptions(2, 2).num_layers(2).batch_first(true));
  gru->to(F64);
  gradcheck_module(
      *gru, {rnd({1, 3, 2}, 52, true)}, [&](const TensorList& v) { return (*gru)(v[0]).h_n; },
      "GRU");
}

TEST(Layers, MoreGradchecks) {
  auto bil = std::make_shared<nn::Bilinear>(2, 3, 2);
  bil->to(F64);
  gradcheck_module(
      *bil, {rnd({2, 2}, 61, true), rnd({2, 3}, 62, true)},
      [&](const TensorList& v) { return (*bil)(v[0], v[1]); }, "Bilinear");
  auto ct = std::make_shared<nn::ConvTranspose2d>(
      nn::ConvTranspose2dOptions(2, 2, 2).stride(2).padding(1).output_padding(1));
  ct->to(F64);
  gradcheck_module(
      *ct, {rnd({1, 2, 2, 2}, 63, true)}, [&](const TensorList& v) { return (*ct)(v[0]); },
      "ConvTranspose2d");
  auto c1 = std::make_shared<nn::Conv1d>(nn::Conv1dOptions(2, 2, 3).padding(1).groups(2));
  c1->to(F64);
  gradcheck_module(
      *c1, {rnd({1, 2, 4}, 64, true)}, [&](const TensorList& v) { return (*c1)(v[0]); }, "Conv1d");
  auto gn = std::make_shared<nn::GroupNorm>(2, 4);
  gn->to(F64);
  gradcheck_module(
      *gn, {rnd({2, 4, 2}, 65, true)}, [&](const TensorList& v) { return (*gn)(v[0]); },
      "GroupNorm");
  auto emb = std::make_shared<nn::Embedding>(5, 2, 1);
  emb->to(F64);
  // The padding row (1) gets no gradient by design, so it is left out of the indices here.
  Tensor idx = kiln::tensor({3, 0, 3, 4}, DType::Int64);
  gradcheck_module(
      *emb, {}, [&](const TensorList&) { return (*emb)(idx); }, "Embedding");
  auto tel = std::make_shared<nn::TransformerEncoderLayer>(
      nn::TransformerEncoderLayerOptions(4, 2).dim_feedforward(6).dropout(0.0));
  tel->to(F64);
  gradcheck_module(
      *tel, {rnd({3, 1, 4}, 66, true)}, [&](const TensorList& v) { return (*tel)(v[0]); },
      "TransformerEncoderLayer");
}

// --- losses -----------------------------------------------------------------------------------

TEST(Layers, LossesMatchPyTorch) {
  Tensor logits = fx("loss.logits");
  Tensor target = fx("loss.target").to(DType::Int64);
  Tensor target_ign = fx("loss.target_ign").to(DType::Int64);
  Tensor y = fx("loss.y");
  nn::CrossEntropyLoss ce(fx("loss.cw"), -100, Reduction::Mean, 0.1);
  EXPECT_EQ(ce.state_dict().keys(), std::vector<std::string>{"weight"});
  EXPECT_NEAR(ce(logits, target).item<double>(), fx("loss.ce").item<double>(), 1e-12);
  nn::CrossEntropyLoss ce_sum({}, -100, Reduction::Sum);
  EXPECT_TRUE(ce_sum.state_dict().empty());
  EXPECT_NEAR(ce_sum(logits, target_ign).item<double>(), fx("loss.ce_ign_sum").item<double>(),
              1e-12);
  nn::NLLLoss nll(fx("loss.cw"));
  EXPECT_NEAR(nll(log_softmax(logits, 1), target).item<double>(), fx("loss.nll").item<double>(),
              1e-12);
  nn::MSELoss mse;
  EXPECT_NEAR(mse(logits, y).item<double>(), fx("loss.mse").item<double>(), 1e-12);
  nn::SmoothL1Loss sl1(Reduction::Mean, 0.5);
  EXPECT_NEAR(sl1(logits, y).item<double>(), fx("loss.smoothl1").item<double>(), 1e-12);
  nn::BCEWithLogitsLoss bce({}, Reduction::Mean, fx("loss.pw"));
  EXPECT_EQ(bce.state_dict().keys(), std::vector<std::string>{"pos_weight"});
  EXPECT_NEAR(bce(logits, fx("loss.prob_t")).item<double>(), fx("loss.bce").item<double>(), 1e-12);
  nn::BCEWithLogitsLoss bce_none({}, Reduction::None);
  expect_close(bce_none(logits, fx("loss.prob_t")), fx("loss.bce_none"), 1e-12, "bce none");
  // Losses run hooks like any module.
  int calls = 0;
  mse.register_forward_pre_hook([&](nn::Module&, const TensorList& in) {
    EXPECT_EQ(in.size(), 2u);
    ++calls;
    return std::optional<TensorList>();
  });
  mse(logits, y);
  EXPECT_EQ(calls, 1);
}

// --- init -------------------------------------------------------------------------------------

TEST(Layers, InitFansAndGains) {
  using namespace nn::init;
  auto [fi, fo] = calculate_fan_in_and_fan_out(kiln::empty({6, 4, 3, 2}));
  EXPECT_EQ(fi, 24);
  EXPECT_EQ(fo, 36);
  EXPECT_THROW(calculate_fan_in_and_fan_out(kiln::empty({5})), Error);
  EXPECT_DOUBLE_EQ(calculate_gain(Nonlinearity::ReLU), std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(calculate_gain(Nonlinearity::Tanh), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(calculate_gain(Nonlinearity::LeakyReLU), std::sqrt(2.0 / (1 + 0.0001)));
  EXPECT_DOUBLE_EQ(calculate_gain(Nonlinearity::LeakyReLU, std::sqrt(5.0)), std::sqrt(1.0 / 3.0));
  EXPECT_DOUBLE_EQ(calculate_gain(Nonlinearity::SELU), 0.75);
  EXPECT_DOUBLE_EQ(calculate_gain(Nonlinearity::Conv2D), 1.0);

  nn::init::manual_seed(7);
  Tensor w = kiln::empty({256, 128, 3, 3});  // fan_in 1152, fan_out 2304
  kaiming_normal_(w, 0, FanMode::FanOut, Nonlinearity::ReLU);
  EXPECT_NEAR(kiln::std(w.to(F64)).item<double>(), std::sqrt(2.0 / 2304),
              0.01 * std::sqrt(2.0 / 2304));
  kaiming_uniform_(w);  // a = 0, fan_in, leaky_relu: bound = sqrt(2) * sqrt(3 / 1152)
  const double kb = std::sqrt(2.0) * std::sqrt(3.0 / 1152);
  EXPECT_LE(amax(abs(w)).item<double>(), kb);
  EXPECT_GT(amax(abs(w)).item<double>(), 0.99 * kb);
  Tensor m = kiln::empty({300, 200});
  xavier_uniform_(m, 2.0);
  const double xb = 2.0 * std::sqrt(6.0 / 500);
  EXPECT_LE(amax(abs(m)).item<double>(), xb);
  EXPECT_GT(amax(abs(m)).item<double>(), 0.99 * xb);
  xavier_normal_(m);
  EXPECT_NEAR(kiln::std(m.to(F64)).item<double>(), std::sqrt(2.0 / 500),
              0.02 * std::sqrt(2.0 / 500));
  normal_(m, 3.0, 0.5);
  EXPECT_NEAR(mean(m.to(F64)).item<double>(), 3.0, 0.01);
  uniform_(m, -2.0, -1.0);
  EXPECT_GE(amin(m).item<double>(), -2.0);
  EXPECT_LE(amax(m).item<double>(), -1.0);
  trunc_normal_(m, 0.0, 1.0, -0.5, 0.5);
  EXPECT_LE(amax(abs(m)).item<double>(), 0.5);
  constant_(m, 0.25);
  EXPECT_EQ(amin(m).item<double>(), 0.25);
  ones_(m);
  zeros_(m);
  EXPECT_EQ(amax(abs(m)).item<double>(), 0.0);
  // Parameters keep their identity and stay leaves.
  nn::Linear lin(2, 2);
  Tensor before = lin.weight;
  ones_(lin.weight);
  EXPECT_TRUE(before.is_same(lin.weight));
  EXPECT_TRUE(lin.weight.is_leaf() && lin.weight.requires_grad());
  EXPECT_EQ(amin(before).item<double>(), 1.0);
}
