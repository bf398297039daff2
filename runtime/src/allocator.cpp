#include "kiln/runtime/allocator.h"

#include <atomic>
#include <bit>
#include <cstdlib>
#include <mutex>
#include <new>
#include <vector>

namespace kiln {
namespace {

// Size classes: 64 B, then four classes per power of two (at most 25% slack).
size_t class_size(size_t n) {
  if (n <= 64) return 64;
  const size_t p = std::bit_width(n - 1) - 1;  // 2^p < n <= 2^(p+1)
  const size_t step = size_t{1} << (p >= 2 ? p - 2 : 0);
  return ((n + step - 1) / step) * step;
}

size_t class_index(size_t cls) {
  if (cls <= 64) return 0;
  const size_t p = std::bit_width(cls - 1) - 1;
  const size_t step = size_t{1} << (p - 2);
  const size_t k = (cls - (size_t{1} << p)) / step;  // 1..4
  return 1 + (p - 6) * 4 + (k - 1);
}

struct State {
  std::mutex mu;
  std::vector<std::vector<void*>> free_lists = std::vector<std::vector<void*>>(256);
  AllocatorStats stats;
  size_t max_cached_block = size_t{1} << 30;
};

State& state() {
  static State* s = new State();  // never destroyed: storages may outlive static destructors
  return *s;
}

}  // namespace

void* CpuAllocator::allocate(size_t nbytes) {
  State& s = state();
  // Rounding up to a size class must not wrap (a size from a corrupt file near SIZE_MAX would
  // become a tiny block): such a request is out of memory anyway.
  if (nbytes > (size_t{1} << 62)) throw std::bad_alloc();
  const size_t cls = class_size(nbytes == 0 ? 1 : nbytes);
  const bool cacheable = cls <= s.max_cached_block;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.stats.allocations++;
    s.stats.bytes_in_use += static_cast<int64_t>(nbytes);
    if (s.stats.bytes_in_use > s.stats.peak_bytes) s.stats.peak_bytes = s.stats.bytes_in_use;
    if (cacheable) {
      auto& list = s.free_lists[class_index(cls)];
      if (!list.empty()) {
        void* p = list.back();
        list.pop_back();
        s.stats.cached_bytes -= static_cast<int64_t>(cls);
        return p;
      }
    }
    s.stats.system_bytes += static_cast<int64_t>(cls);
  }
  // aligned_alloc requires a size that is a multiple of the alignment (C11).
  void* p = std::aligned_alloc(kAlignment, (cls + kAlignment - 1) / kAlignment * kAlignment);
  if (!p) {
    std::lock_guard<std::mutex> lock(s.mu);
    s.stats.bytes_in_use -= static_cast<int64_t>(nbytes);
    s.stats.system_bytes -= static_cast<int64_t>(cls);
    throw std::bad_alloc();
  }
  return p;
}

void CpuAllocator::deallocate(void* ptr, size_t nbytes) {
  if (!ptr) return;
  State& s = state();
  const size_t cls = class_size(nbytes == 0 ? 1 : nbytes);
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.stats.bytes_in_use -= static_cast<int64_t>(nbytes);
    if (cls <= s.max_cached_block) {
      s.free_lists[class_index(cls)].push_back(ptr);
      s.stats.cached_bytes += static_cast<int64_t>(cls);
      return;
    }
    s.stats.system_bytes -= static_cast<int64_t>(cls);
  }
  std::free(ptr);
}

AllocatorStats CpuAllocator::stats() const {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.stats;
}

void CpuAllocator::reset_peak() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.stats.peak_bytes = s.stats.bytes_in_use;
}

void CpuAllocator::release_cached() {
  State& s = state();
  std::vector<void*> to_free;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    for (auto& list : s.free_lists) {
      to_free.insert(to_free.end(), list.begin(), list.end());
      list.clear();
    }
    s.stats.system_bytes -= s.stats.cached_bytes;
    s.stats.cached_bytes = 0;
  }
  for (void* p : to_free) std::free(p);
}

void CpuAllocator::set_max_cached_block(size_t nbytes) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.max_cached_block = nbytes;
}

namespace {

// This thread's lent region: blocks are taken from `top` up to `end`.
struct Lease {
  char* base = nullptr;
  char* top = nullptr;
  char* end = nullptr;
};
thread_local Lease tls_lease;
std::atomic<int64_t> lease_bytes{0};

constexpr size_t round_block(size_t n) {
  return (n + CpuAllocator::kAlignment - 1) / CpuAllocator::kAlignment * CpuAllocator::kAlignment;
}

}  // namespace

void* scratch_allocate(size_t nbytes) {
  Lease& l = tls_lease;
  if (l.top && nbytes <= static_cast<size_t>(l.end - l.top) &&
      round_block(nbytes) <= static_cast<size_t>(l.end - l.top)) {
    char* p = l.top;
    l.top += round_block(nbytes);
    lease_bytes.fetch_add(static_cast<int64_t>(nbytes), std::memory_order_relaxed);
    return p;
  }
  return cpu_allocator().allocate(nbytes);
}

// A block must go back under the lease that lent it: the executor's leases (one per instruction)
// never nest, and a nested lease's scope holds only its own blocks' lifetimes (ScratchLease
// restores the outer lease's top when it ends).
void scratch_deallocate(void* ptr, size_t nbytes) {
  Lease& l = tls_lease;
  char* p = static_cast<char*>(ptr);
  if (l.base && p >= l.base && p < l.end) {
    // The top block (scopes release in reverse order) goes back; another leaves its bytes taken
    // until the lease ends.
    if (p + round_block(nbytes) == l.top) l.top = p;
    return;
  }
  cpu_allocator().deallocate(ptr, nbytes);
}

ScratchLease::ScratchLease(void* base, size_t nbytes)
    : saved_base_(tls_lease.base), saved_top_(tls_lease.top), saved_end_(tls_lease.end) {
  char* b = static_cast<char*>(base);
  tls_lease = b ? Lease{b, b, b + nbytes} : Lease{};
}

ScratchLease::~ScratchLease() {
  tls_lease = Lease{saved_base_, saved_top_, saved_end_};
}

int64_t scratch_bytes_from_leases() {
  return lease_bytes.load(std::memory_order_relaxed);
}

CpuAllocator& CpuAllocator::instance() {
  static CpuAllocator a;
  return a;
}

}  // namespace kiln
