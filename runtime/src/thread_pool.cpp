#include "kiln/runtime/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln {
namespace {

thread_local bool tls_in_parallel = false;

int default_threads() {
  if (const char* env = std::getenv("KILN_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n >= 1) return n;
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

// One job at a time: callers serialize on `submit_mu`. Chunks are claimed with an atomic counter
// so uneven chunks balance themselves.
class Pool {
 public:
  explicit Pool(int threads) { resize(threads); }
  ~Pool() { stop(); }

  int size() const { return threads_; }

  void resize(int threads) {
    std::lock_guard<std::mutex> submit(submit_mu_);
    stop();
    threads_ = std::max(1, threads);
    stopping_ = false;
    for (int i = 1; i < threads_; ++i) workers_.emplace_back([this] { worker_loop(); });
  }

  void run(int64_t begin, int64_t end, int64_t grain, const RangeFn& fn) {
    std::lock_guard<std::mutex> submit(submit_mu_);
    // A worker that woke late for the previous job may still be leaving work(): let it go before
    // the job's fields change.
    while (active_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
    const int64_t n = end - begin;
    const int64_t max_chunks = std::max<int64_t>(1, n / std::max<int64_t>(grain, 1));
    const int64_t chunks = std::min<int64_t>(max_chunks, threads_ * 4);
    fn_ = &fn;
    begin_ = begin;
    end_ = end;
    chunk_ = (n + chunks - 1) / chunks;
    num_chunks_ = (n + chunk_ - 1) / chunk_;
    next_.store(0, std::memory_order_relaxed);
    pending_.store(num_chunks_, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++generation_;
    }
    cv_.notify_all();
    tls_in_parallel = true;
    work();
    tls_in_parallel = false;
    // Wait for the chunks other threads claimed.
    while (pending_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
    fn_ = nullptr;
  }

 private:
  void work() {
    for (;;) {
      const int64_t c = next_.fetch_add(1, std::memory_order_relaxed);
      if (c >= num_chunks_) return;
      const int64_t b = begin_ + c * chunk_;
      const int64_t e = std::min(end_, b + chunk_);
      (*fn_)(b, e);
      pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  void worker_loop() {
    tls_in_parallel = true;
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || generation_ != seen; });
        if (stopping_) return;
        seen = generation_;
        active_.fetch_add(1, std::memory_order_relaxed);
      }
      work();
      active_.fetch_sub(1, std::memory_order_release);
    }
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  std::mutex submit_mu_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::thread> workers_;
  int threads_ = 1;
  bool stopping_ = false;
  uint64_t generation_ = 0;

  const RangeFn* fn_ = nullptr;
  int64_t begin_ = 0, end_ = 0, chunk_ = 1, num_chunks_ = 0;
  std::atomic<int64_t> next_{0};
  std::atomic<int64_t> pending_{0};
  std::atomic<int> active_{0};
};

std::atomic<int> g_threads{0};

Pool& pool() {
  static Pool* p = new Pool(num_threads());  // leaked: workers must outlive static destructors
  return *p;
}

}  // namespace

int num_threads() {
  int n = g_threads.load(std::memory_order_relaxed);
  if (n == 0) {
    n = default_threads();
    g_threads.store(n, std::memory_order_relaxed);
  }
  return n;
}

void set_num_threads(int n) {
  n = std::max(1, n);
  g_threads.store(n, std::memory_order_relaxed);
  if (pool().size() != n) pool().resize(n);
}

bool in_parallel_region() { return tls_in_parallel; }

void parallel_for_impl(int64_t begin, int64_t end, int64_t grain, const RangeFn& fn) {
  Pool& p = pool();
  if (p.size() != num_threads()) p.resize(num_threads());
  p.run(begin, end, grain, fn);
}

}  // namespace kiln
