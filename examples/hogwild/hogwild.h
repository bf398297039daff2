#pragma once
// Hogwild! (Niu, Recht, Re, Wright 2011): several threads run SGD on ONE set of shared parameters
// with no locks. Each step a thread reads the shared parameters, computes a minibatch gradient with
// kiln's autograd, and adds -lr * gradient into the shared parameters element by element.
//
// Reads and writes of the shared floats go through std::atomic_ref<float> with relaxed ordering:
// lock-free, free of data races in the C++ memory model (ThreadSanitizer-clean), and exactly the
// paper's model — component-wise atomic adds, no consistency across components, so a thread may
// compute its gradient from parameters that other threads are halfway through updating.
//
// The model: y = tanh(x W1 + b1) W2 + b2 with `hidden` units, or linear regression y = x W + b
// when hidden == 0; the data come from a teacher model of the same form plus a little noise.

#include <kiln/kiln.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

namespace hogwild {

struct Config {
  int threads = 4;
  int steps_per_thread = 400;
  int batch_size = 32;
  double lr = 0.05;
  int features = 8;
  int hidden = 0;  // 0: linear regression
  int samples = 2048;
  double noise = 0.01;
  uint64_t seed = 1;
};

struct Result {
  double initial_loss = 0;  // full-data MSE before training
  double final_loss = 0;    // and after
  double noise_floor = 0;   // MSE of the teacher itself (the noise variance)
  int64_t updates = 0;      // SGD steps applied, over all threads
  double seconds = 0;
};

namespace detail {

inline kiln::Tensor randn(kiln::Dims sizes, std::mt19937_64& gen, double scale) {
  std::normal_distribution<float> dist(0.0f, static_cast<float>(scale));
  kiln::Tensor t = kiln::empty(sizes);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_ptr<float>()[i] = dist(gen);
  return t;
}

// Parameters in order: linear {W [F,1], b [1]}; MLP {W1 [F,H], b1 [H], W2 [H,1], b2 [1]}.
inline std::vector<kiln::Tensor> init_params(const Config& c, std::mt19937_64& gen, double scale) {
  if (c.hidden == 0) return {randn({c.features, 1}, gen, scale), randn({1}, gen, scale)};
  return {randn({c.features, c.hidden}, gen, scale), randn({c.hidden}, gen, scale),
          randn({c.hidden, 1}, gen, scale), randn({1}, gen, scale)};
}

inline kiln::Tensor forward(const kiln::Tensor& x, const std::vector<kiln::Tensor>& p) {
  if (p.size() == 2) return kiln::linear(x, p[0].t(), p[1]);
  kiln::Tensor h = kiln::tanh(kiln::linear(x, p[0].t(), p[1]));
  return kiln::linear(h, p[2].t(), p[3]);
}

inline double full_loss(const kiln::Tensor& x, const kiln::Tensor& y,
                        const std::vector<kiln::Tensor>& p) {
  kiln::autograd::NoGradGuard no_grad;
  return kiln::mse_loss(forward(x, p), y).item<double>();
}

}  // namespace detail

inline Result train(const Config& c) {
  using namespace kiln;
  std::mt19937_64 gen(c.seed);
  // Teacher and data.
  const std::vector<Tensor> teacher = detail::init_params(c, gen, 1.0);
  const Tensor x = detail::randn({c.samples, c.features}, gen, 1.0);
  Tensor y;
  {
    autograd::NoGradGuard no_grad;
    y = detail::forward(x, teacher) + detail::randn({c.samples, 1}, gen, c.noise);
  }
  // The shared model: ONE set of parameter tensors that every thread reads and updates.
  std::vector<Tensor> shared = detail::init_params(c, gen, 0.1);
  for (Tensor& p : shared) p.requires_grad_();

  Result r;
  r.initial_loss = detail::full_loss(x, y, shared);
  r.noise_floor = detail::full_loss(x, y, teacher);
  std::atomic<int64_t> updates{0};
  const auto start = std::chrono::steady_clock::now();

  auto worker = [&](int id) {
    std::mt19937_64 rng(c.seed * 1000003u + static_cast<uint64_t>(id) + 1);
    std::uniform_int_distribution<int64_t> pick(0, c.samples - 1);
    // This thread's view of the parameters: leaves whose values are refreshed from the shared
    // ones each step, so each thread has its own autograd graph and .grad.
    std::vector<Tensor> local;
    for (const Tensor& p : shared) local.push_back(zeros_like(p).requires_grad_());
    Tensor idx = kiln::empty({c.batch_size}, TensorOptions(DType::Int64));
    for (int step = 0; step < c.steps_per_thread; ++step) {
      for (size_t k = 0; k < shared.size(); ++k) {
        float* src = shared[k].data_ptr<float>();
        float* dst = local[k].data_ptr<float>();
        for (int64_t i = 0; i < shared[k].numel(); ++i)
          dst[i] = std::atomic_ref<float>(src[i]).load(std::memory_order_relaxed);
        local[k].set_grad(Tensor());
      }
      for (int b = 0; b < c.batch_size; ++b) idx.data_ptr<int64_t>()[b] = pick(rng);
      Tensor loss =
          mse_loss(detail::forward(index_select(x, 0, idx), local), index_select(y, 0, idx));
      loss.backward();
      for (size_t k = 0; k < shared.size(); ++k) {
        Tensor g = local[k].grad().contiguous();
        float* dst = shared[k].data_ptr<float>();
        const float* gp = g.data_ptr<float>();
        const float lr = static_cast<float>(c.lr);
        for (int64_t i = 0; i < g.numel(); ++i)
          std::atomic_ref<float>(dst[i]).fetch_add(-lr * gp[i], std::memory_order_relaxed);
      }
      updates.fetch_add(1, std::memory_order_relaxed);
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < c.threads; ++t) threads.emplace_back(worker, t);
  for (auto& t : threads) t.join();

  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.updates = updates.load();
  r.final_loss = detail::full_loss(x, y, shared);
  return r;
}

}  // namespace hogwild
