// The CNN layers on the device: convolution (cuDNN), pooling and batch norm (generated CUDA C),
// forward and backward, against the CPU kernels run in float64 on the same values; and a whole
// ResNet-18 forward and backward on CUDA against the same model on the CPU. The NVRTC tests of
// the kernels' sources need no device (CI).

#include <gtest/gtest.h>

#include <random>
#include <sstream>

#include "cuda_test_util.h"
#include "kiln/models.h"
#include "kiln/nn.h"
#include "kiln/optim.h"
#include "kiln/runtime/cuda/eager.h"
#include "kiln/runtime/cuda/nn.h"

namespace kiln {
namespace {

using cuda_test::values;
using cuda_test::worst_error;

Tensor random_tensor(Dims sizes, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n01;
  Tensor t = empty(sizes);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_ptr<float>()[i] = n01(rng);
  return t;
}

std::vector<double> as_doubles(const Tensor& t) {
  Tensor c = t.to(DType::Float64).contiguous();
  const double* p = c.data_ptr<double>();
  return std::vector<double>(p, p + c.numel());
}

// Float32 products without TF32 for the duration of a test (the default allows it).
struct NoTf32 {
  bool before = cuda::conv_options().allow_tf32;
  NoTf32() { cuda::conv_options().allow_tf32 = false; }
  ~NoTf32() { cuda::conv_options().allow_tf32 = before; }
};

TEST(CudaNnCompile, PoolAndBatchNormKernelsCompileForSm90) {
  KILN_REQUIRE_NVRTC();
  for (const auto& [name, source] : {std::pair{"pool", cuda::pool_source()},
                                     {"batch_norm", cuda::batch_norm_source()},
                                     {"int64", cuda::int64_source()},
                                     {"softmax_loss", cuda::softmax_loss_source()}}) {
    const cuda::CompiledCode code = cuda::compile(name, source, "sm_90");
    EXPECT_NE(code.ptx.find(".target sm_90"), std::string::npos) << name;
    EXPECT_GT(code.cubin.size(), 64u) << name;
  }
  const cuda::CompiledCode pool = cuda::compile("pool", cuda::pool_source(), "sm_90");
  for (const char* entry : {"kiln_max_pool2d", "kiln_max_pool2d_backward", "kiln_avg_pool2d",
                            "kiln_avg_pool2d_backward"}) {
    EXPECT_NE(pool.ptx.find(std::string(".entry ") + entry), std::string::npos) << entry;
  }
}

struct ConvCase {
  int64_t n, c, h, w, o, k, stride, pad, dilation, groups;
  bool bias;
};

class CudaConv : public ::testing::TestWithParam<ConvCase> {};

// Forward and the three gradients (through autograd) against the CPU's float64 convolution.
TEST_P(CudaConv, MatchesTheCpuInFloat64) {
  KILN_REQUIRE_CUDA_DEVICE();
  NoTf32 exact;
  const ConvCase k = GetParam();
  const Tensor x = random_tensor({k.n, k.c, k.h, k.w}, 1);
  const Tensor w = random_tensor({k.o, k.c / k.groups, k.k, k.k}, 2) * 0.3;
  const Tensor b = k.bias ? random_tensor({k.o}, 3) : Tensor();
  const Pair2 s{k.stride, k.stride}, p{k.pad, k.pad}, d{k.dilation, k.dilation};

  Tensor x64 = x.to(DType::Float64).requires_grad_(true);
  Tensor w64 = w.to(DType::Float64).requires_grad_(true);
  Tensor b64 = k.bias ? b.to(DType::Float64).requires_grad_(true) : Tensor();
  Tensor y64 = conv2d(x64, w64, b64, s, p, d, k.groups);
  const Tensor g = random_tensor(y64.sizes(), 4);
  (y64 * g.to(DType::Float64)).sum().backward();

  Tensor xd = x.cuda().requires_grad_(true), wd = w.cuda().requires_grad_(true);
  Tensor bd = k.bias ? b.cuda().requires_grad_(true) : Tensor();
  Tensor yd = conv2d(xd, wd, bd, s, p, d, k.groups);
  ASSERT_TRUE(yd.is_cuda());
  ASSERT_EQ(yd.sizes(), y64.sizes());
  (yd * g.cuda()).sum().backward();

  EXPECT_LE(worst_error(values(yd), as_doubles(y64), 1e-4, 1e-4), 1.0) << "output";
  EXPECT_LE(worst_error(values(xd.grad()), as_doubles(x64.grad()), 1e-4, 1e-4), 1.0)
      << "grad_input";
  EXPECT_LE(worst_error(values(wd.grad()), as_doubles(w64.grad()), 1e-4, 3e-4), 1.0)
      << "grad_weight";
  if (k.bias) {
    EXPECT_LE(worst_error(values(bd.grad()), as_doubles(b64.grad()), 1e-4, 3e-4), 1.0)
        << "grad_bias";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaConv,
    ::testing::Values(ConvCase{2, 3, 9, 11, 5, 3, 1, 1, 1, 1, true},    // padded 3x3
                      ConvCase{2, 4, 10, 10, 8, 3, 2, 1, 1, 1, false},  // strided
                      ConvCase{1, 6, 12, 12, 6, 3, 1, 2, 2, 3, true},   // dilated, 3 groups
                      ConvCase{2, 8, 7, 7, 8, 3, 1, 1, 1, 8, true},     // depthwise
                      ConvCase{2, 16, 5, 5, 32, 1, 1, 0, 1, 1, false},  // 1x1
                      ConvCase{1, 3, 32, 32, 16, 7, 2, 3, 1, 1, false}  // ResNet's stem
                      ),
    [](const ::testing::TestParamInfo<ConvCase>& info) {
      const ConvCase& k = info.param;
      std::ostringstream name;
      name << "n" << k.n << "c" << k.c << "h" << k.h << "w" << k.w << "o" << k.o << "k" << k.k
           << "s" << k.stride << "p" << k.pad << "d" << k.dilation << "g" << k.groups
           << (k.bias ? "bias" : "");
      return name.str();
    });

// TF32 (the default, as PyTorch's cudnn.allow_tf32): the same products to TF32's precision.
TEST(CudaConvTf32, TheDefaultRunsTf32WithinItsPrecision) {
  KILN_REQUIRE_CUDA_DEVICE();
  ASSERT_TRUE(cuda::conv_options().allow_tf32);
  const Tensor x = random_tensor({4, 64, 14, 14}, 5), w = random_tensor({64, 64, 3, 3}, 6) * 0.05;
  const Tensor y = conv2d(x.cuda(), w.cuda(), Tensor(), {1, 1}, {1, 1});
  const Tensor y64 = conv2d(x.to(DType::Float64), w.to(DType::Float64), Tensor(), {1, 1}, {1, 1});
  // 10-bit mantissas: relative errors near 1e-3 of the sum of |products|.
  EXPECT_LE(worst_error(values(y), as_doubles(y64), 5e-3, 5e-3), 1.0);
}

TEST(CudaConvErrors, MixedDevicesAndTheVersionAreReported) {
  KILN_REQUIRE_CUDA_DEVICE();
  const Tensor x = random_tensor({1, 2, 5, 5}, 7).cuda(), w = random_tensor({3, 2, 3, 3}, 8);
  try {
    conv2d(x, w, Tensor());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("conv2d"), std::string::npos) << m;
    EXPECT_NE(m.find("cuda"), std::string::npos) << m;
    EXPECT_NE(m.find("cpu"), std::string::npos) << m;
  }
  EXPECT_EQ(cuda::cudnn_version().rfind("9.", 0), 0u) << cuda::cudnn_version();
}

// Pools: forward values (and max indices) and the input gradient against float64 on the CPU.
TEST(CudaPool, MaxAvgAndAdaptiveMatchTheCpu) {
  KILN_REQUIRE_CUDA_DEVICE();
  const Tensor x = random_tensor({2, 3, 11, 10}, 9);
  auto check = [&](const char* what, auto pool) {
    Tensor x64 = x.to(DType::Float64).requires_grad_(true);
    Tensor y64 = pool(x64);
    const Tensor g = random_tensor(y64.sizes(), 10);
    (y64 * g.to(DType::Float64)).sum().backward();
    Tensor xd = x.cuda().requires_grad_(true);
    Tensor yd = pool(xd);
    ASSERT_TRUE(yd.is_cuda()) << what;
    ASSERT_EQ(yd.sizes(), y64.sizes()) << what;
    (yd * g.cuda()).sum().backward();
    EXPECT_LE(worst_error(values(yd), as_doubles(y64), 1e-6, 1e-6), 1.0) << what;
    EXPECT_LE(worst_error(values(xd.grad()), as_doubles(x64.grad()), 1e-5, 1e-6), 1.0) << what;
  };
  check("max 3x3 s2 p1", [](const Tensor& t) {
    return max_pool2d(t, {3, 3}, Pair2{2, 2}, {1, 1});
  });
  check("max 2x2", [](const Tensor& t) { return max_pool2d(t, {2, 2}); });
  check("max dilated ceil", [](const Tensor& t) {
    return max_pool2d(t, {3, 2}, Pair2{2, 1}, {1, 0}, {2, 1}, true);
  });
  check("avg 3x3 s2 p1", [](const Tensor& t) {
    return avg_pool2d(t, {3, 3}, Pair2{2, 2}, {1, 1});
  });
  check("avg ceil no pad count", [](const Tensor& t) {
    return avg_pool2d(t, {3, 3}, Pair2{2, 2}, {1, 1}, true, false);
  });
  check("adaptive 1x1", [](const Tensor& t) { return adaptive_avg_pool2d(t, {1, 1}); });
  check("adaptive 3x4", [](const Tensor& t) { return adaptive_avg_pool2d(t, {3, 4}); });

  auto [out_cpu, idx_cpu] = max_pool2d_with_indices(x, {3, 3}, Pair2{2, 2}, {1, 1});
  auto [out_gpu, idx_gpu] = max_pool2d_with_indices(x.cuda(), {3, 3}, Pair2{2, 2}, {1, 1});
  ASSERT_TRUE(idx_gpu.is_cuda());
  Tensor a = idx_cpu.contiguous(), b = idx_gpu.cpu().contiguous();
  ASSERT_EQ(a.numel(), b.numel());
  for (int64_t i = 0; i < a.numel(); ++i)
    ASSERT_EQ(a.data_ptr<int64_t>()[i], b.data_ptr<int64_t>()[i]) << "index " << i;
}

// Batch norm in training (batch statistics, running ones updated) and inference, with and
// without affine parameters; gradients of input, weight and bias.
TEST(CudaBatchNorm, TrainingAndInferenceMatchTheCpu) {
  KILN_REQUIRE_CUDA_DEVICE();
  const Tensor x = random_tensor({4, 5, 6, 7}, 11) * 2.0 + 0.5;
  for (bool training : {true, false}) {
    for (bool affine : {true, false}) {
      const std::string what =
          std::string(training ? "training" : "inference") + (affine ? ", affine" : "");
      Tensor rm = random_tensor({5}, 12) * 0.1, rv = random_tensor({5}, 13).abs() + 0.5;
      Tensor w = affine ? random_tensor({5}, 14) : Tensor(),
             b = affine ? random_tensor({5}, 15) : Tensor();
      Tensor rm64 = rm.to(DType::Float64), rv64 = rv.to(DType::Float64);
      Tensor x64 = x.to(DType::Float64).requires_grad_(true);
      Tensor w64 = affine ? w.to(DType::Float64).requires_grad_(true) : Tensor();
      Tensor b64 = affine ? b.to(DType::Float64).requires_grad_(true) : Tensor();
      Tensor y64 = batch_norm(x64, rm64, rv64, w64, b64, training, 0.1, 1e-5);
      const Tensor g = random_tensor(y64.sizes(), 16);
      (y64 * g.to(DType::Float64)).sum().backward();

      Tensor rmd = rm.cuda(), rvd = rv.cuda();
      Tensor xd = x.cuda().requires_grad_(true);
      Tensor wd = affine ? w.cuda().requires_grad_(true) : Tensor();
      Tensor bd = affine ? b.cuda().requires_grad_(true) : Tensor();
      Tensor yd = batch_norm(xd, rmd, rvd, wd, bd, training, 0.1, 1e-5);
      ASSERT_TRUE(yd.is_cuda()) << what;
      (yd * g.cuda()).sum().backward();
      EXPECT_LE(worst_error(values(yd), as_doubles(y64), 1e-5, 1e-5), 1.0) << what;
      EXPECT_LE(worst_error(values(rmd), as_doubles(rm64), 1e-5, 1e-6), 1.0) << what;
      EXPECT_LE(worst_error(values(rvd), as_doubles(rv64), 1e-5, 1e-6), 1.0) << what;
      EXPECT_LE(worst_error(values(xd.grad()), as_doubles(x64.grad()), 1e-4, 1e-5), 1.0) << what;
      if (affine) {
        EXPECT_LE(worst_error(values(wd.grad()), as_doubles(w64.grad()), 1e-4, 1e-4), 1.0) << what;
        EXPECT_LE(worst_error(values(bd.grad()), as_doubles(b64.grad()), 1e-4, 1e-4), 1.0) << what;
      }
    }
  }
}

// softmax and log_softmax along every dim (rows contiguous or strided) and their gradients.
TEST(CudaSoftmax, AlongEveryDimMatchesTheCpu) {
  KILN_REQUIRE_CUDA_DEVICE();
  const Tensor x = random_tensor({3, 37, 5}, 31) * 3.0;
  for (bool log : {false, true}) {
    for (int64_t dim : {0, 1, 2, -1}) {
      const std::string what =
          std::string(log ? "log_softmax" : "softmax") + " dim " + std::to_string(dim);
      Tensor x64 = x.to(DType::Float64).requires_grad_(true);
      Tensor y64 = log ? log_softmax(x64, dim) : softmax(x64, dim);
      const Tensor g = random_tensor(y64.sizes(), 32);
      (y64 * g.to(DType::Float64)).sum().backward();
      Tensor xd = x.cuda().requires_grad_(true);
      Tensor yd = log ? log_softmax(xd, dim) : softmax(xd, dim);
      ASSERT_TRUE(yd.is_cuda()) << what;
      (yd * g.cuda()).sum().backward();
      EXPECT_LE(worst_error(values(yd), as_doubles(y64), 1e-5, 1e-6), 1.0) << what;
      EXPECT_LE(worst_error(values(xd.grad()), as_doubles(x64.grad()), 1e-4, 1e-5), 1.0) << what;
    }
  }
}

Tensor class_targets(Dims shape, int64_t classes, uint32_t seed) {
  std::mt19937 rng(seed);
  Tensor t = zeros(shape, TensorOptions(DType::Int64));
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data_ptr<int64_t>()[i] = static_cast<int64_t>(rng() % classes);
  return t;
}

// cross_entropy (logits) and nll_loss (log-probabilities) with every reduction, class weights,
// ignore_index and label smoothing, on [N, C] and [N, C, d] inputs, against float64 on the CPU.
TEST(CudaClassLoss, CrossEntropyAndNllMatchTheCpu) {
  KILN_REQUIRE_CUDA_DEVICE();
  struct Case {
    Dims input;
    bool weighted;
    double smoothing;
    Reduction reduction;
  };
  const Case cases[] = {
      {{8, 10}, false, 0.0, Reduction::Mean},   {{8, 10}, true, 0.0, Reduction::Mean},
      {{8, 10}, true, 0.1, Reduction::Sum},     {{4, 7, 3}, true, 0.2, Reduction::None},
      {{4, 7, 3}, false, 0.0, Reduction::Mean}, {{6, 1000}, false, 0.0, Reduction::Mean}};
  for (const Case& c : cases) {
    const int64_t classes = c.input[1];
    Dims target_shape{c.input[0]};
    for (size_t d = 2; d < c.input.size(); ++d) target_shape.push_back(c.input[d]);
    Tensor target = class_targets(target_shape, classes, 33);
    target.data_ptr<int64_t>()[1] = -100;  // ignored
    const Tensor x = random_tensor(c.input, 34) * 2.0;
    const Tensor w = c.weighted ? random_tensor({classes}, 35).abs() + 0.1 : Tensor();
    for (bool nll : {false, true}) {
      if (nll && c.smoothing > 0) continue;
      const std::string what = std::string(nll ? "nll_loss" : "cross_entropy") + " on " +
                               std::to_string(c.input.size()) + "-d input, " +
                               std::to_string(classes) + " classes";
      auto loss = [&](const Tensor& in, const Tensor& t, const Tensor& weight) {
        return nll ? nll_loss(log_softmax(in, 1), t, weight, -100, c.reduction)
                   : cross_entropy(in, t, weight, -100, c.reduction, c.smoothing);
      };
      Tensor x64 = x.to(DType::Float64).requires_grad_(true);
      Tensor l64 = loss(x64, target, c.weighted ? w.to(DType::Float64) : Tensor());
      const Tensor g = random_tensor(l64.sizes(), 36);
      (l64 * g.to(DType::Float64)).sum().backward();
      Tensor xd = x.cuda().requires_grad_(true);
      Tensor ld = loss(xd, target.cuda(), c.weighted ? w.cuda() : Tensor());
      ASSERT_TRUE(ld.is_cuda()) << what;
      (ld * g.cuda()).sum().backward();
      EXPECT_LE(worst_error(values(ld), as_doubles(l64), 1e-5, 1e-6), 1.0) << what;
      EXPECT_LE(worst_error(values(xd.grad()), as_doubles(x64.grad()), 1e-4, 1e-6), 1.0) << what;
    }
  }
  // A class index out of range is named, not read past the row.
  Tensor bad = class_targets({4}, 5, 37);
  bad.data_ptr<int64_t>()[2] = 7;
  try {
    cross_entropy(random_tensor({4, 5}, 38).cuda(), bad.cuda());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("got 7 (out of range)"), std::string::npos) << e.what();
  }
}

// int64 fills and arithmetic stay on the device (batch norm's counter): ones_like, add_, mul.
TEST(CudaInt64, FillsAndArithmeticOnTheDevice) {
  KILN_REQUIRE_CUDA_DEVICE();
  Tensor c = zeros({5}, TensorOptions(DType::Int64)).cuda();
  Tensor one = ones_like(c);
  ASSERT_TRUE(one.is_cuda());
  add_(c, one);
  add_(c, one);
  Tensor d = c * full_like(c, 7.0);
  Tensor host = d.cpu();
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(host.data_ptr<int64_t>()[i], 14) << i;
}

// ResNet-18 (conv, batch norm, relu, max pool, residual adds, adaptive pool, linear) trains on
// the device: one SGD step's loss, gradients and updated weights follow the same model on the
// CPU (in training mode, so batch statistics and running-stat updates are compared too).
TEST(CudaNnTraining, ResNet18StepFollowsTheCpu) {
  KILN_REQUIRE_CUDA_DEVICE();
  NoTf32 exact;
  auto make = [] {
    manual_seed(21);
    return models::resnet18(10);
  };
  auto cpu_model = make(), gpu_model = make();
  gpu_model->to(Device::CUDA);
  const Tensor x = random_tensor({4, 3, 64, 64}, 22), target = random_tensor({4, 10}, 23);
  optim::SGD cpu_opt(cpu_model->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  optim::SGD gpu_opt(gpu_model->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  // The first step compares the loss, every gradient and the updated weights; the second only
  // the loss, since small differences in the first step's update are amplified by batch norm
  // over a few values per channel in the last stages.
  for (int step = 0; step < 2; ++step) {
    cpu_opt.zero_grad();
    gpu_opt.zero_grad();
    Tensor cpu_loss = mse_loss(cpu_model->forward(x), target);
    Tensor gpu_loss = mse_loss(gpu_model->forward(x.cuda()), target.cuda());
    cpu_loss.backward();
    gpu_loss.backward();
    const double rtol = step == 0 ? 1e-4 : 1e-3;
    EXPECT_NEAR(gpu_loss.item<float>(), cpu_loss.item<float>(),
                rtol * std::abs(cpu_loss.item<float>()) + 1e-5)
        << "step " << step;
    const auto cp = cpu_model->parameters(), gp = gpu_model->parameters();
    ASSERT_EQ(cp.size(), gp.size());
    for (size_t i = 0; step == 0 && i < cp.size(); ++i) {
      // Gradients summed over thousands of products in another order: a scale-aware bound.
      const std::vector<double> want = as_doubles(cp[i].grad());
      double scale = 0;
      for (double v : want) scale = std::max(scale, std::abs(v));
      EXPECT_LE(worst_error(values(gp[i].grad()), want, 2e-3, 2e-3 * scale + 1e-7), 1.0)
          << "gradient of parameter " << i;
    }
    cpu_opt.step();
    gpu_opt.step();
    for (size_t i = 0; step == 0 && i < cp.size(); ++i) {
      EXPECT_LE(worst_error(values(gp[i]), as_doubles(cp[i]), 1e-4, 1e-6), 1.0)
          << "parameter " << i << " after the update";
    }
  }
  const auto cb = cpu_model->buffers(), gb = gpu_model->buffers();
  ASSERT_EQ(cb.size(), gb.size());
  for (size_t i = 0; i < cb.size(); ++i) {
    if (cb[i].dtype() == DType::Int64) {  // batch counters, counted on the device
      ASSERT_TRUE(gb[i].is_cuda());
      EXPECT_EQ(gb[i].cpu().item<int64_t>(), cb[i].item<int64_t>()) << "buffer " << i;
      continue;
    }
    EXPECT_LE(worst_error(values(gb[i]), as_doubles(cb[i]), 1e-3, 1e-4), 1.0) << "buffer " << i;
  }
}

}  // namespace
}  // namespace kiln
