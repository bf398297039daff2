// Storage, allocator statistics, dtype conversions, tensor metadata and the thread pool.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "kiln/runtime/allocator.h"
#include "kiln/runtime/checked_math.h"
#include "kiln/runtime/dtype.h"
#include "kiln/runtime/tensor.h"
#include "kiln/runtime/thread_pool.h"

using namespace kiln;

TEST(Allocator, AlignedAndCountsBytes) {
  auto& a = cpu_allocator();
  const auto before = a.stats();
  void* p = a.allocate(1000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  auto mid = a.stats();
  EXPECT_EQ(mid.bytes_in_use - before.bytes_in_use, 1000);
  EXPECT_EQ(mid.allocations - before.allocations, 1);
  EXPECT_GE(mid.peak_bytes, mid.bytes_in_use);
  a.deallocate(p, 1000);
  EXPECT_EQ(a.stats().bytes_in_use, before.bytes_in_use);
}

// Sizes near SIZE_MAX once rounded up to a size class of a few bytes; now they are out of
// memory, and the statistics are untouched.
TEST(Allocator, HugeRequestsThrowBadAlloc) {
  auto& a = cpu_allocator();
  const auto before = a.stats();
  for (size_t n : {std::numeric_limits<size_t>::max(), std::numeric_limits<size_t>::max() - 63,
                   (size_t{1} << 63) + 1})
    EXPECT_THROW(a.allocate(n), std::bad_alloc) << n;
  EXPECT_EQ(a.stats().bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(a.stats().allocations, before.allocations);
}

// A StorageLimit refuses larger storages on its thread only, with an error naming both sizes;
// limits nest and end with their scope; borrowed memory is not counted.
TEST(Allocator, StorageLimitRefusesLargerTensorsOnItsThread) {
  {
    StorageLimit limit(4096);
    EXPECT_NO_THROW(empty(Dims{1024}, DType::Float32));  // exactly 4096 bytes
    try {
      empty(Dims{1025}, DType::Float32);
      FAIL() << "a 4100-byte tensor was allocated under a 4096-byte limit";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("4100 bytes exceeds this thread's limit of 4096"),
                std::string::npos)
          << e.what();
    }
    {
      StorageLimit inner(64);
      EXPECT_THROW(empty(Dims{17}, DType::Float32), Error);
    }
    EXPECT_NO_THROW(empty(Dims{17}, DType::Float32));  // the outer limit again
    std::thread other([] { EXPECT_NO_THROW(empty(Dims{4096}, DType::Float32)); });
    other.join();
    std::vector<float> buffer(8192);
    EXPECT_NO_THROW(from_blob(buffer.data(), Dims{8192}, DType::Float32));
  }
  EXPECT_NO_THROW(empty(Dims{1 << 20}, DType::Float32));
}

TEST(Allocator, ReusesCachedBlocksAndReleasesThem) {
  auto& a = cpu_allocator();
  void* p = a.allocate(4096);
  a.deallocate(p, 4096);
  EXPECT_GE(a.stats().cached_bytes, 4096);
  void* q = a.allocate(4000);  // same size class
  EXPECT_EQ(p, q);
  a.deallocate(q, 4000);
  a.release_cached();
  EXPECT_EQ(a.stats().cached_bytes, 0);
}

TEST(Allocator, PeakTracksMaximum) {
  auto& a = cpu_allocator();
  a.reset_peak();
  const int64_t base = a.stats().bytes_in_use;
  {
    auto t1 = empty(Dims{1000}, DType::Float32);
    auto t2 = empty(Dims{500}, DType::Float64);
    EXPECT_EQ(a.stats().bytes_in_use - base, 8000);
  }
  EXPECT_EQ(a.stats().bytes_in_use, base);
  EXPECT_EQ(a.stats().peak_bytes - base, 8000);
}

// Scratch comes off a lent region's top, 64-byte blocks, released last-in first-out; what does
// not fit, and everything outside a lease, comes from cpu_allocator; leases nest.
TEST(Allocator, ScratchFromALeaseThenTheAllocator) {
  auto& a = cpu_allocator();
  alignas(64) static char region[1024];
  const int64_t allocations = a.stats().allocations, leased = scratch_bytes_from_leases();
  void* outside = scratch_allocate(100);
  EXPECT_EQ(a.stats().allocations, allocations + 1);
  scratch_deallocate(outside, 100);
  {
    ScratchLease lease(region, sizeof region);
    void* p = scratch_allocate(100);
    void* q = scratch_allocate(64);
    EXPECT_EQ(p, region);
    EXPECT_EQ(q, region + 128);
    void* big = scratch_allocate(900);  // 832 bytes left: the allocator's
    EXPECT_TRUE(big < static_cast<void*>(region) || big >= static_cast<void*>(region + 1024));
    EXPECT_EQ(a.stats().allocations, allocations + 2);
    {
      alignas(64) static char inner[256];
      ScratchLease nested(inner, sizeof inner);
      EXPECT_EQ(scratch_allocate(200), inner);
    }
    EXPECT_EQ(scratch_allocate(64), region + 192);  // the outer lease's top, as it was
    scratch_deallocate(region + 192, 64);
    scratch_deallocate(big, 900);
    scratch_deallocate(p, 100);  // not the top: stays taken until the lease ends
    scratch_deallocate(q, 64);
    EXPECT_EQ(scratch_allocate(64), region + 128);
    EXPECT_EQ(scratch_bytes_from_leases(), leased + 100 + 64 + 200 + 64 + 64);
  }
  void* after = scratch_allocate(64);  // the lease is over
  EXPECT_TRUE(after < static_cast<void*>(region) || after >= static_cast<void*>(region + 1024));
  scratch_deallocate(after, 64);
}

TEST(DType, SizesNamesPromotion) {
  EXPECT_EQ(dtype_size(DType::BFloat16), 2u);
  EXPECT_EQ(dtype_size(DType::Int64), 8u);
  EXPECT_EQ(dtype_name(DType::Float16), "float16");
  EXPECT_EQ(promote_types(DType::Int32, DType::Float16), DType::Float16);
  EXPECT_EQ(promote_types(DType::Float16, DType::BFloat16), DType::Float32);
  EXPECT_EQ(promote_types(DType::Bool, DType::Int8), DType::Int8);
  EXPECT_EQ(promote_types(DType::Int8, DType::UInt8), DType::Int32);
  EXPECT_EQ(promote_types(DType::Int64, DType::Float32), DType::Float32);
  EXPECT_EQ(promote_types(DType::Float32, DType::Float64), DType::Float64);
}

// Reference: binary16 decoded from its fields in double precision.
static double half_reference(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 31, mant = h & 1023;
  double v;
  if (exp == 0)
    v = std::ldexp(mant, -24);
  else if (exp == 31)
    v = mant ? NAN : INFINITY;
  else
    v = std::ldexp(1024 + mant, exp - 25);
  return sign ? -v : v;
}

TEST(DType, HalfRoundTripsEveryValue) {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const double ref = half_reference(static_cast<uint16_t>(bits));
    const float f = Half::to_float(static_cast<uint16_t>(bits));
    if (std::isnan(ref)) {
      EXPECT_TRUE(std::isnan(f));
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), ref) << bits;
    ASSERT_EQ(Half::from_float(f), bits) << bits;
  }
}

TEST(DType, HalfRoundsToNearestEven) {
  // 1 + 2^-11 lies halfway between 1 and 1 + 2^-10: ties go to the even mantissa (1.0).
  EXPECT_EQ(Half::from_float(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(Half::from_float(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(Half::from_float(65520.0f), 0x7c00);  // overflows to inf
  EXPECT_EQ(Half::from_float(65504.0f), 0x7bff);
  EXPECT_EQ(Half::from_float(std::ldexp(1.0f, -25)), 0x0000);  // half of the smallest subnormal
  EXPECT_EQ(Half::from_float(std::ldexp(3.0f, -26)), 0x0001);
}

TEST(DType, BFloat16Rounding) {
  EXPECT_EQ(BFloat16::from_float(1.0f), 0x3f80);
  EXPECT_EQ(float(BFloat16(3.140625f)), 3.140625f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even.
  EXPECT_EQ(BFloat16::from_float(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_TRUE(std::isnan(float(BFloat16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(Tensor, MetadataOfEmptyAndScalar) {
  auto s = empty(Dims{}, DType::Float32);
  EXPECT_EQ(s->dim(), 0);
  EXPECT_EQ(s->numel(), 1);
  EXPECT_TRUE(s->is_contiguous());
  auto e = empty(Dims{3, 0, 2}, DType::Int64);
  EXPECT_EQ(e->numel(), 0);
  EXPECT_EQ(e->nbytes(), 0u);
  auto t = zeros(Dims{2, 3, 4}, DType::Float64);
  EXPECT_EQ(t->strides(), (Dims{12, 4, 1}));
  for (int i = 0; i < 24; ++i) EXPECT_EQ(t->data_ptr<double>()[i], 0.0);
}

TEST(Tensor, ErrorsNameTheOp) {
  try {
    empty(Dims{2, -1}, DType::Float32);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "empty");
    EXPECT_NE(std::string(e.what()).find("[2, -1]"), std::string::npos);
  }
  EXPECT_THROW(empty(Dims{INT64_MAX / 2, 4}, DType::Float32), Error);
  EXPECT_THROW(wrap_dim(3, 3, "sum"), Error);
  EXPECT_EQ(wrap_dim(-1, 3, "sum"), 2);
}

// Sizes, strides and offsets from user or file input are checked before the arithmetic runs
// (under UBSan, a wrapped product would abort these tests).
TEST(Tensor, GeometryOverflowIsRefusedBeforeTheArithmetic) {
  auto expect_error = [](auto&& fn, std::string_view op, std::string_view fragment) {
    try {
      fn();
      ADD_FAILURE() << "no error for " << op;
    } catch (const Error& e) {
      EXPECT_EQ(e.op(), op);
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  const int64_t big = int64_t(1) << 62;
  // No elements, but the outermost contiguous stride (3 * 2^62) does not fit.
  expect_error([&] { empty(Dims{0, 1, 3, big}, DType::Float32); }, "empty", "overflows int64");
  expect_error(
      [&] {
        contiguous_strides(Dims{0, 3, big}, "probe");
      },
      "probe", "strides of size [0, 3, 4611686018427387904] overflow int64");
  // Zero-element shapes whose strides fit stay valid.
  auto e = empty(Dims{0, 3, big / 2}, DType::Float32);
  EXPECT_EQ(e->numel(), 0);
  EXPECT_EQ(e->strides(), (Dims{3 * (big / 2), big / 2, 1}));
  EXPECT_EQ(checked_numel(Dims{2, 0, big / 2}, "x"), 0);
  expect_error([&] { checked_numel(Dims{0, 2, big}, "numel"); }, "numel", "overflows int64");
  EXPECT_EQ(checked_mul(3, -5, "x", "y"), -15);
  expect_error([&] { checked_mul(big, 4, "op", "a product"); }, "op",
               "a product overflows int64 (4611686018427387904 * 4)");
  expect_error([&] { checked_add(INT64_MAX, 1, "op", "a sum"); }, "op", "a sum overflows int64");
  // A view whose (size - 1) * stride wraps would otherwise pass the storage bounds check.
  auto t = empty(Dims{4}, DType::Float32);
  expect_error([&] { make_view(*t, Dims{3}, Dims{big}, 0); }, "view",
               "overflows int64 element offsets");
  expect_error([&] { make_view(*t, Dims{2, 2}, Dims{big, -big}, 0); }, "view", "outside");
  float data[4] = {};
  expect_error(
      [&] {
        from_blob(data, Dims{2, 2}, DType::Float32, Dims{INT64_MAX, 1});
      },
      "from_blob", "overflows the address space");
  EXPECT_EQ(from_blob(data, Dims{2, 2}, DType::Float32, Dims{0, 1})->storage()->nbytes(), 8u);
  EXPECT_EQ(from_blob(data, Dims{0, 2}, DType::Float32, Dims{big, 1})->storage()->nbytes(), 0u);
  ViewExtent ext;
  ASSERT_TRUE(view_extent_ok(Dims{3, 4}, Dims{-4, 1}, 8, ext));
  EXPECT_EQ(ext.lo, 0);
  EXPECT_EQ(ext.hi, 11);
  EXPECT_FALSE(ext.empty);
}

TEST(Tensor, FromBlobBorrows) {
  float data[6] = {1, 2, 3, 4, 5, 6};
  auto t = from_blob(data, Dims{2, 3}, DType::Float32);
  EXPECT_EQ(t->data_ptr<float>(), data);
  EXPECT_FALSE(t->storage()->owns_memory());
}

TEST(ThreadPool, CoversRangeExactlyOnce) {
  std::vector<std::atomic<int>> hits(100000);
  parallel_for(0, 100000, 1000, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
  });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
}

TEST(ThreadPool, NestedCallsRunSerially) {
  set_num_threads(2);
  std::atomic<int64_t> total{0};
  parallel_for(0, 64, 1, [&](int64_t b, int64_t e) {
    EXPECT_TRUE(in_parallel_region());
    parallel_for(0, 1000, 1, [&](int64_t ib, int64_t ie) { total += (ie - ib) * (e - b); });
  });
  EXPECT_EQ(total.load(), 64 * 1000);
  EXPECT_FALSE(in_parallel_region());
}

// A chunk that throws (a kernel's KILN_CHECK, bad_alloc) on a worker once called std::terminate,
// and one thrown on the calling thread left the workers running on a destroyed `fn`. The first
// exception now reaches the parallel_for caller after every chunk has finished, and the pool keeps
// working. Two chunks that wait for each other, so each thread runs exactly one of them whatever
// the scheduling (one core, a loaded machine); the thread decides which one throws.
TEST(ThreadPool, ExceptionInAChunkReachesTheCaller) {
  const int saved = num_threads();
  set_num_threads(2);
  const auto caller = std::this_thread::get_id();
  auto wait_for = [](const std::atomic<bool>& flag) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!flag.load() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    return flag.load();
  };
  for (int rep = 0; rep < 20; ++rep) {
    for (bool worker_throws : {true, false}) {
      std::atomic<bool> on_worker{false}, on_caller{false}, worker_done{false}, met{true};
      try {
        parallel_for(0, 2, 1, [&](int64_t, int64_t) {
          const bool is_caller = std::this_thread::get_id() == caller;
          (is_caller ? on_caller : on_worker) = true;
          if (!wait_for(is_caller ? on_worker : on_caller)) met = false;
          if (!is_caller) {
            if (worker_throws) KILN_CHECK(false, "test_op", "expected the worker's chunk to fail");
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            worker_done = true;
          } else if (!worker_throws) {
            KILN_CHECK(false, "test_op", "expected the caller's chunk to fail");
          }
        });
        ADD_FAILURE() << "expected kiln::Error";
      } catch (const Error& err) {
        EXPECT_NE(std::string(err.what()).find(worker_throws ? "worker's chunk" : "caller's chunk"),
                  std::string::npos)
            << err.what();
        // Delivered only once the worker's chunk is over.
        if (!worker_throws) EXPECT_TRUE(worker_done.load());
      }
      ASSERT_TRUE(met.load()) << "the two chunks did not run on two threads";
      std::atomic<int64_t> sum{0};
      parallel_for(0, 100, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) sum += i;
      });
      ASSERT_EQ(sum.load(), 4950);
    }
  }
  set_num_threads(saved);
}

TEST(ThreadPool, ManySmallJobs) {
  for (int rep = 0; rep < 2000; ++rep) {
    std::atomic<int64_t> sum{0};
    parallel_for(0, 8, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sum += i;
    });
    ASSERT_EQ(sum.load(), 28);
  }
}
