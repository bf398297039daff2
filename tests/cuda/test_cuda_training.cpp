// Training on the device: an MLP (Linear, ReLU, Linear) with MSE loss and SGD with momentum runs
// its steps on CUDA tensors and follows the same losses and weights as the same model on the
// CPU; sum/mean reductions against float64.

#include <gtest/gtest.h>

#include <random>

#include "cuda_test_util.h"
#include "kiln/nn.h"
#include "kiln/optim.h"
#include "kiln/serialize.h"

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

namespace kiln {
namespace {

using cuda_test::values;
using cuda_test::worst_error;

Tensor seeded_randn(std::initializer_list<int64_t> sizes, uint64_t seed) {
  manual_seed(seed);
  return randn(Dims(sizes));
}

TEST(CudaViews, WritesIntoViewsAndSliceGradients) {
  KILN_REQUIRE_CUDA_DEVICE();
  // A copy into a transposed view and an in-place add on a column slice.
  Tensor src = seeded_randn({6, 4}, 1);
  Tensor d = zeros({4, 6}).cuda();
  Tensor dt = d.transpose(0, 1);
  copy_(dt, src.cuda());
  EXPECT_EQ(values(d), values(src.transpose(0, 1).contiguous()));
  Tensor cols = d.narrow(1, 2, 3);
  add_(cols, ones({4, 3}).cuda());
  Tensor want = src.transpose(0, 1).contiguous();
  Tensor want_cols = want.narrow(1, 2, 3);
  add_(want_cols, ones({4, 3}));
  EXPECT_EQ(values(d), values(want));
  // The gradient of a slice scatters into zeros of the input on the device.
  Tensor x = seeded_randn({5, 9}, 2);
  Tensor xc = x.clone().requires_grad_(true), xd = x.cuda().requires_grad_(true);
  (xc.narrow(1, 3, 4) * 2.0).backward(full({5, 4}, 1.5));
  (xd.narrow(1, 3, 4) * 2.0).backward(full({5, 4}, 1.5).cuda());
  EXPECT_EQ(values(xd.grad()), values(xc.grad()));
  // Overlapping an input other than as the same view is refused, not raced.
  Tensor v = ones({10}).cuda();
  Tensor tail = v.narrow(0, 1, 9);
  EXPECT_THROW(add_(tail, v.narrow(0, 0, 9)), Error);
}

TEST(CudaViews, MatmulOnOffsetViewsAndLinearBackwardOver3d) {
  KILN_REQUIRE_CUDA_DEVICE();
  // Rows 1.. of a [65, 33] matrix start 132 bytes in: 4-byte aligned operands.
  Tensor a = seeded_randn({65, 33}, 3), b = seeded_randn({33, 17}, 4);
  Tensor got = matmul(a.cuda().narrow(0, 1, 64), b.cuda());
  Tensor want = matmul(a.narrow(0, 1, 64).to(DType::Float64), b.to(DType::Float64));
  const double* w = want.contiguous().data_ptr<double>();
  EXPECT_LE(worst_error(values(got), std::vector<double>(w, w + want.numel()), 0, 1e-4), 1.0);
  // linear over [2, 5, 16]: forward and input/weight/bias gradients as on the CPU.
  manual_seed(5);
  auto lin_cpu = std::make_shared<nn::Linear>(16, 8);
  manual_seed(5);
  auto lin_gpu = std::make_shared<nn::Linear>(16, 8);
  lin_gpu->to(Device::CUDA);
  Tensor x = seeded_randn({2, 5, 16}, 6), g = seeded_randn({2, 5, 8}, 7);
  Tensor xc = x.clone().requires_grad_(true), xd = x.cuda().requires_grad_(true);
  lin_cpu->forward(xc).backward(g);
  lin_gpu->forward(xd).backward(g.cuda());
  auto close = [](const Tensor& gpu, const Tensor& cpu) {
    std::vector<float> c = values(cpu);
    return worst_error(values(gpu), std::vector<double>(c.begin(), c.end()), 1e-4, 1e-5);
  };
  EXPECT_LE(close(xd.grad(), xc.grad()), 1.0);
  EXPECT_LE(close(lin_gpu->weight.grad(), lin_cpu->weight.grad()), 1.0);
  EXPECT_LE(close(lin_gpu->bias.grad(), lin_cpu->bias.grad()), 1.0);
}

TEST(CudaViews, SavingDeviceTensorsWritesTheirValues) {
  KILN_REQUIRE_CUDA_DEVICE();
  Tensor x = seeded_randn({3, 7}, 8);
  const std::vector<uint8_t> bytes = save_to_bytes(Value(x.cuda()));
  Tensor back = load_from_bytes(bytes).to_tensor();
  EXPECT_FALSE(back.is_cuda());
  EXPECT_EQ(values(back), values(x));
}

}  // namespace
}  // namespace kiln
