// The random fills' device code (runtime/src/cuda/random_kernels.cuh) compiled as host C++ under a
// shim of the CUDA built-ins it uses, and run as one thread of one block: its Philox blocks, the
// element-to-word mapping and the formulas must give the CPU kernels' values for the same
// generator state. This checks the kernels' logic in CI, without a device.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/runtime/kernels/random.h"

namespace kiln_cuda_shim {

#define __global__
#define __device__
struct Dim {
  unsigned x;
};
inline Dim threadIdx{0}, blockIdx{0}, blockDim{1}, gridDim{1};
struct uint4 {
  unsigned x, y, z, w;
};
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) {
  return {a, b, c, d};
}
inline unsigned __umulhi(unsigned a, unsigned b) {
  return static_cast<unsigned>((static_cast<unsigned long long>(a) * b) >> 32);
}
// Rounded once each, as the device's _rn intrinsics (volatile keeps the host compiler from fusing
// them into a multiply-add).
inline float __fadd_rn(float a, float b) {
  volatile float r = a + b;
  return r;
}
inline float __fsub_rn(float a, float b) {
  volatile float r = a - b;
  return r;
}
inline float __fmul_rn(float a, float b) {
  volatile float r = a * b;
  return r;
}
inline long long min(long long a, long long b) {
  return a < b ? a : b;
}

#include "../../runtime/src/cuda/random_kernels.cuh"

#undef __global__
#undef __device__

}  // namespace kiln_cuda_shim

namespace kiln {
namespace {

// The device kernel's fill of n elements from `g` (advancing it as the device path does).
std::vector<float> device_fill(Generator& g, int64_t n, int kind, float a, float b, double p,
                               std::vector<unsigned char>* bytes = nullptr) {
  std::vector<float> out(static_cast<size_t>(n));
  if (bytes) bytes->assign(static_cast<size_t>(n), 0);
  const uint64_t blocks = static_cast<uint64_t>((n + 3) / 4);
  const unsigned long long base = g.reserve(blocks);
  kiln_cuda_shim::kiln_random_fill(out.data(), bytes ? bytes->data() : nullptr, n, base, g.seed(),
                                   kind, a, b, static_cast<uint64_t>(std::ldexp(p, 32)));
  return out;
}

std::vector<float> cpu_fill(Generator& g, int64_t n, int kind, float a, float b, double p) {
  Tensor t = zeros({n});
  if (kind == 0) kernels::uniform_(*t.impl(), a, b, &g);
  if (kind == 1) kernels::normal_(*t.impl(), a, b, &g);
  if (kind == 2) kernels::bernoulli_(*t.impl(), p, &g);
  const float* v = t.data_ptr<float>();
  return std::vector<float>(v, v + n);
}

TEST(CudaRandomHost, TheDeviceCodeGivesTheCpuValues) {
  for (int kind = 0; kind < 3; ++kind) {
    for (int64_t n : {1, 7, 917}) {  // partial blocks and pairs included
      Generator cpu(99, 5), dev(99, 5);
      const float a = kind == 0 ? -2.0f : 0.5f, b = kind == 0 ? 3.0f : 2.0f;
      const std::vector<float> want = cpu_fill(cpu, n, kind, a, b, 0.3);
      const std::vector<float> got = device_fill(dev, n, kind, a, b, 0.3);
      EXPECT_EQ(dev.offset(), cpu.offset()) << "kind " << kind << ", n " << n;
      for (int64_t i = 0; i < n; ++i) {
        // One rounding apart at most (the host compiler may fuse the CPU kernel's multiply-add).
        EXPECT_NEAR(got[i], want[i], 4e-7 * (1 + std::abs(want[i])))
            << "kind " << kind << ", n " << n << ", element " << i;
      }
    }
  }
}

TEST(CudaRandomHost, TheDropoutMaskIsTheCpuMask) {
  const int64_t n = 1001;
  Generator cpu(7), dev(7);
  Tensor mask = zeros({n}, TensorOptions(DType::Bool));
  kernels::dropout_mask_out(0.25, *mask.impl(), &cpu);
  std::vector<unsigned char> bytes;
  device_fill(dev, n, /*kind=*/3, 0, 0, 0.25, &bytes);
  EXPECT_EQ(dev.offset(), cpu.offset());
  int kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(bytes[i] != 0, mask.data_ptr<bool>()[i]) << i;
    kept += bytes[i];
  }
  EXPECT_GT(kept, n / 2);  // about three quarters
  EXPECT_LT(kept, n);
  // The dropout kernel keeps x / (1 - p) where the mask is set.
  std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(i) - 500.0f;
  kiln_cuda_shim::kiln_dropout(y.data(), x.data(), bytes.data(), n, 1.0f / 0.75f);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(y[i], bytes[i] ? x[i] * (1.0f / 0.75f) : 0.0f) << i;
}

}  // namespace
}  // namespace kiln
