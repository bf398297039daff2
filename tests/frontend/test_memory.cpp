// Autograd memory: a 20-layer MLP's backward peak against the theoretical minimum, measured with
// the allocator's statistics.
#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "kiln/runtime/allocator.h"

using namespace kiln;

TEST(Memory, MlpBackwardPeakNearTheoreticalMinimum) {
  constexpr int64_t kLayers = 20, kBatch = 64, kWidth = 256;
  std::vector<Tensor> weights;
  for (int i = 0; i < kLayers; ++i) {
    weights.push_back(full({kWidth, kWidth}, 0.01 * ((i % 3) - 1)).requires_grad_());
  }
  Tensor x = full({kBatch, kWidth}, 0.5);
  auto& alloc = cpu_allocator();

  Tensor h = x;
  for (auto& w : weights) h = relu(linear(h, w));
  Tensor loss = sum(h);
  const int64_t before_backward = alloc.stats().bytes_in_use;
  alloc.reset_peak();
  loss.backward();
  const int64_t peak = alloc.stats().peak_bytes;

  // Theoretical minimum: while backward walks layer k (from the top), the activations below it
  // are still saved, k weight gradients exist, and one incoming plus one outgoing activation
  // gradient are alive. Peak over k.
  const int64_t A = kBatch * kWidth * 4, W = kWidth * kWidth * 4;
  const int64_t saved_activations = kLayers * A;  // each relu output is the next layer's input
  const int64_t fixed = before_backward - saved_activations;  // params, x, loss, graph-free data
  int64_t minimum = 0;
  for (int64_t k = 0; k <= kLayers; ++k) {
    minimum = std::max(minimum, fixed + (kLayers - k) * A + k * W + 2 * A);
  }
  const double ratio = static_cast<double>(peak) / static_cast<double>(minimum);
  std::printf("backward peak %lld bytes, theoretical minimum %lld bytes, ratio %.3f\n",
              static_cast<long long>(peak), static_cast<long long>(minimum), ratio);
  EXPECT_LE(ratio, 1.10);
  // After backward the graph is gone: only parameters, their gradients, x, and the outputs remain.
  for (auto& w : weights) ASSERT_TRUE(w.grad().defined());
}
