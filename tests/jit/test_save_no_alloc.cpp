// The executor's hot path allocates nothing: after a warm-up, Session::run_into performs no
// operator new and no CpuAllocator allocation for an MLP (arena, operand arrays, parameters are
// prepared when the session is made). Kernels with per-call scratch (conv2d) take it from the
// caching allocator's free lists: no memory is obtained from the system in a steady loop.
// Counted with a replaced global operator new.

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "kiln/jit/save.h"
#include "kiln/kiln.h"
#include "kiln/models.h"
#include "kiln/runtime/model.h"

namespace {
std::atomic<int64_t> g_news{0};
}  // namespace

void* operator new(size_t n) {
  g_news.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, size_t) noexcept {
  std::free(p);
}
// Every other unaligned form as well, so that no allocation made through a form left to the
// library (LLVM uses nothrow new) is released by the replaced delete, or the reverse: ASan
// reports such pairs as alloc-dealloc mismatches.
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  g_news.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n ? n : 1);
}
void* operator new[](size_t n) {
  return operator new(n);
}
void* operator new[](size_t n, const std::nothrow_t& t) noexcept {
  return operator new(n, t);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p, size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}

namespace kiln {
namespace {

struct Counts {
  int64_t news, allocations, system_bytes;
};
Counts now() {
  const AllocatorStats s = cpu_allocator().stats();
  return {g_news.load(), s.allocations, s.system_bytes};
}

// Exports `m` at input x, runs run_into twice (warm-up), then five times under the counters.
Counts steady_state_counts(nn::Module& m, const Tensor& x, Tensor& y) {
  m.eval();
  jit::TracedFunction traced = [&] {
    autograd::NoGradGuard no_grad;
    jit::TraceOptions options;
    for (const auto& [k, t] : m.named_parameters()) options.named_captures.push_back({k, t});
    return jit::trace([&](const TensorList& in) { return TensorList{m.forward(in[0])}; }, {x},
                      options);
  }();
  auto model = rt::Model::from_bytes(jit::save_to_bytes(traced));
  rt::Session s(model);
  const TensorImpl* in[] = {x.impl()};
  TensorImpl* out[] = {y.impl()};
  s.run_into(in, out);
  s.run_into(in, out);
  const Counts before = now();
  for (int i = 0; i < 5; ++i) s.run_into(in, out);
  const Counts after = now();
  autograd::NoGradGuard no_grad;
  EXPECT_LE(amax(abs(y - m.forward(x))).item<double>(), 1e-4);
  return {after.news - before.news, after.allocations - before.allocations,
          after.system_bytes - before.system_bytes};
}

TEST(SaveNoAlloc, MlpRunIntoAllocatesNothing) {
  manual_seed(9);
  auto m = models::mlp({64, 128, 10});
  Tensor x = randn({4, 64}), y = zeros({4, 10});
  const Counts c = steady_state_counts(*m, x, y);
  EXPECT_EQ(c.news, 0) << "operator new calls on the hot path";
  EXPECT_EQ(c.allocations, 0) << "CpuAllocator calls on the hot path";
}

TEST(SaveNoAlloc, ConvNetTakesNoMemoryFromTheSystem) {
  // One thread: with several, which worker runs which chunk (and so which per-thread scratch
  // block is first needed) depends on scheduling, and a loaded machine made this flaky.
  const int threads = num_threads();
  set_num_threads(1);
  struct Restore {
    int n;
    ~Restore() { set_num_threads(n); }
  } restore{threads};
  manual_seed(10);
  auto m = models::lenet();
  Tensor x = randn({2, 1, 28, 28}), y = zeros({2, 10});
  const Counts c = steady_state_counts(*m, x, y);
  EXPECT_EQ(c.system_bytes, 0) << "memory obtained from the system on the hot path";
  std::printf("lenet, 5 steady runs: %lld operator new, %lld cached CpuAllocator blocks\n",
              static_cast<long long>(c.news), static_cast<long long>(c.allocations));
}

}  // namespace
}  // namespace kiln
