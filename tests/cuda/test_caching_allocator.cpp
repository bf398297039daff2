// The caching allocator's host-side logic against a fake device: no GPU needed.

#include "kiln/runtime/cuda/caching_allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "kiln/runtime/error.h"

namespace kiln::cuda {
namespace {

constexpr size_t KiB = size_t{1} << 10;
constexpr size_t MiB = size_t{1} << 20;

// Hands out 2 MiB-aligned addresses from a counter, with a gap after each segment so that two
// segments are never contiguous (a merge across segments would show as an overlap or a bad free).
// Refuses what would exceed `capacity`, and checks that every free names a live segment with the
// size it was handed out with.
class FakeSource : public DeviceMemorySource {
 public:
  explicit FakeSource(size_t capacity = size_t{1} << 40) : capacity_(capacity) {}
  ~FakeSource() override { EXPECT_TRUE(live_.empty()) << live_.size() << " segments leaked"; }

  DevicePtr allocate(size_t nbytes) override {
    requests.push_back(nbytes);
    if (used_ + nbytes > capacity_) {
      ++refused;
      return 0;
    }
    const DevicePtr ptr = next_;
    next_ += (nbytes + 2 * MiB - 1) / (2 * MiB) * (2 * MiB) + 2 * MiB;
    live_[ptr] = nbytes;
    used_ += nbytes;
    return ptr;
  }
  void free(DevicePtr ptr, size_t nbytes) override {
    auto it = live_.find(ptr);
    if (it == live_.end()) {
      ADD_FAILURE() << "free of a segment the source did not hand out: " << ptr;
      return;
    }
    EXPECT_EQ(it->second, nbytes) << "free with the wrong size of segment " << ptr;
    used_ -= it->second;
    live_.erase(it);
  }
  std::string describe_memory() override {
    return std::to_string(capacity_ - used_) + " bytes free of fake " + std::to_string(capacity_);
  }

  size_t used() const { return used_; }
  const std::map<DevicePtr, size_t>& live() const { return live_; }
  // Whether [ptr, ptr + nbytes) lies inside one live segment.
  bool contains(DevicePtr ptr, size_t nbytes) const {
    auto it = live_.upper_bound(ptr);
    if (it == live_.begin()) return false;
    --it;
    return ptr + nbytes <= it->first + it->second;
  }

  std::vector<size_t> requests;  // every allocate() call's size, failed ones included
  int64_t refused = 0;           // allocate() calls that returned 0

 private:
  size_t capacity_;
  size_t used_ = 0;
  DevicePtr next_ = DevicePtr{1} << 32;
  std::map<DevicePtr, size_t> live_;
};

TEST(CudaCachingAllocator, RoundSize) {
  EXPECT_EQ(CachingAllocator::round_size(0), 512u);
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(511), 512u);
  EXPECT_EQ(CachingAllocator::round_size(512), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);
  EXPECT_EQ(CachingAllocator::round_size(1000), 1024u);
  EXPECT_EQ(CachingAllocator::round_size(4097), 4608u);
  EXPECT_EQ(CachingAllocator::round_size(MiB), 1048576u);
  EXPECT_EQ(CachingAllocator::round_size(MiB + 1), 1049088u);
  EXPECT_EQ(CachingAllocator::round_size(3 * MiB + 100), 3146240u);
}

TEST(CudaCachingAllocator, ZeroBytesAndNullFree) {
  FakeSource source;
  CachingAllocator alloc(source);
  EXPECT_EQ(alloc.allocate(0), 0u);
  alloc.free(0);
  const CachingAllocatorStats s = alloc.stats();
  EXPECT_EQ(s.allocations, 0);
  EXPECT_EQ(s.reserved_bytes, 0);
  EXPECT_TRUE(source.requests.empty());
}

TEST(CudaCachingAllocator, ReusesFreedBlock) {
  FakeSource source;
  CachingAllocator alloc(source);
  const DevicePtr a = alloc.allocate(1000);
  alloc.free(a);
  const DevicePtr b = alloc.allocate(1000);
  EXPECT_EQ(b, a);
  EXPECT_EQ(source.requests.size(), 1u);
  const CachingAllocatorStats s = alloc.stats();
  EXPECT_EQ(s.source_allocations, 1);
  EXPECT_EQ(s.allocations, 2);
  EXPECT_EQ(s.allocated_bytes, 1024);
  EXPECT_EQ(s.requested_bytes, 1000);
  alloc.free(b);
}

TEST(CudaCachingAllocator, SmallAllocationsShareOneSegment) {
  FakeSource source;
  CachingAllocator alloc(source);
  const DevicePtr a = alloc.allocate(1000);
  const DevicePtr b = alloc.allocate(5000);
  ASSERT_EQ(source.requests, std::vector<size_t>{2 * MiB});
  EXPECT_NE(a, b);
  // [a, a + 1024) and [b, b + 5120) are disjoint and both inside the one segment.
  EXPECT_TRUE(a + 1024 <= b || b + 5120 <= a);
  EXPECT_TRUE(source.contains(a, 1024));
  EXPECT_TRUE(source.contains(b, 5120));
  const CachingAllocatorStats s = alloc.stats();
  EXPECT_EQ(s.reserved_bytes, static_cast<int64_t>(2 * MiB));
  EXPECT_EQ(s.segments, 1);
  EXPECT_EQ(s.allocated_bytes, 1024 + 5120);
  alloc.free(a);
  alloc.free(b);
}

TEST(CudaCachingAllocator, CoalescesFreeNeighbours) {
  FakeSource source;
  CachingAllocator alloc(source);
  // Small pool: 512 KiB + 512 KiB + 1 MiB fill the 2 MiB segment; freeing the first two (the
  // second first, so it merges with its next neighbour) leaves one free 1 MiB block.
  const DevicePtr a = alloc.allocate(512 * KiB);
  const DevicePtr b = alloc.allocate(512 * KiB);
  const DevicePtr c = alloc.allocate(MiB);
  EXPECT_EQ(source.requests.size(), 1u);
  alloc.free(b);
  alloc.free(a);
  EXPECT_EQ(alloc.allocate(MiB), a);
  EXPECT_EQ(source.requests.size(), 1u);

  // Large pool: two 3 MiB blocks split off a 20 MiB segment; once both are free (each merging
  // with its free neighbours) the whole segment is one block and a 20 MiB request fits in it.
  const DevicePtr x = alloc.allocate(3 * MiB);
  const DevicePtr y = alloc.allocate(3 * MiB);
  ASSERT_EQ(source.requests.size(), 2u);
  EXPECT_EQ(source.requests[1], 20 * MiB);
  alloc.free(x);
  alloc.free(y);
  EXPECT_EQ(alloc.allocate(20 * MiB), x);
  EXPECT_EQ(source.requests.size(), 2u);
  EXPECT_EQ(alloc.stats().allocated_bytes, static_cast<int64_t>(MiB + MiB + 20 * MiB));
  alloc.free(x);
  alloc.free(c);
  alloc.free(a);
  alloc.empty_cache();
  EXPECT_TRUE(source.live().empty());
}

TEST(CudaCachingAllocator, StreamsDoNotShareFreeBlocks) {
  FakeSource source;
  CachingAllocator alloc(source);
  const DevicePtr a = alloc.allocate(1000, /*stream=*/1);
  alloc.free(a);
  // Stream 2 gets neither the freed block nor the rest of stream 1's segment [a, a + 2 MiB).
  const DevicePtr b = alloc.allocate(1000, /*stream=*/2);
  EXPECT_TRUE(b < a || b >= a + 2 * MiB);
  EXPECT_EQ(source.requests.size(), 2u);
  EXPECT_EQ(alloc.allocate(1000, /*stream=*/1), a);
  EXPECT_EQ(source.requests.size(), 2u);
  alloc.free(b);
  EXPECT_EQ(alloc.allocate(1000, /*stream=*/2), b);
  EXPECT_EQ(source.requests.size(), 2u);
  alloc.free(a);
  alloc.free(b);
}

TEST(CudaCachingAllocator, EmptyCacheReturnsOnlyFreeSegments) {
  FakeSource source;
  CachingAllocator alloc(source);
  const DevicePtr a = alloc.allocate(1000);      // 2 MiB small segment, stays in use
  const DevicePtr b = alloc.allocate(3 * MiB);   // 20 MiB large segment
  const DevicePtr c = alloc.allocate(50 * MiB);  // 50 MiB large segment
  const DevicePtr d = alloc.allocate(2000);      // shares a's segment
  EXPECT_EQ(alloc.stats().reserved_bytes, static_cast<int64_t>(72 * MiB));
  alloc.free(b);
  alloc.free(c);
  alloc.free(d);
  alloc.empty_cache();
  ASSERT_EQ(source.live().size(), 1u);
  EXPECT_EQ(source.live().begin()->second, 2 * MiB);
  EXPECT_TRUE(source.contains(a, 1024));
  CachingAllocatorStats s = alloc.stats();
  EXPECT_EQ(s.reserved_bytes, static_cast<int64_t>(2 * MiB));
  EXPECT_EQ(s.segments, 1);
  EXPECT_EQ(s.allocated_bytes, 1024);
  EXPECT_EQ(s.requested_bytes, 1000);
  alloc.free(a);
  alloc.empty_cache();
  EXPECT_TRUE(source.live().empty());
  s = alloc.stats();
  EXPECT_EQ(s.reserved_bytes, 0);
  EXPECT_EQ(s.segments, 0);
  EXPECT_EQ(s.allocated_bytes, 0);
  EXPECT_EQ(s.requested_bytes, 0);
  EXPECT_EQ(s.peak_reserved_bytes, static_cast<int64_t>(72 * MiB));
}

TEST(CudaCachingAllocator, BlocksAre512ByteAligned) {
  FakeSource source;
  CachingAllocator alloc(source);
  std::vector<DevicePtr> ptrs;
  for (size_t n : {1u, 3u, 511u, 513u, 1000u, 4097u, 65537u, 1048577u, 3000001u, 12345678u}) {
    ptrs.push_back(alloc.allocate(n));
    EXPECT_EQ(ptrs.back() % 512, 0u) << n << " bytes";
  }
  for (DevicePtr p : ptrs) alloc.free(p);
}

TEST(CudaCachingAllocator, SegmentSizes) {
  FakeSource source;
  CachingAllocator alloc(source);
  // One stream each, so that none is served from the rest of an earlier segment.
  std::vector<DevicePtr> ptrs;
  ptrs.push_back(alloc.allocate(100, 1));             // small: 2 MiB
  ptrs.push_back(alloc.allocate(3 * MiB, 2));         // large below 10 MiB: 20 MiB
  ptrs.push_back(alloc.allocate(50 * MiB, 3));        // 50 MiB
  ptrs.push_back(alloc.allocate(11 * MiB + 1, 4));    // rounded up to 2 MiB: 12 MiB
  ptrs.push_back(alloc.allocate(10 * MiB - 512, 5));  // just below 10 MiB: 20 MiB
  EXPECT_EQ(source.requests,
            (std::vector<size_t>{2 * MiB, 20 * MiB, 50 * MiB, 12 * MiB, 20 * MiB}));
  EXPECT_EQ(alloc.stats().reserved_bytes, static_cast<int64_t>(104 * MiB));
  for (DevicePtr p : ptrs) alloc.free(p);
}

TEST(CudaCachingAllocator, LargePoolSplitsOnlyAboveOneMiB) {
  FakeSource source;
  CachingAllocator alloc(source);
  const DevicePtr a = alloc.allocate(3 * MiB);   // 20 MiB segment, 17 MiB rest stays free
  const DevicePtr b = alloc.allocate(16 * MiB);  // from the rest; 1 MiB left is not split off
  EXPECT_EQ(source.requests.size(), 1u);
  EXPECT_EQ(b, a + 3 * MiB);
  const DevicePtr c = alloc.allocate(MiB + 512);  // so this needs a new segment
  EXPECT_EQ(source.requests.size(), 2u);
  alloc.free(b);
  alloc.free(c);
  // A 15 MiB request leaves 2 MiB, which is split off and serves a 2 MiB request in place.
  const DevicePtr d = alloc.allocate(15 * MiB);
  EXPECT_EQ(d, b);
  EXPECT_EQ(alloc.allocate(2 * MiB), b + 15 * MiB);
  EXPECT_EQ(source.requests.size(), 2u);
  alloc.free(a);
  alloc.free(d);
  alloc.free(b + 15 * MiB);
}

TEST(CudaCachingAllocator, OutOfMemoryThrowsAndStaysUsable) {
  FakeSource source(64 * MiB);
  CachingAllocator alloc(source);
  const DevicePtr a = alloc.allocate(50 * MiB);
  try {
    alloc.allocate(30 * MiB);
    FAIL() << "expected out of memory";
  } catch (const kiln::Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.op(), "cuda allocator");
    EXPECT_NE(what.find("cuda allocator"), std::string::npos) << what;
    EXPECT_NE(what.find("31457280"), std::string::npos) << what;  // the request
    EXPECT_NE(what.find("52428800"), std::string::npos) << what;  // allocated and reserved
    EXPECT_NE(what.find(source.describe_memory()), std::string::npos) << what;
  }
  CachingAllocatorStats s = alloc.stats();
  EXPECT_EQ(s.out_of_memory, 1);
  EXPECT_EQ(s.allocations, 1);
  EXPECT_EQ(s.reserved_bytes, static_cast<int64_t>(50 * MiB));
  // Still usable: what fits is served, and the live block is untouched.
  const DevicePtr b = alloc.allocate(MiB);
  EXPECT_NE(b, 0u);
  alloc.free(a);
  alloc.free(b);
  s = alloc.stats();
  EXPECT_EQ(s.allocated_bytes, 0);
  EXPECT_EQ(s.allocations, 2);
}

TEST(CudaCachingAllocator, OutOfMemoryRetriesAfterFreeingCachedSegments) {
  FakeSource source(64 * MiB);
  CachingAllocator alloc(source);
  alloc.free(alloc.allocate(50 * MiB));
  alloc.free(alloc.allocate(1000, /*stream=*/7));
  EXPECT_EQ(source.used(), 52 * MiB);
  // No free block of stream 1 fits and 30 MiB more exceed the capacity: the cached segments of
  // every stream go back and the retry succeeds.
  const DevicePtr a = alloc.allocate(30 * MiB, /*stream=*/1);
  EXPECT_NE(a, 0u);
  ASSERT_EQ(source.live().size(), 1u);
  EXPECT_EQ(source.live().begin()->second, 30 * MiB);
  const CachingAllocatorStats s = alloc.stats();
  EXPECT_EQ(s.out_of_memory, 0);
  EXPECT_EQ(s.reserved_bytes, static_cast<int64_t>(30 * MiB));
  EXPECT_EQ(s.segments, 1);
  alloc.free(a);
}

TEST(CudaCachingAllocator, FreeOfUnknownPointerThrows) {
  FakeSource source;
  CachingAllocator alloc(source);
  const DevicePtr a = alloc.allocate(4096);
  EXPECT_THROW(alloc.free(0x1234), kiln::Error);
  try {
    alloc.free(a + 512);  // inside a block, not its start
    FAIL() << "expected an error";
  } catch (const kiln::Error& e) {
    EXPECT_EQ(e.op(), "cuda allocator");
    char hex[32];
    std::snprintf(hex, sizeof hex, "0x%llx", static_cast<unsigned long long>(a + 512));
    EXPECT_NE(std::string(e.what()).find(hex), std::string::npos) << e.what();
  }
  alloc.free(a);
  EXPECT_THROW(alloc.free(a), kiln::Error);  // twice
  // Nothing was corrupted: the block is reused as usual.
  EXPECT_EQ(alloc.allocate(4096), a);
  EXPECT_EQ(alloc.stats().allocated_bytes, 4096);
  alloc.free(a);
}

TEST(CudaCachingAllocator, PeakStatsAndReset) {
  FakeSource source;
  CachingAllocator alloc(source);
  const DevicePtr a = alloc.allocate(3 * MiB);
  const DevicePtr b = alloc.allocate(MiB);
  CachingAllocatorStats s = alloc.stats();
  EXPECT_EQ(s.peak_allocated_bytes, static_cast<int64_t>(4 * MiB));
  EXPECT_EQ(s.peak_reserved_bytes, static_cast<int64_t>(22 * MiB));
  alloc.free(a);
  alloc.empty_cache();  // the 20 MiB segment still holds nothing else: it goes
  s = alloc.stats();
  EXPECT_EQ(s.allocated_bytes, static_cast<int64_t>(MiB));
  EXPECT_EQ(s.reserved_bytes, static_cast<int64_t>(2 * MiB));
  EXPECT_EQ(s.peak_allocated_bytes, static_cast<int64_t>(4 * MiB));
  EXPECT_EQ(s.peak_reserved_bytes, static_cast<int64_t>(22 * MiB));
  alloc.reset_peak();
  s = alloc.stats();
  EXPECT_EQ(s.peak_allocated_bytes, static_cast<int64_t>(MiB));
  EXPECT_EQ(s.peak_reserved_bytes, static_cast<int64_t>(2 * MiB));
  const DevicePtr c = alloc.allocate(512);
  EXPECT_EQ(alloc.stats().peak_allocated_bytes, static_cast<int64_t>(MiB + 512));
  alloc.free(b);
  alloc.free(c);
  EXPECT_EQ(alloc.stats().peak_allocated_bytes, static_cast<int64_t>(MiB + 512));
}

TEST(CudaCachingAllocator, DestructorReturnsEverySegment) {
  FakeSource source;
  {
    CachingAllocator alloc(source);
    alloc.allocate(1000);
    alloc.allocate(3 * MiB);
    alloc.free(alloc.allocate(50 * MiB));
    EXPECT_EQ(source.live().size(), 3u);
  }
  EXPECT_TRUE(source.live().empty());
}

// Random allocate/free over 3 streams against a model of the live blocks.
TEST(CudaCachingAllocator, RandomizedAgainstModel) {
  struct Live {
    DevicePtr ptr;
    size_t nbytes;
    size_t rounded;
  };
  FakeSource source(256 * MiB);  // small enough to run out a few times
  CachingAllocator alloc(source);
  std::mt19937_64 rng(20240611);
  std::vector<Live> live;
  int64_t ooms = 0;
  auto check = [&](int step) {
    std::vector<Live> sorted = live;
    std::sort(sorted.begin(), sorted.end(),
              [](const Live& a, const Live& b) { return a.ptr < b.ptr; });
    int64_t allocated = 0, requested = 0;
    for (size_t i = 0; i < sorted.size(); ++i) {
      const Live& l = sorted[i];
      ASSERT_EQ(l.ptr % 512, 0u) << "step " << step;
      ASSERT_TRUE(source.contains(l.ptr, l.rounded)) << "step " << step << " block " << l.ptr;
      if (i + 1 < sorted.size()) {
        ASSERT_LE(l.ptr + l.rounded, sorted[i + 1].ptr) << "step " << step << ": overlap";
      }
      allocated += static_cast<int64_t>(l.rounded);
      requested += static_cast<int64_t>(l.nbytes);
    }
    const CachingAllocatorStats s = alloc.stats();
    ASSERT_EQ(s.allocated_bytes, allocated) << "step " << step;
    ASSERT_EQ(s.requested_bytes, requested) << "step " << step;
    ASSERT_EQ(s.reserved_bytes, static_cast<int64_t>(source.used())) << "step " << step;
    ASSERT_EQ(s.segments, static_cast<int64_t>(source.live().size())) << "step " << step;
    ASSERT_EQ(s.out_of_memory, ooms) << "step " << step;
  };
  for (int step = 0; step < 4000; ++step) {
    // Allocate more often while few blocks are live, so the count hovers around 100.
    const bool do_alloc = live.empty() || rng() % 200 >= live.size();
    if (do_alloc) {
      // Log-uniform sizes from 1 B to 30 MiB: small and large pools both get plenty.
      const size_t bits = rng() % 26;
      const size_t nbytes = std::min<size_t>(1 + rng() % (size_t{1} << bits), 30 * MiB);
      const StreamId stream = rng() % 3;
      try {
        const DevicePtr p = alloc.allocate(nbytes, stream);
        ASSERT_NE(p, 0u);
        live.push_back({p, nbytes, CachingAllocator::round_size(nbytes)});
      } catch (const kiln::Error&) {
        ++ooms;
        // Before giving up the allocator returned every cached segment: each one left holds a
        // live block.
        for (const auto& segment : source.live()) {
          const DevicePtr begin = segment.first, end = segment.first + segment.second;
          const bool used = std::any_of(live.begin(), live.end(), [&](const Live& l) {
            return l.ptr >= begin && l.ptr < end;
          });
          ASSERT_TRUE(used) << "step " << step << ": cached segment " << begin << " kept";
        }
      }
    } else {
      const size_t i = rng() % live.size();
      alloc.free(live[i].ptr);
      live[i] = live.back();
      live.pop_back();
    }
    if (step % 500 == 250) alloc.empty_cache();
    check(step);
    if (testing::Test::HasFatalFailure()) return;
  }
  EXPECT_GT(alloc.stats().allocations, 1500);
  // Both outcomes of running out were exercised: a retry that succeeded after the cached
  // segments went back, and a request that failed twice and threw.
  EXPECT_GT(ooms, 0);
  EXPECT_GT(source.refused, 2 * ooms);
  for (const Live& l : live) alloc.free(l.ptr);
  live.clear();
  check(-1);
  alloc.empty_cache();
  EXPECT_TRUE(source.live().empty());
  const CachingAllocatorStats s = alloc.stats();
  EXPECT_EQ(s.reserved_bytes, 0);
  EXPECT_EQ(s.segments, 0);
}

TEST(CudaCachingAllocator, ConcurrentAllocateFree) {
  FakeSource source;
  CachingAllocator alloc(source);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&alloc, t] {
      std::mt19937 rng(t);
      std::vector<DevicePtr> mine;
      for (int i = 0; i < 2000; ++i) {
        if (mine.size() < 20 && rng() % 2) {
          mine.push_back(alloc.allocate(1 + rng() % (4 * MiB), /*stream=*/t));
        } else if (!mine.empty()) {
          alloc.free(mine.back());
          mine.pop_back();
        }
      }
      for (DevicePtr p : mine) alloc.free(p);
    });
  }
  for (std::thread& th : threads) th.join();
  const CachingAllocatorStats s = alloc.stats();
  EXPECT_EQ(s.allocated_bytes, 0);
  EXPECT_EQ(s.requested_bytes, 0);
  alloc.empty_cache();
  EXPECT_TRUE(source.live().empty());
}

}  // namespace
}  // namespace kiln::cuda
