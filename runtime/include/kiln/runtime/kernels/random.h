#pragma once
// Random number generation with a counter-based Philox4x32-10 generator (Salmon et al., "Parallel
// random numbers: as easy as 1, 2, 3", SC'11). A Generator is just (seed, offset): the key is the
// seed, and the 128-bit counter of block b is (offset + b) (low 64 bits; high 64 bits zero). Each
// block gives four 32-bit words.
//
// Element i of a fill (row-major order of the tensor's logical shape) reads the words of block
// offset + i / 4 (one word per element: float32/16 uniform_ and normal_, bernoulli, randint of a
// range up to 2^32) or offset + i / 2 (two words: float64, randint of a wider range); normal_
// pairs consecutive elements (Box-Muller: cos and sin of one draw). After the call the generator's
// offset moves past every block used. So the values depend only on (seed, offset, shape, dtype),
// never on the thread count or the tensor's strides, and kernels parallelize freely.

#include <array>
#include <atomic>
#include <cstdint>

#include "kiln/runtime/tensor.h"

namespace kiln {

// One Philox4x32-10 block.
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

class Generator {
 public:
  static constexpr uint64_t kDefaultSeed = 67280421310721ULL;  // PyTorch's default seed
  explicit Generator(uint64_t seed = kDefaultSeed, uint64_t offset = 0)
      : seed_(seed), offset_(offset) {}
  Generator(const Generator& other) : seed_(other.seed_), offset_(other.offset()) {}
  Generator& operator=(const Generator& other) {
    seed_ = other.seed_;
    offset_.store(other.offset());
    return *this;
  }

  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_.load(std::memory_order_relaxed); }
  // Sets the seed and rewinds the stream (offset 0).
  void manual_seed(uint64_t seed) {
    seed_ = seed;
    offset_.store(0);
  }
  void set_offset(uint64_t offset) { offset_.store(offset); }
  // Claims `blocks` consecutive counter blocks; returns the first. Thread-safe.
  uint64_t reserve(uint64_t blocks) { return offset_.fetch_add(blocks); }
  // Block `b` of the stream with this generator's key.
  std::array<uint32_t, 4> block(uint64_t b) const {
    return philox4x32_10({static_cast<uint32_t>(b), static_cast<uint32_t>(b >> 32), 0, 0},
                         {static_cast<uint32_t>(seed_), static_cast<uint32_t>(seed_ >> 32)});
  }

 private:
  uint64_t seed_;
  std::atomic<uint64_t> offset_;
};

// The process-wide default generator (used when a kernel gets nullptr).
Generator& default_generator();
// default_generator().manual_seed(seed).
void manual_seed(uint64_t seed);

namespace kernels {

// Floating tensors: uniform in [lo, hi).
void uniform_(TensorImpl& t, double lo = 0.0, double hi = 1.0, Generator* gen = nullptr);
// Floating tensors: normal(mean, std) by Box-Muller (std >= 0).
void normal_(TensorImpl& t, double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
// Any dtype: 1 with probability p, else 0 (p in [0, 1]).
void bernoulli_(TensorImpl& t, double p, Generator* gen = nullptr);
// Integer or floating tensors: uniform integers in [lo, hi) (lo < hi, both representable).
void randint_(TensorImpl& t, int64_t lo, int64_t hi, Generator* gen = nullptr);
// out: 1-D of n elements, Int64/Int32 (or floating): a uniform random permutation of 0..n-1.
void randperm_out(int64_t n, TensorImpl& out, Generator* gen = nullptr);
// Dropout keep-mask: mask (Bool or UInt8) = 1 with probability 1 - p (p in [0, 1]). Pairs with
// kernels::dropout_out (embedding.h), which scales kept values by 1 / (1 - p).
void dropout_mask_out(double p, TensorImpl& mask, Generator* gen = nullptr);

}  // namespace kernels
}  // namespace kiln
