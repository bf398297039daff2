#pragma once
// A stream-ordered caching allocator for CUDA device memory. cuMemAlloc/cuMemFree synchronize the
// device and cost far more than a kernel launch, so freed blocks are kept and handed out again.
// The policy is PyTorch's CUDACachingAllocator (c10/cuda/CUDACachingAllocator.cpp); the code is
// our own:
//  - sizes are rounded up to a multiple of 512 bytes, which is also every block's alignment;
//  - requests up to 1 MiB come from a small pool of 2 MiB segments, larger ones from a large pool:
//    20 MiB segments below 10 MiB, else a segment of the request rounded up to 2 MiB;
//  - best fit: the smallest free block of the same pool and stream; a block is split when the
//    rest is >= 512 bytes (small pool) or > 1 MiB (large pool), and the rest stays free;
//  - a freed block goes back to the stream it was allocated on and merges with its free
//    neighbours in its segment. Work queued on one stream runs in order, so that stream may reuse
//    the block at once; another stream may not (there is no record_stream yet: a block used on a
//    second stream must be synchronized by the caller before free());
//  - out of memory: every cached segment goes back to the device and the request is retried once.
//
// Independent of CUDA: segments come from a DeviceMemorySource (the driver in the real backend, a
// fake in the tests), so all of this is tested on machines without a GPU. Thread-safe.

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>

namespace kiln::cuda {

using DevicePtr = uint64_t;  // a device address (CUdeviceptr); 0 = none
using StreamId = uint64_t;   // an opaque stream handle value; 0 = the default stream

// Where the allocator's segments come from (cuMemAlloc/cuMemFree in the real backend).
class DeviceMemorySource {
 public:
  virtual ~DeviceMemorySource() = default;
  virtual DevicePtr allocate(size_t nbytes) = 0;  // 0 when the device is out of memory
  virtual void free(DevicePtr ptr, size_t nbytes) = 0;
  // "12.0 GiB free of 80.0 GiB" or similar, for the out-of-memory message; may be empty.
  virtual std::string describe_memory() { return {}; }
};

struct CachingAllocatorStats {
  // Rounded sizes of the requests (round_size). A large block that was not split because its
  // rest was <= 1 MiB holds up to 1 MiB more: that tail counts in reserved_bytes only.
  int64_t allocated_bytes = 0;       // bytes in blocks handed out (rounded sizes)
  int64_t requested_bytes = 0;       // bytes the callers asked for, still in use
  int64_t reserved_bytes = 0;        // bytes in segments obtained from the source
  int64_t peak_allocated_bytes = 0;  // since construction or reset_peak()
  int64_t peak_reserved_bytes = 0;
  int64_t allocations = 0;         // allocate() calls that returned memory
  int64_t segments = 0;            // segments currently held
  int64_t source_allocations = 0;  // calls to the source's allocate() that succeeded
  int64_t out_of_memory = 0;       // allocate() calls that threw
};

class CachingAllocator {
 public:
  explicit CachingAllocator(DeviceMemorySource& source);
  ~CachingAllocator();  // returns every segment to the source, blocks in use included
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least nbytes, 512-byte aligned, usable in `stream`'s order. 0 bytes -> returns 0.
  // Out of memory: frees the cached (fully free) segments, retries once, then throws kiln::Error
  // with op "cuda allocator" naming the requested bytes, the allocator's allocated/reserved bytes
  // and the source's describe_memory(); the allocator stays usable afterwards.
  DevicePtr allocate(size_t nbytes, StreamId stream = 0);
  // Returns a block to its stream's pool (coalescing with free neighbours of the same segment).
  // ptr 0: no-op. A pointer this allocator did not hand out (or freed twice): throws kiln::Error.
  void free(DevicePtr ptr);
  // Returns every segment with no block in use to the source.
  void empty_cache();
  CachingAllocatorStats stats() const;
  void reset_peak();
  // The size a request is rounded to (multiple of 512; at least 512, also for 0).
  static size_t round_size(size_t nbytes);

 private:
  struct Block;
  struct BlockOrder {
    bool operator()(const Block* a, const Block* b) const;
  };
  // Free blocks of one pool ordered by (stream, size, address): lower_bound is the best fit.
  using Pool = std::set<Block*, BlockOrder>;

  DevicePtr allocate_locked(size_t nbytes, StreamId stream);
  Block* take_free(Pool& pool, StreamId stream, size_t size);
  Block* new_segment(size_t size, StreamId stream, bool small);
  void merge(Block* block, Block* neighbour, Pool& pool);
  size_t release_cached();

  DeviceMemorySource& source_;
  mutable std::mutex mutex_;
  Pool small_free_;
  Pool large_free_;
  std::unordered_map<DevicePtr, Block*> in_use_;
  CachingAllocatorStats stats_;
};

}  // namespace kiln::cuda
