#pragma once
// Shared by the CUDA tests: skipping without a device or NVRTC, and float64 references.

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/runtime/cuda/compile.h"
#include "kiln/runtime/cuda/cuda.h"

// Skips the test (with the reason in the output) where no CUDA device is usable.
#define KILN_REQUIRE_CUDA_DEVICE()                                                   \
  do {                                                                               \
    if (!::kiln::cuda::is_available())                                               \
      GTEST_SKIP() << "needs a CUDA device: " << ::kiln::cuda::unavailable_reason(); \
  } while (0)

// Skips where NVRTC cannot be loaded (a build without CUDA, or no toolkit installed).
#define KILN_REQUIRE_NVRTC()                       \
  do {                                             \
    try {                                          \
      ::kiln::cuda::nvrtc_version();               \
    } catch (const ::kiln::Error& e) {             \
      GTEST_SKIP() << "needs NVRTC: " << e.what(); \
    }                                              \
  } while (0)

namespace kiln::cuda_test {

inline std::vector<float> values(const Tensor& t) {
  Tensor c = t.cpu().contiguous();
  const float* p = c.data_ptr<float>();
  return std::vector<float>(p, p + c.numel());
}

// max |got - want| / (atol + rtol |want|) over all elements, NaN-aware (both NaN is equal).
inline double worst_error(const std::vector<float>& got, const std::vector<double>& want,
                          double rtol, double atol) {
  EXPECT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    if (std::isnan(want[i]) && std::isnan(got[i])) continue;
    if (std::isinf(want[i]) && got[i] == want[i]) continue;
    const double e = std::fabs(got[i] - want[i]) / (atol + rtol * std::fabs(want[i]));
    worst = std::isnan(e) ? INFINITY : std::max(worst, e);
  }
  return worst;
}

}  // namespace kiln::cuda_test
