// Eager autograd from several threads, as a service that trains or fine-tunes per request does
// (scripts/sanitize.sh runs these under ThreadSanitizer): graphs built and differentiated
// concurrently from shared read-only leaves give the gradients one thread gives, bit for bit, and
// modules owned by different threads train independently.
#include <gtest/gtest.h>

#include <latch>
#include <thread>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "kiln/optim.h"

using namespace kiln;

namespace {

// loss_k = sum(tanh(x_k W + b)^2) and its gradients with respect to the shared W and b.
TensorList loss_grads(const Tensor& x, const Tensor& w, const Tensor& b) {
  Tensor h = tanh(matmul(x, w) + b);
  return autograd::grad({sum(h * h)}, {w, b});
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.sizes() == b.sizes() && amax(abs(a - b)).item<double>() == 0.0;
}

}  // namespace

TEST(AutogradThreads, SharedLeavesGiveOneThreadsGradients) {
  manual_seed(7);
  const Tensor w = randn({16, 8}).requires_grad_();
  const Tensor b = randn({8}).requires_grad_();
  std::vector<Tensor> xs;
  for (int k = 0; k < 6; ++k) xs.push_back(randn({4, 16}));
  std::vector<TensorList> want;
  for (const Tensor& x : xs) want.push_back(loss_grads(x, w, b));

  constexpr int kThreads = 4;
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::string> errors(kThreads);
  std::latch start(kThreads);  // every thread builds its first graph at the same moment
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int r = 0; r < 200; ++r) {
        const size_t k = static_cast<size_t>(t + r) % xs.size();  // a different order per thread
        try {
          TensorList g = loss_grads(xs[k], w, b);
          mismatches[t] += !bitwise_equal(g[0], want[k][0]) + !bitwise_equal(g[1], want[k][1]);
        } catch (const std::exception& e) {  // e.g. a leaf's edge replaced by another thread
          errors[t] = e.what();
          return;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(mismatches[t], 0) << "thread " << t;
    EXPECT_EQ(errors[t], "") << "thread " << t;
  }
  EXPECT_FALSE(w.grad().defined());  // autograd::grad does not accumulate into the leaves
}

TEST(AutogradThreads, EachThreadTrainsItsOwnModule) {
  // Each thread fits y = 2x - 1 with its own Linear, SGD and backward(): the same start, data and
  // steps give the same weights in every thread as on the main thread.
  auto train = [] {
    auto model = std::make_shared<nn::Linear>(1, 1);
    {
      // Fixed start values: the global generator's stream is shared by all threads.
      autograd::NoGradGuard no_grad;
      model->weight.fill_(0.3);
      model->bias.fill_(-0.2);
    }
    optim::SGD opt(model->parameters(), optim::SGDOptions(0.1).momentum(0.5));
    Tensor x = linspace(-1, 1, 32).reshape({32, 1});
    Tensor y = x * 2.0 - 1.0;
    for (int step = 0; step < 60; ++step) {
      opt.zero_grad();
      mse_loss((*model)(x), y).backward();
      opt.step();
    }
    return std::vector<Tensor>{model->weight.detach().clone(), model->bias.detach().clone()};
  };
  const std::vector<Tensor> want = train();
  EXPECT_NEAR(want[0].item<double>(), 2.0, 1e-2);
  EXPECT_NEAR(want[1].item<double>(), -1.0, 1e-2);
  constexpr int kThreads = 3;
  std::vector<std::vector<Tensor>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back([&, t] { got[t] = train(); });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_TRUE(bitwise_equal(got[t][0], want[0])) << "thread " << t;
    EXPECT_TRUE(bitwise_equal(got[t][1], want[1])) << "thread " << t;
  }
}
