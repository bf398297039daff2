// A user's own model, end to end with the installed kiln: load PyTorch-style weights from a
// .safetensors file, fine-tune a few steps, trace, save a .kiln artifact, compile it ahead of time
// to an executable, and check that both run like eager.
//
//   custom_model WEIGHTS.safetensors OUT_DIR
//
// The model (not one of the zoo's): a residual conv stem for 1x12x12 images and a 4-way head.
// Its PyTorch twin, whose state_dict() gives the same names:
//   class SpotNet(nn.Module):
//       def __init__(self):
//           super().__init__()
//           self.stem = nn.Conv2d(1, 8, 3, padding=1, bias=False); self.bn1 = nn.BatchNorm2d(8)
//           self.conv = nn.Conv2d(8, 8, 3, padding=1, bias=False); self.bn2 = nn.BatchNorm2d(8)
//           self.head = nn.Linear(8, 4)
//       def forward(self, x):
//           x = F.relu(self.bn1(self.stem(x)))
//           x = F.max_pool2d(F.relu(x + self.bn2(self.conv(x))), 2)
//           return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))
// make_weights.py writes such a file with the standard library only.

#include <kiln/jit/aot.h>
#include <kiln/jit/save.h>
#include <kiln/kiln.h>
#include <kiln/runtime/model.h>
#include <kiln/trace/trace.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#ifndef KILN_EXAMPLE_RUNTIME_DIR
#define KILN_EXAMPLE_RUNTIME_DIR ""  // compile_aot's default: $KILN_RUNTIME_DIR, then the install
#endif

namespace fs = std::filesystem;
using namespace kiln;

struct SpotNet : nn::Module {
  SpotNet() : Module("SpotNet") {
    stem = register_module(
        "stem", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(1, 8, 3).padding(1).bias(false)));
    bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(8));
    conv = register_module(
        "conv", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(8, 8, 3).padding(1).bias(false)));
    bn2 = register_module("bn2", std::make_shared<nn::BatchNorm2d>(8));
    head = register_module("head", std::make_shared<nn::Linear>(8, 4));
  }
  Tensor forward(const Tensor& input) override {
    Tensor x = relu((*bn1)((*stem)(input)));
    x = max_pool2d(relu(x + (*bn2)((*conv)(x))), 2);
    return (*head)(adaptive_avg_pool2d(x, 1).flatten(1));
  }
  std::shared_ptr<nn::Conv2d> stem, conv;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2;
  std::shared_ptr<nn::Linear> head;
};

// A batch of 12x12 images, each dark but for a bright 3x3 spot in one quadrant: the label.
std::pair<Tensor, Tensor> make_batch(int64_t n, uint32_t seed) {
  Tensor x = zeros({n, 1, 12, 12});
  Tensor y = zeros({n}, TensorOptions(DType::Int64));
  float* px = x.data_ptr<float>();
  int64_t* py = y.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    const int64_t q = (seed >> 16) % 4, r = (q / 2) * 6 + 1 + (seed >> 8) % 3,
                  c = (q % 2) * 6 + 1 + (seed >> 4) % 3;
    py[i] = q;
    for (int64_t dr = 0; dr < 3; ++dr)
      for (int64_t dc = 0; dc < 3; ++dc) px[i * 144 + (r + dr) * 12 + c + dc] = 1.0f;
  }
  return {x, y};
}

double max_abs_diff(const float* a, const Tensor& b) {
  double d = 0;
  for (int64_t i = 0; i < b.numel(); ++i)
    d = std::max(d, std::fabs(double(a[i]) - b.data_ptr<float>()[i]));
  return d;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s WEIGHTS.safetensors OUT_DIR\n", argv[0]);
    return 2;
  }
  const fs::path out_dir = argv[2];
  try {
    fs::create_directories(out_dir);
    SpotNet model;
    // 1. Weights: PyTorch's names; a checkpoint without num_batches_tracked loads (strict).
    nn::StateDict weights;
    for (auto& [name, t] : read_safetensors(argv[1])) weights.insert(name, t);
    model.load_state_dict(weights);
    std::printf("loaded %zu tensors from %s\n", weights.size(), argv[1]);

    // 2. Fine-tune a few steps.
    optim::SGD opt(model.parameters(), optim::SGDOptions(0.1).momentum(0.9));
    model.train();
    double first = 0, last = 0;
    for (int step = 0; step < 60; ++step) {
      auto [x, y] = make_batch(32, 1234u + step);
      Tensor loss = cross_entropy(model(x), y);
      opt.zero_grad();
      loss.backward();
      opt.step();
      (step == 0 ? first : last) = loss.item<double>();
      if (step % 20 == 0) std::printf("step %2d  loss %.4f\n", step, loss.item<double>());
    }
    std::printf("train: loss %.4f -> %.4f\n", first, last);
    if (!(last < first)) throw std::runtime_error("training did not reduce the loss");

    // 3. Trace in eval mode, save the artifact, compile it ahead of time.
    model.eval();
    auto [x, y] = make_batch(4, 99u);
    Tensor expected = model(x);
    jit::TracedFunction traced = jit::trace(model, {x});
    const std::string artifact = (out_dir / "spotnet.kiln").string();
    jit::save(traced, artifact);
    jit::AotOptions aot;
    aot.output = (out_dir / "spotnet").string();
    aot.runtime_dir = KILN_EXAMPLE_RUNTIME_DIR;
    jit::compile_aot(traced, aot);
    std::printf("saved %s and compiled %s\n", artifact.c_str(), aot.output.c_str());

    // 4. Run both: the artifact on the runtime, the executable on .npy files.
    auto loaded = rt::Model::load(artifact);
    rt::Session session(loaded);
    Tensor xc = x.contiguous();
    auto outs = session.run({xc.impl()});
    const double d_runtime = max_abs_diff(outs[0]->data_ptr<float>(), expected);
    write_npy((out_dir / "x.npy").string(), x);
    const std::string cmd = "\"" + aot.output + "\" \"" + (out_dir / "x.npy").string() +
                            "\" -o \"" + (out_dir / "y.npy").string() + "\"";
    if (std::system(cmd.c_str()) != 0) throw std::runtime_error("the AOT executable failed");
    Tensor from_exe = read_npy((out_dir / "y.npy").string());
    const double d_exe = max_abs_diff(from_exe.data_ptr<float>(), expected);
    std::printf("max |difference| from eager: runtime %.3g, AOT executable %.3g\n", d_runtime,
                d_exe);
    if (d_runtime > 1e-4 || d_exe > 1e-4) throw std::runtime_error("outputs differ from eager");
    std::printf("custom_model ok\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "custom_model: %s\n", e.what());
    return 1;
  }
}
