// Training on the device: an MLP (Linear, ReLU, Linear) with MSE loss and SGD with momentum runs
// its steps on CUDA tensors and follows the same losses and weights as the same model on the
// CPU; sum/mean reductions against float64.

#include <gtest/gtest.h>

#include <random>

#include "cuda_test_util.h"
#include "kiln/nn.h"
#include "kiln/optim.h"

namespace kiln {
namespace {

using cuda_test::values;
using cuda_test::worst_error;

TEST(CudaTraining, ReductionsMatchFloat64) {
  KILN_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(7);
  std::normal_distribution<float> n01;
  Tensor x = empty({6, 37, 129});
  for (int64_t i = 0; i < x.numel(); ++i) x.data_ptr<float>()[i] = n01(rng);
  const Tensor d = x.cuda(), x64 = x.to(DType::Float64);
  auto check = [](const Tensor& got, const Tensor& want, const char* what) {
    ASSERT_TRUE(got.is_cuda()) << what;
    ASSERT_EQ(got.sizes(), want.sizes()) << what;
    Tensor w = want.contiguous();
    const double* p = w.data_ptr<double>();
    EXPECT_LE(worst_error(values(got), std::vector<double>(p, p + w.numel()), 1e-5, 1e-4), 1.0)
        << what;
  };
  check(d.sum(), x64.sum(), "sum all");
  check(mean(d, Dims{1}), mean(x64, Dims{1}), "mean dim 1");
  check(sum(d, Dims{0, 2}, true), sum(x64, Dims{0, 2}, true), "sum dims 0,2 keepdim");
  check(sum(d.transpose(0, 2), Dims{2}), sum(x64.transpose(0, 2), Dims{2}), "strided input");
  check(sum(empty({0, 3}).cuda(), Dims{0}), sum(empty({0, 3}).to(DType::Float64), Dims{0}),
        "empty");
}

TEST(CudaTraining, MlpWithMseAndSgdFollowsTheCpu) {
  KILN_REQUIRE_CUDA_DEVICE();
  auto make = [] {
    manual_seed(3);
    return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
        std::make_shared<nn::Linear>(16, 64), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Linear>(64, 4)});
  };
  auto cpu_model = make(), gpu_model = make();
  gpu_model->to(Device::CUDA);
  for (const Tensor& p : gpu_model->parameters()) ASSERT_TRUE(p.is_cuda());
  optim::SGD cpu_opt(cpu_model->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  optim::SGD gpu_opt(gpu_model->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  manual_seed(4);
  Tensor x = randn({32, 16}), target = randn({32, 4});
  const Tensor dx = x.cuda(), dtarget = target.cuda();
  std::vector<double> cpu_losses, gpu_losses;
  for (int step = 0; step < 20; ++step) {
    cpu_opt.zero_grad();
    Tensor loss = mse_loss(cpu_model->forward(x), target);
    loss.backward();
    cpu_opt.step();
    cpu_losses.push_back(loss.item<double>());
    gpu_opt.zero_grad();
    Tensor gloss = mse_loss(gpu_model->forward(dx), dtarget);
    ASSERT_TRUE(gloss.is_cuda());
    gloss.backward();
    gpu_opt.step();
    gpu_losses.push_back(values(gloss)[0]);
  }
  EXPECT_LT(gpu_losses.back(), 0.8 * gpu_losses.front());  // it learns
  std::vector<float> got(gpu_losses.begin(), gpu_losses.end());
  EXPECT_LE(worst_error(got, cpu_losses, 1e-3, 1e-5), 1.0);
  const auto cpu_params = cpu_model->parameters(), gpu_params = gpu_model->parameters();
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    std::vector<float> want = values(cpu_params[i]);
    EXPECT_LE(worst_error(values(gpu_params[i]), std::vector<double>(want.begin(), want.end()),
                          1e-3, 1e-4),
              1.0)
        << "parameter " << i;
  }
}

}  // namespace
}  // namespace kiln
