#pragma once
// The CPU allocator: 64-byte aligned blocks, cached in power-of-two size classes so that the eager
// loop's allocate/free pairs do not reach the OS. Statistics are what tests and benchmarks read to
// report peak memory.

#include <cstddef>
#include <cstdint>

namespace kiln {

struct AllocatorStats {
  int64_t bytes_in_use = 0;  // requested bytes currently handed out
  int64_t peak_bytes = 0;    // max of bytes_in_use since the last reset_peak()
  int64_t allocations = 0;   // number of allocate() calls
  int64_t cached_bytes = 0;  // bytes held in free lists, not in use
  int64_t system_bytes = 0;  // bytes currently obtained from the OS (in use + cached)
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
};

class CpuAllocator final : public Allocator {
 public:
  static constexpr size_t kAlignment = 64;

  void* allocate(size_t nbytes) override;
  void deallocate(void* ptr, size_t nbytes) override;

  AllocatorStats stats() const;
  void reset_peak();
  // Returns every cached block to the OS.
  void release_cached();
  // Blocks larger than this are never cached (they go straight back to the OS).
  void set_max_cached_block(size_t nbytes);

  static CpuAllocator& instance();
};

inline CpuAllocator& cpu_allocator() {
  return CpuAllocator::instance();
}

// Kernel scratch (im2col tiles, a fused block's intermediates): from the region lent to this
// thread, else from cpu_allocator. The artifact executor lends each instruction the arena bytes no
// tensor live at that instruction occupies: memory the previous instructions just wrote, so still
// in the caches, where a free list's block was last written a whole model run ago (MobileNetV2's
// first 28x28 block wrote 1.2 MB of such cold scratch). Blocks come off the region's top and must
// be released in reverse order (scopes do that); what does not fit goes to cpu_allocator.
void* scratch_allocate(size_t nbytes);
void scratch_deallocate(void* ptr, size_t nbytes);

// Lends [base, base + nbytes) to this thread's scratch_allocate for the lease's scope (nested
// leases stack). `base` 64-byte aligned, or null for none.
class ScratchLease {
 public:
  ScratchLease(void* base, size_t nbytes);
  ~ScratchLease();
  ScratchLease(const ScratchLease&) = delete;
  ScratchLease& operator=(const ScratchLease&) = delete;

 private:
  char *saved_base_, *saved_top_, *saved_end_;
};

// Bytes scratch_allocate has served from lent regions on any thread (tests and benchmarks).
int64_t scratch_bytes_from_leases();

}  // namespace kiln
