#pragma once
// Shared helpers of the JIT tests: seeded random tensors and error measures in float64.
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>

#include "kiln/jit/compile.h"
#include "kiln/kiln.h"
#include "kiln/runtime/thread_pool.h"
#include "kiln/trace/trace.h"

namespace kiln::test {

// Compile options for tests: the memory cache only (no object files written to the user's cache).
inline jit::CompileOptions no_disk() {
  jit::CompileOptions o;
  o.disk_cache = false;
  return o;
}

// The vector widths kernel tests compile at: the scalar loops LLVM vectorizes (-1) and the
// vector pipeline at 128, 256 and 512 bits, whatever this machine's own width.
inline constexpr int kVectorWidths[] = {-1, 128, 256, 512};
inline jit::CompileOptions at_vector_width(int bits) {
  jit::CompileOptions o = no_disk();
  o.vector_bits = bits;
  return o;
}

// The thread pool at `n` threads while a test runs (at least two: kernels then run on shares of
// their outer dim), restored after.
struct ScopedThreads {
  explicit ScopedThreads(int n) : saved(num_threads()) { set_num_threads(n); }
  ScopedThreads() : ScopedThreads(std::max(num_threads(), 2)) {}
  ~ScopedThreads() { set_num_threads(saved); }
  ScopedThreads(const ScopedThreads&) = delete;
  ScopedThreads& operator=(const ScopedThreads&) = delete;
  int saved;
};

inline Tensor rnd(Dims sizes, uint32_t seed, double scale = 1.0) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, static_cast<float>(scale));
  Tensor t = kiln::empty(sizes);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_ptr<float>()[i] = dist(gen);
  return t;
}

// Runs a shell command; its exit status, stdout and stderr appended to *output.
inline int run_command(const std::string& cmd, std::string* output) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) output->append(buf, n);
  const int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  return amax(abs(a.to(DType::Float64) - b.to(DType::Float64))).item<double>();
}

// max |a - b| / max(max |b|, tiny): the relative error the tolerances are stated in.
inline double max_rel_error(const Tensor& a, const Tensor& b) {
  const double scale = amax(abs(b.to(DType::Float64))).item<double>();
  return max_abs_diff(a, b) / std::max(scale, 1e-30);
}

// A U-Net-style network with the ops a segmentation model needs: strided convs down, bilinear
// interpolate and conv_transpose2d up, skip connections by cat, a nearest resize to the output
// size and a topk head. forward: [N, 3, 16, 16] -> [N, 12] = the 5 best scores of class 1, their
// flat positions (as floats) and the mean logit of each class.
class TinyUNet : public nn::Module {
 public:
  TinyUNet() {
    auto conv = [&](const char* name, int64_t in, int64_t out, int64_t k, int64_t stride) {
      return register_module(name,
                             std::make_shared<nn::Conv2d>(
                                 nn::Conv2dOptions(in, out, k).stride(stride).padding(k / 2)));
    };
    enc1_ = conv("enc1", 3, 8, 3, 1);
    enc2_ = conv("enc2", 8, 16, 3, 2);
    mid_ = conv("mid", 16, 16, 3, 2);
    dec1_ = conv("dec1", 32, 16, 3, 1);
    up_ = register_module("up", std::make_shared<nn::ConvTranspose2d>(
                                    nn::ConvTranspose2dOptions(16, 8, 2).stride(2)));
    dec2_ = conv("dec2", 16, 8, 3, 1);
    head_ = conv("head", 8, 2, 1, 1);
  }
  Tensor forward(const Tensor& x) override {
    using O = InterpolateOptions;
    Tensor e1 = relu(enc1_->forward(x));   // 16x16
    Tensor e2 = relu(enc2_->forward(e1));  // 8x8
    Tensor m = relu(mid_->forward(e2));    // 4x4
    Tensor u1 = interpolate(m, O().scale_factor({2.0}).mode(InterpolateMode::Bilinear));
    Tensor d1 = relu(dec1_->forward(cat({u1, e2}, 1)));                   // 8x8
    Tensor d2 = relu(dec2_->forward(cat({up_->forward(d1), e1}, 1)));     // 16x16
    Tensor logits = head_->forward(interpolate(d2, O().size({24, 24})));  // [N, 2, 24, 24]
    auto [score, where] = topk(logits.select(1, 1).reshape({x.size(0), 24 * 24}), 5, 1);
    return cat({score, where.to(DType::Float32), mean(logits, Dims{2, 3})}, 1);
  }

 private:
  std::shared_ptr<nn::Conv2d> enc1_, enc2_, mid_, dec1_, dec2_, head_;
  std::shared_ptr<nn::ConvTranspose2d> up_;
};

// One SGD step on `fc` traced with its parameters as named captures (a function that writes its
// captures: what inference-only transformations must refuse).
inline jit::TracedFunction trace_sgd_step(nn::Linear& fc, const Tensor& x) {
  auto step = [&](const TensorList& in) {
    Tensor loss = fc(in[0]).sum();
    loss.backward();
    autograd::NoGradGuard no_grad;
    fc.weight.sub_(fc.weight.grad() * 0.1);
    return TensorList{loss};
  };
  jit::TraceOptions o;
  for (const auto& [k, t] : fc.named_parameters()) o.named_captures.push_back({k, t});
  return jit::trace(step, {x}, o);
}

}  // namespace kiln::test
