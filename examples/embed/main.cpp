// A service-style program that embeds kiln_runtime alone (no LLVM, no MLIR, no eager frontend):
// load one artifact, start N worker threads with a Session each (shared weights, separate
// arenas), and serve requests from a queue. Every answer is checked against a reference session
// run on the same request afterwards.
//
//   example_embed MODEL.kiln [THREADS=4] [REQUESTS_PER_THREAD=50]

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <queue>
#include <thread>
#include <vector>

#include "kiln/runtime/model.h"

namespace {

struct Request {
  int id;
  std::vector<float> input;
  std::vector<float> answer;
};

std::vector<float> make_input(const kiln::rt::TensorSpec& spec, int id) {
  size_t n = 1;
  for (int64_t d : spec.shape) n *= static_cast<size_t>(d);
  std::vector<float> x(n);
  uint32_t s = 2654435761u * static_cast<uint32_t>(id + 1);
  for (float& v : x) {
    s = s * 1664525u + 1013904223u;
    v = static_cast<float>(s >> 8) / 16777216.0f - 0.5f;
  }
  return x;
}

std::vector<float> serve(kiln::rt::Session& session, const kiln::rt::Model& model,
                         std::vector<float>& input) {
  const kiln::rt::TensorSpec& in = model.inputs()[0];
  kiln::TensorImplPtr x = kiln::from_blob(input.data(), in.shape, in.dtype);
  std::vector<kiln::TensorImplPtr> y = session.run({x.get()});
  const float* p = y[0]->data_ptr<float>();
  return std::vector<float>(p, p + y[0]->numel());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.kiln [THREADS] [REQUESTS_PER_THREAD]\n", argv[0]);
    return 2;
  }
  const int threads = argc > 2 ? std::atoi(argv[2]) : 4;
  const int per_thread = argc > 3 ? std::atoi(argv[3]) : 50;
  try {
    auto model = kiln::rt::Model::load(argv[1]);
    if (model->inputs().size() != 1 || model->inputs()[0].dtype != kiln::DType::Float32 ||
        model->outputs()[0].dtype != kiln::DType::Float32) {
      std::fprintf(stderr, "this example serves models with one f32 input and f32 outputs\n");
      return 2;
    }
    std::vector<Request> requests;
    for (int i = 0; i < threads * per_thread; ++i) {
      requests.push_back({i, make_input(model->inputs()[0], i), {}});
    }
    std::queue<Request*> queue;
    std::mutex mu;
    std::condition_variable cv;
    bool closed = false;
    std::vector<std::thread> workers;
    std::vector<int> served(threads, 0);
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        kiln::rt::Session session(model);  // one arena per worker, created once
        for (;;) {
          Request* r = nullptr;
          {
            std::unique_lock<std::mutex> lock(mu);
            cv.wait(lock, [&] { return closed || !queue.empty(); });
            if (queue.empty()) return;
            r = queue.front();
            queue.pop();
          }
          r->answer = serve(session, *model, r->input);
          ++served[t];
        }
      });
    }
    for (Request& r : requests) {
      {
        std::lock_guard<std::mutex> lock(mu);
        queue.push(&r);
      }
      cv.notify_one();
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      closed = true;
    }
    cv.notify_all();
    for (auto& w : workers) w.join();

    kiln::rt::Session reference(model);
    int mismatches = 0;
    for (Request& r : requests) {
      if (serve(reference, *model, r.input) != r.answer) ++mismatches;
    }
    std::printf("served %zu requests on %d threads (", requests.size(), threads);
    for (int t = 0; t < threads; ++t) std::printf("%s%d", t ? " " : "", served[t]);
    std::printf(" per worker)\n");
    if (mismatches) {
      std::printf("%d answers differ from the reference session\n", mismatches);
      return 1;
    }
    std::printf("all answers agree with a reference session\n");
    return 0;
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
