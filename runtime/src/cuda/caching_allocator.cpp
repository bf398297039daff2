#include "kiln/runtime/cuda/caching_allocator.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <memory>
#include <vector>

#include "kiln/runtime/error.h"

namespace kiln::cuda {
namespace {

constexpr const char* kOp = "cuda allocator";
// PyTorch's constants (see the header for the policy they make).
constexpr size_t kMinBlockSize = 512;                // rounding and alignment of every block
constexpr size_t kSmallSize = size_t{1} << 20;       // largest request of the small pool
constexpr size_t kSmallBuffer = size_t{2} << 20;     // small-pool segment size
constexpr size_t kLargeBuffer = size_t{20} << 20;    // segment for large requests below...
constexpr size_t kMinLargeAlloc = size_t{10} << 20;  // ...this; larger ones get their own
constexpr size_t kRoundLarge = size_t{2} << 20;      // ...rounded up to this
// Rounding anything up to kRoundLarge cannot overflow below this, and no device has that much.
constexpr size_t kMaxRequest = std::numeric_limits<size_t>::max() / 2;

size_t round_up(size_t n, size_t m) {
  return (n + m - 1) / m * m;
}

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// "31457280 bytes (30.00 MiB)": the exact count to grep for, the unit to read.
std::string bytes(uint64_t n) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  char buf[64];
  if (u == 0) return std::to_string(n) + " bytes";
  std::snprintf(buf, sizeof buf, " bytes (%.2f %s)", v, units[u]);
  return std::to_string(n) + buf;
}

std::string stream_name(StreamId s) {
  return s == 0 ? "the default stream" : "stream " + hex(s);
}

}  // namespace

// A block of a segment. The blocks of one segment tile it and are linked by address, so free()
// finds the neighbours to merge with; a fully free segment is one block with no neighbours.
struct CachingAllocator::Block {
  DevicePtr ptr = 0;
  size_t size = 0;
  StreamId stream = 0;  // every block of a segment keeps the stream the segment was made for
  bool small = false;   // which pool it returns to
  bool in_use = false;
  size_t rounded = 0;  // while in use: round_size of the request, and the request (for stats)
  size_t requested = 0;
  Block* prev = nullptr;
  Block* next = nullptr;
};

bool CachingAllocator::BlockOrder::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return a->stream < b->stream;
  if (a->size != b->size) return a->size < b->size;
  return a->ptr < b->ptr;
}

CachingAllocator::CachingAllocator(DeviceMemorySource& source) : source_(source) {}

CachingAllocator::~CachingAllocator() {
  std::vector<Block*> blocks(small_free_.begin(), small_free_.end());
  blocks.insert(blocks.end(), large_free_.begin(), large_free_.end());
  for (const auto& [ptr, block] : in_use_) blocks.push_back(block);
  // A segment is returned whole, from its first block, with the size its blocks add up to.
  for (Block* head : blocks) {
    if (head->prev) continue;
    size_t size = 0;
    for (Block* b = head; b; b = b->next) size += b->size;
    source_.free(head->ptr, size);
  }
  for (Block* b : blocks) delete b;
}

size_t CachingAllocator::round_size(size_t nbytes) {
  KILN_CHECK(nbytes <= kMaxRequest, kOp, "expected a request of at most ", bytes(kMaxRequest),
             ", got ", bytes(nbytes));
  return nbytes < kMinBlockSize ? kMinBlockSize : round_up(nbytes, kMinBlockSize);
}

DevicePtr CachingAllocator::allocate(size_t nbytes, StreamId stream) {
  if (nbytes == 0) return 0;
  std::lock_guard<std::mutex> lock(mutex_);
  try {
    return allocate_locked(nbytes, stream);
  } catch (...) {
    ++stats_.out_of_memory;
    throw;
  }
}

DevicePtr CachingAllocator::allocate_locked(size_t nbytes, StreamId stream) {
  const size_t size = round_size(nbytes);
  const bool small = size <= kSmallSize;
  Pool& pool = small ? small_free_ : large_free_;
  Block* block = take_free(pool, stream, size);
  if (!block) block = new_segment(size, stream, small);
  size_t released = 0;
  if (!block) {
    // The cached segments of every stream and both pools may be what the device lacks.
    released = release_cached();
    block = new_segment(size, stream, small);
  }
  if (!block) {
    std::string device = source_.describe_memory();
    fail(kOp, "out of memory allocating ", bytes(nbytes), " on ", stream_name(stream),
         ": expected the device to provide a segment for it, got none even after returning ",
         bytes(released), " of cached segments; the allocator holds ",
         bytes(stats_.allocated_bytes), " allocated of ", bytes(stats_.reserved_bytes),
         " reserved in ", stats_.segments, " segments", device.empty() ? "" : "; device: ", device);
  }

  const size_t rest = block->size - size;
  if (small ? rest >= kMinBlockSize : rest > kSmallSize) {
    auto tail = std::make_unique<Block>(*block);
    tail->ptr = block->ptr + size;
    tail->size = rest;
    tail->prev = block;
    pool.insert(tail.get());
    if (block->next) block->next->prev = tail.get();
    block->next = tail.release();
    block->size = size;
  }
  in_use_.emplace(block->ptr, block);
  block->in_use = true;
  block->rounded = size;
  block->requested = nbytes;
  stats_.allocated_bytes += static_cast<int64_t>(size);
  stats_.requested_bytes += static_cast<int64_t>(nbytes);
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  ++stats_.allocations;
  return block->ptr;
}

// Best fit: the smallest free block of `stream` holding `size`, taken out of the pool.
CachingAllocator::Block* CachingAllocator::take_free(Pool& pool, StreamId stream, size_t size) {
  Block key;
  key.stream = stream;
  key.size = size;
  auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  Block* block = *it;
  pool.erase(it);
  return block;
}

// A new segment for a request of `size` (rounded) bytes as one free block outside any pool, or
// nullptr when the source has no memory.
CachingAllocator::Block* CachingAllocator::new_segment(size_t size, StreamId stream, bool small) {
  const size_t segment = small                   ? kSmallBuffer
                         : size < kMinLargeAlloc ? kLargeBuffer
                                                 : round_up(size, kRoundLarge);
  // Before the source call, so that a failing host allocation cannot leak device memory.
  auto block = std::make_unique<Block>();
  const DevicePtr ptr = source_.allocate(segment);
  if (ptr == 0) return nullptr;
  if (ptr % kMinBlockSize != 0) [[unlikely]] {
    source_.free(ptr, segment);
    fail(kOp, "the memory source returned segment ", hex(ptr), " of ", bytes(segment),
         ": expected ", kMinBlockSize, "-byte alignment");
  }
  block->ptr = ptr;
  block->size = segment;
  block->stream = stream;
  block->small = small;
  stats_.reserved_bytes += static_cast<int64_t>(segment);
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  ++stats_.segments;
  ++stats_.source_allocations;
  return block.release();
}

void CachingAllocator::free(DevicePtr ptr) {
  if (ptr == 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = in_use_.find(ptr);
  KILN_CHECK(it != in_use_.end(), kOp, "free of ", hex(ptr),
             ": expected a pointer this allocator handed out and has not freed yet, got one it "
             "does not hold (never allocated here, already freed, or not a block's start)");
  Block* block = it->second;
  in_use_.erase(it);
  stats_.allocated_bytes -= static_cast<int64_t>(block->rounded);
  stats_.requested_bytes -= static_cast<int64_t>(block->requested);
  block->in_use = false;
  block->rounded = block->requested = 0;
  Pool& pool = block->small ? small_free_ : large_free_;
  merge(block, block->prev, pool);
  merge(block, block->next, pool);
  pool.insert(block);
}

// Absorbs `neighbour` into `block` (outside the pool) when it is free. Neighbours share the
// segment, so also its stream and pool.
void CachingAllocator::merge(Block* block, Block* neighbour, Pool& pool) {
  if (!neighbour || neighbour->in_use) return;
  pool.erase(neighbour);
  if (neighbour == block->prev) {
    block->ptr = neighbour->ptr;
    block->prev = neighbour->prev;
    if (block->prev) block->prev->next = block;
  } else {
    block->next = neighbour->next;
    if (block->next) block->next->prev = block;
  }
  block->size += neighbour->size;
  delete neighbour;
}

// Returns every fully free segment to the source; the bytes returned.
size_t CachingAllocator::release_cached() {
  size_t released = 0;
  for (Pool* pool : {&small_free_, &large_free_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* block = *it;
      if (block->prev || block->next) {
        ++it;
        continue;
      }
      source_.free(block->ptr, block->size);
      released += block->size;
      stats_.reserved_bytes -= static_cast<int64_t>(block->size);
      --stats_.segments;
      it = pool->erase(it);
      delete block;
    }
  }
  return released;
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached();
}

CachingAllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

}  // namespace kiln::cuda
