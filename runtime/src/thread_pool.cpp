#include "kiln/runtime/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "kiln/runtime/target.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace kiln {
namespace {

thread_local bool tls_in_parallel = false;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// How long an idle worker watches for the next job before sleeping on the condition variable.
// A model run is a chain of parallel kernels microseconds apart: waking a sleeping thread costs
// 5-50 us each time (futex wake + scheduling), several times the gap. Bounded, so an idle process
// stops using the CPU within this time. KILN_SPIN_US=0 disables spinning.
std::chrono::microseconds spin_time() {
  static const std::chrono::microseconds t = [] {
    const char* env = std::getenv("KILN_SPIN_US");
    const long v = env ? std::atol(env) : 50;
    return std::chrono::microseconds(std::max(0L, v));
  }();
  return t;
}

// KILN_NUM_THREADS within [1, the CPUs this process may use]; outside it (0, negative, more
// threads than CPUs, not a number) is clamped with a warning: oversubscribed workers spin
// against each other and every parallel kernel waits for the slowest.
int default_threads() {
  const int cpus = rt::host_target().cpus;
  const char* env = std::getenv("KILN_NUM_THREADS");
  if (env == nullptr || *env == '\0') return cpus;
  char* end = nullptr;
  const long n = std::strtol(env, &end, 10);
  if (*end != '\0' || n < 1) {
    std::fprintf(stderr,
                 "kiln: KILN_NUM_THREADS=%s: expected a thread count from 1 to %d; using %d\n", env,
                 cpus, cpus);
    return cpus;
  }
  if (n > cpus) {
    std::fprintf(stderr,
                 "kiln: KILN_NUM_THREADS=%s is more than the %d CPUs this process may use; "
                 "using %d\n",
                 env, cpus, cpus);
    return cpus;
  }
  return static_cast<int>(n);
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
    stopping_.store(false);
    // The generation as of now, not as of the thread's start: a worker that starts after the
    // next job was published would otherwise take it for an old one and sit it out.
    const uint64_t now = generation_.load(std::memory_order_acquire);
    for (int i = 1; i < threads_; ++i) workers_.emplace_back([this, now] { worker_loop(now); });
  }

  void run(int64_t begin, int64_t end, int64_t grain, const RangeFn& fn) {
    std::lock_guard<std::mutex> submit(submit_mu_);
    // A worker that wakes late for the previous job must claim nothing while this job's fields
    // change: the claim counter is poisoned first, the fields written, and the counter's reset
    // publishes them (a worker that claims a chunk has acquired everything written before it).
    // seq_cst with the worker's active_ increment and claim: a worker this load does not see
    // claims from the poisoned counter (acquire alone would allow reordering on ARM).
    next_.store(kPoisoned, std::memory_order_seq_cst);
    while (active_.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
    const int64_t n = end - begin;
    const int64_t max_chunks = std::max<int64_t>(1, n / std::max<int64_t>(grain, 1));
    const int64_t chunks = std::min<int64_t>(max_chunks, threads_ * 4);
    const int64_t chunk = (n + chunks - 1) / chunks;
    fn_.store(&fn, std::memory_order_relaxed);
    begin_.store(begin, std::memory_order_relaxed);
    end_.store(end, std::memory_order_relaxed);
    chunk_.store(chunk, std::memory_order_relaxed);
    num_chunks_.store((n + chunk - 1) / chunk, std::memory_order_relaxed);
    pending_.store((n + chunk - 1) / chunk, std::memory_order_relaxed);
    next_.store(0, std::memory_order_release);
    // Spinning workers see the new generation; sleeping ones need the condition variable. The
    // seq_cst pair (generation_ here, sleepers_ in the worker) means one side always sees the
    // other: no lost wake-up.
    generation_.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard<std::mutex> lock(mu_);
      cv_.notify_all();
    }
    tls_in_parallel = true;
    work();
    tls_in_parallel = false;
    // Wait for the chunks other threads claimed (they are running: spin, then yield).
    for (int i = 0; pending_.load(std::memory_order_acquire) != 0; ++i) {
      if (i < 4096)
        cpu_relax();
      else
        std::this_thread::yield();
    }
    // A chunk's exception (a kernel's kiln::Error, bad_alloc) reaches the caller once every chunk
    // is done: thrown in a worker it would terminate the process, and leaving early would let the
    // workers run on the caller's destroyed `fn`.
    if (std::exception_ptr e = std::exchange(error_, nullptr)) std::rethrow_exception(e);
  }

 private:
  static constexpr int64_t kPoisoned = int64_t(1) << 62;  // claims from it are past every job

  void work() {
    for (;;) {
      const int64_t c = next_.fetch_add(1, std::memory_order_seq_cst);
      if (c >= num_chunks_.load(std::memory_order_relaxed)) return;
      const int64_t chunk = chunk_.load(std::memory_order_relaxed);
      const int64_t b = begin_.load(std::memory_order_relaxed) + c * chunk;
      const int64_t e = std::min(end_.load(std::memory_order_relaxed), b + chunk);
      try {
        (*fn_.load(std::memory_order_relaxed))(b, e);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mu_);
        if (!error_) error_ = std::current_exception();  // the first one; later chunks still run
      }
      pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  void worker_loop(uint64_t seen) {
    tls_in_parallel = true;
    for (;;) {
      // `active_` is raised before the generation is re-read, so a job's fields cannot change
      // under a worker that is about to work on it (run() waits for active_ == 0 first).
      active_.fetch_add(1, std::memory_order_seq_cst);
      uint64_t gen = generation_.load(std::memory_order_seq_cst);
      if (gen == seen && !stopping_.load(std::memory_order_acquire)) {
        active_.fetch_sub(1, std::memory_order_release);
        const auto until = std::chrono::steady_clock::now() + spin_time();
        for (int i = 0;; ++i) {
          gen = generation_.load(std::memory_order_acquire);
          if (gen != seen || stopping_.load(std::memory_order_acquire)) break;
          if ((i & 63) == 63 && std::chrono::steady_clock::now() >= until) break;
          cpu_relax();
        }
        if (gen == seen && !stopping_.load(std::memory_order_acquire)) {
          std::unique_lock<std::mutex> lock(mu_);
          sleepers_.fetch_add(1, std::memory_order_seq_cst);
          cv_.wait(lock, [&] {
            return stopping_.load(std::memory_order_seq_cst) ||
                   generation_.load(std::memory_order_seq_cst) != seen;
          });
          sleepers_.fetch_sub(1, std::memory_order_relaxed);
        }
        continue;  // re-enter through the active_ guard
      }
      if (stopping_.load(std::memory_order_acquire)) {
        active_.fetch_sub(1, std::memory_order_release);
        return;
      }
      seen = gen;
      work();
      active_.fetch_sub(1, std::memory_order_release);
    }
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_.store(true, std::memory_order_seq_cst);
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
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> sleepers_{0};

  // The current job (written by run() while next_ is poisoned).
  std::atomic<const RangeFn*> fn_{nullptr};
  std::atomic<int64_t> begin_{0}, end_{0}, chunk_{1}, num_chunks_{0};
  std::atomic<int64_t> next_{kPoisoned};
  std::atomic<int64_t> pending_{0};
  std::atomic<int> active_{0};
  std::mutex error_mu_;
  std::exception_ptr error_;  // the current job's first exception (read after pending_ == 0)
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

bool in_parallel_region() {
  return tls_in_parallel;
}

void parallel_for_impl(int64_t begin, int64_t end, int64_t grain, const RangeFn& fn) {
  Pool& p = pool();
  if (p.size() != num_threads()) p.resize(num_threads());
  p.run(begin, end, grain, fn);
}

}  // namespace kiln
