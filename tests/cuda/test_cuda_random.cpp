// Random fills and dropout on the device follow the CPU's Philox streams: the same generator
// state gives the same values (uniform and bernoulli exactly, normal to float rounding of log, sin
// and cos) and moves the generator by the same number of blocks; dropout's forward and gradient
// on the device match the CPU's with the same mask.

#include <gtest/gtest.h>

#include <cmath>

#include "cuda_test_util.h"
#include "kiln/runtime/cuda/random.h"
#include "kiln/runtime/kernels/random.h"

namespace kiln {
namespace {

using cuda_test::values;

std::vector<float> cpu_values(const Tensor& t) {
  Tensor c = t.contiguous();
  const float* p = c.data_ptr<float>();
  return std::vector<float>(p, p + c.numel());
}

TEST(CudaRandomCompile, PhiloxKernelsCompileForSm90) {
  KILN_REQUIRE_NVRTC();
  const cuda::CompiledCode code = cuda::compile("random", cuda::random_source(), "sm_90");
  EXPECT_NE(code.ptx.find(".entry kiln_random_fill"), std::string::npos);
  EXPECT_NE(code.ptx.find(".entry kiln_dropout"), std::string::npos);
}

TEST(CudaRandom, FillsFollowTheCpuStreams) {
  KILN_REQUIRE_CUDA_DEVICE();
  // An odd size (a partial last block) and a generator part-way through its stream.
  const Dims shape{7, 131};
  for (int kind = 0; kind < 3; ++kind) {
    Generator cpu_gen(1234, 17), gpu_gen(1234, 17);
    Tensor c = zeros(shape);
    Tensor d(empty(shape, DType::Float32, Device::CUDA));
    const char* what = kind == 0 ? "uniform" : kind == 1 ? "normal" : "bernoulli";
    if (kind == 0) {
      kernels::uniform_(*c.impl(), -2.0, 3.0, &cpu_gen);
      kernels::uniform_(*d.impl(), -2.0, 3.0, &gpu_gen);
    } else if (kind == 1) {
      kernels::normal_(*c.impl(), 0.5, 2.0, &cpu_gen);
      kernels::normal_(*d.impl(), 0.5, 2.0, &gpu_gen);
    } else {
      kernels::bernoulli_(*c.impl(), 0.3, &cpu_gen);
      kernels::bernoulli_(*d.impl(), 0.3, &gpu_gen);
    }
    EXPECT_EQ(gpu_gen.offset(), cpu_gen.offset()) << what;
    const std::vector<float> want = cpu_values(c), got = values(d);
    ASSERT_EQ(got.size(), want.size());
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      // uniform: one rounding of an affine map; normal: float log/sin/cos of the same words.
      const double tol =
          kind == 1 ? 2e-5 * (1 + std::abs(want[i])) : 1e-6 * (1 + std::abs(want[i]));
      worst = std::max(worst, std::abs(got[i] - want[i]) / tol);
    }
    EXPECT_LE(worst, 1.0) << what;
  }
  // Not a constant stream: the values vary and a second fill differs from the first.
  Generator g(5);
  Tensor a(empty(Dims{1000}, DType::Float32, Device::CUDA));
  Tensor b(empty(Dims{1000}, DType::Float32, Device::CUDA));
  kernels::uniform_(*a.impl(), 0.0, 1.0, &g);
  kernels::uniform_(*b.impl(), 0.0, 1.0, &g);
  const std::vector<float> va = values(a), vb = values(b);
  double mean = 0;
  int same = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    mean += va[i] / va.size();
    same += va[i] == vb[i];
  }
  EXPECT_NEAR(mean, 0.5, 0.05);
  EXPECT_LT(same, 5);
}

TEST(CudaRandom, DropoutMatchesTheCpuWithTheSameSeed) {
  KILN_REQUIRE_CUDA_DEVICE();
  Tensor x = randn({9, 33});
  auto run = [&](bool gpu, std::vector<float>& y, std::vector<float>& gx, std::vector<uint8_t>& m) {
    manual_seed(77);
    Tensor xi = (gpu ? x.cuda() : x.clone()).requires_grad_(true);
    Tensor out = dropout(xi, 0.25, true);
    EXPECT_EQ(out.is_cuda(), gpu);
    (out * 2.0).sum().backward();
    y = gpu ? values(out) : cpu_values(out);
    gx = gpu ? values(xi.grad()) : cpu_values(xi.grad());
    // Which elements were kept: nonzero outputs (x is nonzero almost surely).
    m.clear();
    for (float v : y) m.push_back(v != 0.0f);
  };
  std::vector<float> yc, gc, yd, gd;
  std::vector<uint8_t> mc, md;
  run(false, yc, gc, mc);
  run(true, yd, gd, md);
  EXPECT_EQ(md, mc);
  size_t kept = 0;
  for (size_t i = 0; i < yc.size(); ++i) {
    EXPECT_NEAR(yd[i], yc[i], 1e-6 * (1 + std::abs(yc[i]))) << i;
    EXPECT_NEAR(gd[i], gc[i], 1e-6) << i;
    kept += mc[i];
  }
  // About three quarters kept.
  EXPECT_GT(kept, yc.size() / 2);
  EXPECT_LT(kept, yc.size());
}

}  // namespace
}  // namespace kiln
