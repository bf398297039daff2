// `kiln demo`: train LeNet on Fashion-MNIST with a live progress bar, evaluate, save the weights,
// then trace the trained model, compile it (LLVM JIT), export it as a .kiln artifact run by the
// runtime alone, and check each against eager (outputs and latency).

#include "demo.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "kiln/data.h"
#include "kiln/kiln.h"
#include "kiln/models.h"
#include "kiln/optim.h"
#include "kiln/serialize.h"
#if KILN_HAVE_MLIR
#include "kiln/jit/compile.h"
#include "kiln/jit/quantize.h"
#include "kiln/jit/save.h"
#include "kiln/runtime/model.h"
#include "kiln/trace/trace.h"
#endif

namespace kiln::cli {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct DemoOptions {
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string out = "kiln-demo-lenet.safetensors";
  int epochs = 2;
  int64_t batch_size = 32;
  double lr = 3e-3;
  int64_t limit = 0;  // train on the first N images only (0 = all)
  int workers = 1;
  uint64_t seed = 1;
  bool quantize = false;  // also an int8 artifact (kiln::quant), its test accuracy beside float32
};

void usage() {
  std::printf(
      "usage: kiln demo [--epochs N] [--batch-size N] [--lr X] [--limit N] [--data DIR]\n"
      "                 [--out FILE] [--workers N] [--seed N] [--quantize]\n\n"
      "Trains LeNet-5 on Fashion-MNIST (Adam, cross-entropy), evaluates test accuracy, saves the\n"
      "weights as .safetensors, then traces the trained model into kiln IR, compiles it with\n"
      "LLVM, exports it as a .kiln artifact (next to --out) that the runtime runs alone, and\n"
      "checks each against eager execution. Data: Debian's dataset-fashion-mnist package\n"
      "(/usr/share/datasets/fashion-mnist).\n\n"
      "--quantize also converts the trained model to int8 (kiln::quant, calibrated on 2000\n"
      "training images), writes it next to --out as -int8.kiln and reports its test accuracy\n"
      "beside the float32 artifact's.\n");
}

// One progress line, redrawn in place on a terminal and printed every few seconds otherwise.
class Progress {
 public:
  explicit Progress(int64_t total)
      : total_(total), tty_(isatty(STDOUT_FILENO)), start_(Clock::now()) {}
  void update(int epoch, int epochs, int64_t done, double loss, double acc, bool last) {
    const double elapsed = seconds_since(start_);
    if (!last && elapsed - last_print_ < (tty_ ? 0.1 : 5.0)) return;
    last_print_ = elapsed;
    const double rate = done / std::max(elapsed, 1e-9);
    const double eta = (total_ - done) / std::max(rate, 1e-9);
    constexpr int kWidth = 28;
    const int filled = static_cast<int>(kWidth * done / std::max<int64_t>(total_, 1));
    std::string bar(filled, '#');
    bar.resize(kWidth, '.');
    std::printf(
        "%sepoch %d/%d [%s] %6lld/%lld  loss %.4f  acc %5.1f%%  %6.0f samples/s  ETA %3.0fs%s",
        tty_ ? "\r" : "", epoch, epochs, bar.c_str(), static_cast<long long>(done),
        static_cast<long long>(total_), loss, 100.0 * acc, rate, eta, tty_ && !last ? "" : "\n");
    std::fflush(stdout);
  }

 private:
  int64_t total_;
  bool tty_;
  Clock::time_point start_;
  double last_print_ = -1e9;
};

double accuracy(const Tensor& logits, const Tensor& target) {
  Tensor pred = argmax(logits, 1);
  return sum(eq(pred, target).to(DType::Float64)).item<double>() /
         static_cast<double>(target.numel());
}

}  // namespace

int demo(int argc, char** argv) {
  DemoOptions o;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) fail("demo", "option ", a, " needs a value");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      usage();
      return 0;
    } else if (a == "--epochs") {
      o.epochs = std::stoi(next());
    } else if (a == "--batch-size") {
      o.batch_size = std::stoll(next());
    } else if (a == "--lr") {
      o.lr = std::stod(next());
    } else if (a == "--limit") {
      o.limit = std::stoll(next());
    } else if (a == "--data") {
      o.data = next();
    } else if (a == "--out") {
      o.out = next();
    } else if (a == "--workers") {
      o.workers = std::stoi(next());
    } else if (a == "--seed") {
      o.seed = std::stoull(next());
    } else if (a == "--quantize") {
      o.quantize = true;
    } else {
      std::fprintf(stderr, "kiln demo: unknown option '%s'\n\n", a.c_str());
      usage();
      return 2;
    }
  }
#if !KILN_HAVE_MLIR
  KILN_CHECK(!o.quantize, "demo",
             "--quantize needs the compiler (this kiln was built without MLIR)");
#endif
  if (!std::filesystem::exists(o.data + "/train-images-idx3-ubyte.gz") &&
      !std::filesystem::exists(o.data + "/train-images-idx3-ubyte")) {
    std::fprintf(stderr,
                 "kiln demo: Fashion-MNIST not found in %s\n"
                 "  install it with:  sudo apt-get install dataset-fashion-mnist\n"
                 "  or point --data at a folder with the four IDX files.\n",
                 o.data.c_str());
    return 1;
  }

  std::printf("kiln %s demo: LeNet-5 on Fashion-MNIST, %d threads\n", version(), num_threads());
  const auto t_load = Clock::now();
  auto train = std::make_shared<data::MNIST>(o.data, data::MNIST::Mode::kTrain);
  auto test = std::make_shared<data::MNIST>(o.data, data::MNIST::Mode::kTest);
  data::transforms::Normalize normalize(0.2860, 0.3530);  // Fashion-MNIST training-set mean and std
  std::shared_ptr<const data::Dataset> train_set = train;
  if (o.limit > 0 && o.limit < train->size()) {
    train_set = std::make_shared<data::TensorDataset>(train->images().narrow(0, 0, o.limit),
                                                      train->targets().narrow(0, 0, o.limit));
  }
  std::printf("data: %lld training and %lld test images (%.2f s to load)\n",
              static_cast<long long>(train_set->size()), static_cast<long long>(test->size()),
              seconds_since(t_load));

  nn::init::manual_seed(o.seed);
  auto model = models::lenet(10);
  optim::Adam optimizer(model->parameters(), optim::AdamOptions(o.lr));
  data::DataLoader loader(
      train_set,
      {.batch_size = o.batch_size, .shuffle = true, .seed = o.seed, .num_workers = o.workers});
  // Cosine decay of the learning rate to zero over the whole run, stepped per batch.
  optim::CosineAnnealingLR schedule(optimizer, std::max<int64_t>(1, o.epochs * loader.size()));

  const auto t_train = Clock::now();
  for (int epoch = 1; epoch <= o.epochs; ++epoch) {
    model->train();
    Progress progress(train_set->size());
    int64_t seen = 0;
    double loss_avg = 0, acc_avg = 0;
    int64_t batches = 0;
    for (auto& batch : loader) {
      Tensor x = normalize(batch.data);
      Tensor logits = (*model)(x);
      Tensor loss = cross_entropy(logits, batch.target);
      optimizer.zero_grad();
      loss.backward();
      optimizer.step();
      schedule.step();
      ++batches;
      const double a = accuracy(logits, batch.target);
      // Smoothed running averages for the bar.
      const double k = batches < 20 ? 1.0 / batches : 0.05;
      loss_avg += k * (loss.item<double>() - loss_avg);
      acc_avg += k * (a - acc_avg);
      seen += batch.target.numel();
      progress.update(epoch, o.epochs, seen, loss_avg, acc_avg, seen == train_set->size());
    }
  }
  const double train_seconds = seconds_since(t_train);

  model->eval();
  Tensor test_x = normalize(test->images());
  double correct = 0;
  Tensor first_logits;
  {
    autograd::InferenceMode inference;
    const int64_t n = test_x.size(0);
    for (int64_t s = 0; s < n; s += 1000) {
      const int64_t len = std::min<int64_t>(1000, n - s);
      Tensor logits = (*model)(test_x.narrow(0, s, len));
      correct += accuracy(logits, test->targets().narrow(0, s, len)) * len;
    }
  }
  const double test_acc = correct / static_cast<double>(test_x.size(0));
  std::printf("test accuracy: %.2f%%  (training: %.1f s, %.0f samples/s)\n", 100.0 * test_acc,
              train_seconds, o.epochs * train_set->size() / train_seconds);
  write_safetensors(o.out, model->state_dict(), {{"model", "lenet"}, {"producer", "kiln demo"}});
  std::printf("weights saved to %s\n", o.out.c_str());

#if KILN_HAVE_MLIR
  // The deployment path on the trained model: trace -> reference interpreter, -> LLVM JIT, and ->
  // a .kiln artifact loaded by the runtime alone. Each is checked against eager on test images.
  jit::TraceOptions topt;
  for (const auto& [name, t] : model->named_parameters()) topt.named_captures.emplace_back(name, t);
  for (const auto& [name, t] : model->named_buffers()) topt.named_captures.emplace_back(name, t);
  auto forward = [&](const TensorList& in) { return TensorList{(*model)(in[0])}; };
  auto time_ms = [](auto&& fn) {
    fn();
    const auto t = Clock::now();
    int reps = 0;
    do {
      fn();
      ++reps;
    } while (seconds_since(t) < 0.3);
    return 1000.0 * seconds_since(t) / reps;
  };
  std::printf("\n%-40s %10s %14s\n", "LeNet forward", "ms", "max |diff|");
  const std::string artifact = std::filesystem::path(o.out).replace_extension(".kiln").string();
  for (int64_t batch : {int64_t{1}, int64_t{64}}) {
    Tensor x = test_x.narrow(0, 0, batch).contiguous();
    autograd::NoGradGuard no_grad;
    jit::TracedFunction traced = jit::trace(forward, {x}, topt);
    const auto compile_start = Clock::now();
    jit::CompiledFunction compiled = jit::compile(traced);
    const double compile_s = seconds_since(compile_start);
    jit::save(traced, artifact);
    auto loaded = rt::Model::load(artifact);
    rt::Session session(loaded);
    auto run_artifact = [&] { return Tensor(session.run({x.impl()})[0]); };

    const Tensor want = forward({x})[0];
    auto row = [&](const std::string& what, auto&& fn) {
      const double diff = amax(abs(fn() - want)).template item<double>();
      std::printf("%-40s %10.3f %14.3g\n", (what + ", batch " + std::to_string(batch)).c_str(),
                  time_ms(fn), diff);
    };
    row("eager", [&] { return forward({x})[0]; });
    row("traced (reference interpreter)", [&] { return traced({x})[0]; });
    row("compiled (LLVM JIT)", [&] { return compiled({x})[0]; });
    row("artifact (kiln_runtime)", run_artifact);
    if (batch == 1) {
      std::printf("  trace: %zu bytes of IR; JIT compile %.2f s; artifact %s: %llu bytes\n",
                  traced.str().size(), compile_s, artifact.c_str(),
                  static_cast<unsigned long long>(std::filesystem::file_size(artifact)));
    }
  }
  // The artifact classifies the whole test set as eager does.
  {
    autograd::NoGradGuard no_grad;
    const int64_t batch = 500;
    Tensor x0 = test_x.narrow(0, 0, batch).contiguous();
    jit::save(jit::trace(forward, {x0}, topt), artifact);
    rt::Session session(rt::Model::load(artifact));
    int64_t agree = 0, right = 0;
    for (int64_t i = 0; i + batch <= test_x.size(0); i += batch) {
      Tensor x = test_x.narrow(0, i, batch).contiguous();
      Tensor got = argmax(Tensor(session.run({x.impl()})[0]), 1);
      Tensor ref = argmax(forward({x})[0], 1);
      agree += sum(eq(got, ref)).item<int64_t>();
      right += sum(eq(got, test->targets().narrow(0, i, batch))).item<int64_t>();
    }
    const int64_t n = test_x.size(0) / batch * batch;
    std::printf("artifact test accuracy: %.2f%% (same class as eager on %lld of %lld images)\n",
                100.0 * right / n, static_cast<long long>(agree), static_cast<long long>(n));
    if (o.quantize) {
      // Post-training int8: calibrated on training images, measured on the test set.
      const auto t_quant = Clock::now();
      quant::Prepared prepared = quant::prepare(jit::trace(forward, {x0}, topt));
      const Tensor train_x = normalize(train->images().narrow(0, 0, 4 * batch));
      for (int64_t i = 0; i < 4; ++i)
        prepared.calibrate({train_x.narrow(0, i * batch, batch).contiguous()});
      const std::string int8_path =
          std::filesystem::path(o.out).replace_extension("").string() + "-int8.kiln";
      jit::save(quant::convert(std::move(prepared)), int8_path);
      const double quant_s = seconds_since(t_quant);
      rt::Session q(rt::Model::load(int8_path));
      int64_t q_right = 0, q_agree = 0;
      for (int64_t i = 0; i + batch <= test_x.size(0); i += batch) {
        Tensor x = test_x.narrow(0, i, batch).contiguous();
        Tensor got = argmax(Tensor(q.run({x.impl()})[0]), 1);
        q_agree += sum(eq(got, argmax(Tensor(session.run({x.impl()})[0]), 1))).item<int64_t>();
        q_right += sum(eq(got, test->targets().narrow(0, i, batch))).item<int64_t>();
      }
      std::printf(
          "int8 artifact test accuracy: %.2f%% (float32 %.2f%%, %+.2f points; same class "
          "on %lld of %lld images); %s: %llu bytes vs %llu; quantized in %.2f s\n",
          100.0 * q_right / n, 100.0 * right / n, 100.0 * (q_right - right) / n,
          static_cast<long long>(q_agree), static_cast<long long>(n), int8_path.c_str(),
          static_cast<unsigned long long>(std::filesystem::file_size(int8_path)),
          static_cast<unsigned long long>(std::filesystem::file_size(artifact)), quant_s);
    }
  }
#endif
  return test_acc > 0 ? 0 : 1;
}

}  // namespace kiln::cli
