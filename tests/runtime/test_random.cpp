// Philox4x32-10 against the Random123 known-answer vectors (kat_vectors), statistics of the fill
// kernels on 1M samples, and reproducibility (same values on 1 and 2 threads, any layout).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "kiln/runtime/kernels/random.h"
#include "kiln/runtime/thread_pool.h"
#include "reduce_test_util.h"

using namespace kiln;
using namespace kiln::testutil;

namespace {

struct Moments {
  double mean, var;
};
Moments moments(const TensorImpl& t) {
  double s = 0, s2 = 0;
  const auto v = values(t);
  for (double x : v) s += x;
  const double mean = s / static_cast<double>(v.size());
  for (double x : v) s2 += (x - mean) * (x - mean);
  return {mean, s2 / static_cast<double>(v.size() - 1)};
}

void expect_op_error(const std::function<void()>& f, const std::string& op) {
  try {
    f();
    ADD_FAILURE() << op << ": expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), op) << e.what();
  }
}

}  // namespace

TEST(Random, PhiloxKnownAnswers) {
  // Random123 tests/kat_vectors, "philox4x32 10": counter[4] key[2] -> output[4].
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}),
            (std::array<uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(
      philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
      (std::array<uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(
      philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
      (std::array<uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Random, GeneratorCounterLayout) {
  Generator g(0x0123456789abcdefULL, 5);
  EXPECT_EQ(g.block(7), philox4x32_10({7, 0, 0, 0}, {0x89abcdef, 0x01234567}));
  EXPECT_EQ(g.block(uint64_t{1} << 32), philox4x32_10({0, 1, 0, 0}, {0x89abcdef, 0x01234567}));
  // uniform_ on 10 floats uses blocks 5, 6, 7 (element i -> block offset + i / 4, word i % 4).
  auto t = empty(Dims{10}, DType::Float32);
  kernels::uniform_(*t, 0, 1, &g);
  EXPECT_EQ(g.offset(), 8u);
  const auto w = philox4x32_10({6, 0, 0, 0}, {0x89abcdef, 0x01234567});
  EXPECT_EQ(t->data_ptr<float>()[5], static_cast<float>(w[1] >> 8) * 0x1.0p-24f);
  g.manual_seed(3);
  EXPECT_EQ(g.offset(), 0u);
  EXPECT_EQ(g.seed(), 3u);
}

TEST(Random, UniformNormalStatistics) {
  const int64_t n = 1 << 20;
  Generator g(42);
  for (DType dt : {DType::Float32, DType::Float64}) {
    auto u = empty(Dims{n}, dt);
    kernels::uniform_(*u, -1, 3, &g);
    const Moments mu = moments(*u);
    // mean 1, variance 16/12; standard errors ~0.0011 and ~0.0011.
    EXPECT_NEAR(mu.mean, 1.0, 0.006);
    EXPECT_NEAR(mu.var, 16.0 / 12.0, 0.006);
    const auto v = values(*u);
    EXPECT_GE(*std::min_element(v.begin(), v.end()), -1.0);
    EXPECT_LT(*std::max_element(v.begin(), v.end()), 3.0);
    // Histogram of 16 bins: each within 3% of n/16 (about 8 standard deviations).
    std::vector<int64_t> bins(16);
    for (double x : v) bins[std::min<int64_t>(15, static_cast<int64_t>((x + 1) / 4 * 16))]++;
    for (int64_t b : bins) EXPECT_NEAR(b, n / 16, n / 16 * 0.03);

    auto z = empty(Dims{n}, dt);
    kernels::normal_(*z, 2, 0.5, &g);
    const Moments mz = moments(*z);
    EXPECT_NEAR(mz.mean, 2.0, 0.003);   // se 0.0005
    EXPECT_NEAR(mz.var, 0.25, 0.0025);  // se ~0.00035
    // Fraction within one sigma: 0.6827.
    int64_t within = 0;
    for (double x : values(*z)) within += std::fabs(x - 2) < 0.5;
    EXPECT_NEAR(static_cast<double>(within) / n, 0.6827, 0.003);
  }
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    auto u = empty(Dims{1 << 16}, dt);
    kernels::normal_(*u, 0, 1, &g);
    const Moments m = moments(*u);
    EXPECT_NEAR(m.mean, 0, 0.03);
    EXPECT_NEAR(m.var, 1, 0.03);
  }
}

TEST(Random, BernoulliDropoutRandint) {
  const int64_t n = 1 << 20;
  Generator g(7);
  for (double p : {0.0, 0.1, 0.5, 1.0}) {
    auto b = empty(Dims{n}, DType::Float32);
    kernels::bernoulli_(*b, p, &g);
    const Moments m = moments(*b);
    EXPECT_NEAR(m.mean, p, 0.003);
    auto mask = empty(Dims{n}, DType::Bool);
    kernels::dropout_mask_out(p, *mask, &g);
    EXPECT_NEAR(moments(*mask).mean, 1 - p, 0.003);
  }
  auto mask8 = empty(Dims{1000}, DType::UInt8);
  kernels::dropout_mask_out(0.3, *mask8, &g);
  for (double v : values(*mask8)) EXPECT_TRUE(v == 0 || v == 1);

  for (auto [lo, hi] : std::vector<std::pair<int64_t, int64_t>>{
           {0, 10}, {-5, 5}, {0, 2}, {-1000000000000LL, 1000000000000LL}}) {
    auto r = empty(Dims{n}, DType::Int64);
    kernels::randint_(*r, lo, hi, &g);
    const auto v = values(*r);
    EXPECT_GE(*std::min_element(v.begin(), v.end()), lo);
    EXPECT_LT(*std::max_element(v.begin(), v.end()), hi);
    const double range = static_cast<double>(hi - lo);
    const Moments m = moments(*r);
    EXPECT_NEAR(m.mean, (static_cast<double>(lo) + static_cast<double>(hi) - 1) / 2, range * 0.003);
    EXPECT_NEAR(m.var, (range * range - 1) / 12, range * range / 12 * 0.01);
    if (hi - lo == 10) {
      std::vector<int64_t> counts(10);
      for (double x : v) counts[static_cast<int64_t>(x) - lo]++;
      for (int64_t c : counts) EXPECT_NEAR(c, n / 10, n / 10 * 0.02);
    }
  }
  auto r8 = empty(Dims{100}, DType::Int8);
  kernels::randint_(*r8, -128, 128, &g);
  expect_op_error([&] { kernels::randint_(*r8, 0, 200, &g); }, "randint_");
  expect_op_error([&] { kernels::randint_(*r8, 3, 3, &g); }, "randint_");
  expect_op_error([&] { kernels::bernoulli_(*r8, 1.5, &g); }, "bernoulli_");
  expect_op_error([&] { kernels::uniform_(*r8, 0, 1, &g); }, "uniform_");
  expect_op_error([&] { kernels::normal_(*empty(Dims{3}, DType::Float32), 0, -1, &g); }, "normal_");
}

TEST(Random, Randperm) {
  Generator g(11);
  for (int64_t n : {0, 1, 2, 7, 1000}) {
    for (DType dt : {DType::Int64, DType::Int32, DType::Float32}) {
      auto p = empty(Dims{n}, dt);
      kernels::randperm_out(n, *p, &g);
      auto v = values(*p);
      std::sort(v.begin(), v.end());
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(v[i], i);
    }
  }
  // Uniformity: each of the 6 permutations of 3 elements about equally often.
  std::vector<int64_t> counts(27);
  const int64_t trials = 60000;
  auto p = empty(Dims{3}, DType::Int64);
  for (int64_t t = 0; t < trials; ++t) {
    kernels::randperm_out(3, *p, &g);
    const int64_t* d = p->data_ptr<int64_t>();
    counts[d[0] * 9 + d[1] * 3 + d[2]]++;
  }
  int64_t seen = 0;
  for (int64_t c : counts) {
    if (c) {
      ++seen;
      EXPECT_NEAR(c, trials / 6, trials / 6 * 0.05);
    }
  }
  EXPECT_EQ(seen, 6);
  expect_op_error([&] { kernels::randperm_out(4, *p, &g); }, "randperm");
  auto small = empty(Dims{300}, DType::UInt8);
  expect_op_error([&] { kernels::randperm_out(300, *small, &g); }, "randperm");
}

TEST(Random, ReproducibleAcrossThreadsAndLayouts) {
  const int saved = num_threads();
  const Dims shape{300, 1001};
  auto run = [&](int threads, bool transposed, DType dt,
                 const std::function<void(TensorImpl&, Generator&)>& fill) {
    set_num_threads(threads);
    Generator g(1234, 99);
    TensorImplPtr t;
    if (transposed) {
      auto base = empty(Dims{shape[1], shape[0]}, dt);
      t = views::transpose(*base, 0, 1);
    } else {
      t = empty(shape, dt);
    }
    fill(*t, g);
    return std::make_pair(values(*t), g.offset());
  };
  std::vector<std::function<void(TensorImpl&, Generator&)>> fills = {
      [](TensorImpl& t, Generator& g) { kernels::uniform_(t, 0, 1, &g); },
      [](TensorImpl& t, Generator& g) { kernels::normal_(t, 0, 1, &g); },
      [](TensorImpl& t, Generator& g) { kernels::bernoulli_(t, 0.3, &g); },
  };
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (const auto& f : fills) {
      const auto a = run(1, false, dt, f);
      const auto b = run(2, false, dt, f);
      const auto c = run(2, true, dt, f);
      EXPECT_EQ(a.first, b.first);
      EXPECT_EQ(a.first, c.first);
      EXPECT_EQ(a.second, b.second);
    }
  }
  set_num_threads(saved);
  // Two calls continue the stream: uniform_ on 2 x 1000 floats == one call on 2000.
  Generator g1(5), g2(5);
  auto one = empty(Dims{2000}, DType::Float32);
  kernels::uniform_(*one, 0, 1, &g1);
  auto h0 = empty(Dims{1000}, DType::Float32), h1 = empty(Dims{1000}, DType::Float32);
  kernels::uniform_(*h0, 0, 1, &g2);
  kernels::uniform_(*h1, 0, 1, &g2);
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(one->data_ptr<float>()[i], h0->data_ptr<float>()[i]);
    ASSERT_EQ(one->data_ptr<float>()[1000 + i], h1->data_ptr<float>()[i]);
  }
  // The default generator honors manual_seed.
  manual_seed(77);
  auto d0 = empty(Dims{64}, DType::Float32);
  kernels::normal_(*d0);
  manual_seed(77);
  auto d1 = empty(Dims{64}, DType::Float32);
  kernels::normal_(*d1);
  EXPECT_EQ(values(*d0), values(*d1));
  EXPECT_EQ(default_generator().offset(), 16u);  // 64 floats, one word each
}

TEST(Random, BatchedBlocksMatchScalarPhilox) {
  // Fills use an 8-block batched Philox; every word must equal the scalar block function.
  Generator g(0xfeedfacecafebeefULL, (uint64_t{1} << 32) - 5);  // crosses a 2^32 counter carry
  auto t = empty(Dims{4 * 37}, DType::Int64);
  kernels::randint_(*t, 0, int64_t{1} << 32, &g);
  Generator ref(0xfeedfacecafebeefULL, (uint64_t{1} << 32) - 5);
  for (int64_t i = 0; i < t->numel(); ++i) {
    const auto w = ref.block(ref.offset() + static_cast<uint64_t>(i / 4));
    ASSERT_EQ(t->data_ptr<int64_t>()[i], static_cast<int64_t>(w[i % 4])) << i;
  }
}
