// Indexing kernels against naive references computed from multi-indices in float64.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>

#include "kiln/runtime/kernels/indexing.h"
#include "reduce_test_util.h"

using namespace kiln;
using namespace kiln::testutil;

namespace {

std::vector<int64_t> unravel(int64_t linear, const Dims& sizes) {
  std::vector<int64_t> idx(sizes.size());
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    idx[d] = linear % sizes[d];
    linear /= sizes[d];
  }
  return idx;
}
int64_t ravel(const std::vector<int64_t>& idx, const Dims& sizes) {
  int64_t l = 0;
  for (size_t d = 0; d < sizes.size(); ++d) l = l * sizes[d] + idx[d];
  return l;
}

TensorImplPtr index_tensor(const std::vector<int64_t>& v, Dims shape, DType dt,
                           Layout layout = Layout::Contiguous) {
  std::mt19937 rng(0);
  auto t = make_tensor(shape, dt, layout, rng);
  for (size_t i = 0; i < v.size(); ++i) set(*t, static_cast<int64_t>(i), static_cast<double>(v[i]));
  return t;
}

void expect_error(const std::function<void()>& f, const std::string& op,
                  const std::string& fragment = "") {
  try {
    f();
    ADD_FAILURE() << op << ": expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), op) << e.what();
    if (!fragment.empty()) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  }
}

const std::vector<DType> kTypes = {DType::Float32, DType::Float64, DType::Float16, DType::Int64,
                                   DType::Int32,   DType::UInt8,   DType::Bool,    DType::BFloat16};

}  // namespace

TEST(Indexing, IndexSelect) {
  std::mt19937 rng(1);
  for (DType dt : kTypes) {
    for (const Dims& shape : {Dims{5}, Dims{4, 6}, Dims{3, 4, 5}}) {
      const int64_t r = static_cast<int64_t>(shape.size());
      for (Layout layout : {Layout::Contiguous, Layout::Transposed, Layout::Strided}) {
        auto x = make_tensor(shape, dt, layout, rng, -5, 5);
        for (int64_t dim = -r; dim < r; ++dim) {
          const int64_t d = dim < 0 ? dim + r : dim;
          for (int64_t n : {0, 1, 7}) {
            std::vector<int64_t> iv(n);
            for (auto& v : iv) v = static_cast<int64_t>(rng() % shape[d]);
            auto index = index_tensor(iv, Dims{n}, n % 2 ? DType::Int32 : DType::Int64);
            const Dims os = kernels::index_select_shape(*x, dim, *index);
            auto out = layout == Layout::Strided ? make_tensor(os, dt, Layout::Transposed, rng)
                                                 : empty(os, dt);
            kernels::index_select_out(*x, dim, *index, *out);
            for (int64_t l = 0; l < out->numel(); ++l) {
              auto idx = unravel(l, os);
              idx[d] = iv[idx[d]];
              ASSERT_EQ(get(*out, l), get(*x, ravel(idx, shape)));
            }
          }
        }
      }
    }
  }
  auto x = empty(Dims{5, 3}, DType::Float32);
  auto out = empty(Dims{2, 3}, DType::Float32);
  expect_error(
      [&] {
        kernels::index_select_out(*x, 0, *index_tensor({1, 5}, Dims{2}, DType::Int64), *out);
      },
      "index_select", "index 5 is out of bounds for dim 0 with size 5");
  expect_error(
      [&] {
        kernels::index_select_out(*x, 0, *index_tensor({-1, 0}, Dims{2}, DType::Int64), *out);
      },
      "index_select", "-1");
  expect_error(
      [&] {
        kernels::index_select_out(*x, 0, *index_tensor({0, 0}, Dims{2}, DType::Float32), *out);
      },
      "index_select");
  // 0-dim index keeps the dim (size 1).
  auto s = index_tensor({2}, Dims{}, DType::Int64);
  auto o1 = empty(Dims{5, 1}, DType::Float32);
  kernels::index_select_out(*x, 1, *s, *o1);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(get(*o1, i), get(*x, i * 3 + 2));
}

TEST(Indexing, IndexAddAccumulatesRepeats) {
  std::mt19937 rng(2);
  for (DType dt : {DType::Float32, DType::Float64, DType::Int32, DType::Float16}) {
    for (const Dims& shape : {Dims{6}, Dims{4, 6}, Dims{3, 4, 5}}) {
      const int64_t r = static_cast<int64_t>(shape.size());
      for (int64_t dim = -r; dim < r; ++dim) {
        const int64_t d = dim < 0 ? dim + r : dim;
        const int64_t n = 9;
        std::vector<int64_t> iv(n);
        for (auto& v : iv) v = static_cast<int64_t>(rng() % shape[d]);
        auto index = index_tensor(iv, Dims{n}, DType::Int64, Layout::Strided);
        Dims ss = shape;
        ss[d] = n;
        auto src = make_tensor(ss, dt, Layout::Transposed, rng, -3, 3);
        auto self = make_tensor(shape, dt, Layout::Strided, rng, -3, 3);
        std::vector<double> want = values(*self);
        const double alpha = dt == DType::Int32 ? 2 : 0.5;
        for (int64_t l = 0; l < src->numel(); ++l) {
          auto idx = unravel(l, ss);
          idx[d] = iv[idx[d]];
          want[ravel(idx, shape)] += alpha * get(*src, l);
        }
        kernels::index_add_(*self, dim, *index, *src, alpha);
        const double tol = dt == DType::Float16 ? 2e-2 : 1e-5;
        for (int64_t l = 0; l < self->numel(); ++l) ASSERT_NEAR(get(*self, l), want[l], tol);
      }
    }
  }
  auto self = zeros(Dims{3, 2}, DType::Float32);
  auto src = zeros(Dims{1, 2}, DType::Float32);
  expect_error(
      [&] { kernels::index_add_(*self, 0, *index_tensor({3}, Dims{1}, DType::Int64), *src); },
      "index_add_", "index 3 is out of bounds for dim 0 with size 3");
  auto bad = zeros(Dims{2, 2}, DType::Float32);
  expect_error(
      [&] { kernels::index_add_(*self, 0, *index_tensor({1}, Dims{1}, DType::Int64), *bad); },
      "index_add_");
}

// Each slice written in index order (a repeat keeps the last), the rest untouched; contiguous
// operands take the row-copy path, strided ones the per-slice copy.
TEST(Indexing, IndexCopyWritesSlicesInIndexOrder) {
  std::mt19937 rng(3);
  for (DType dt : {DType::Float32, DType::Float64, DType::Int64, DType::Float16}) {
    for (const Dims& shape : {Dims{6}, Dims{4, 6}, Dims{3, 4, 5}}) {
      const int64_t r = static_cast<int64_t>(shape.size());
      for (Layout layout : {Layout::Contiguous, Layout::Strided}) {
        for (int64_t dim = -r; dim < r; ++dim) {
          const int64_t d = dim < 0 ? dim + r : dim;
          for (int64_t n : {0, 1, 5}) {
            std::vector<int64_t> iv(n);
            for (auto& v : iv) v = static_cast<int64_t>(rng() % shape[d]);
            auto index = index_tensor(iv, Dims{n}, n % 2 ? DType::Int32 : DType::Int64);
            Dims ss = shape;
            ss[d] = n;
            auto src = make_tensor(ss, dt, layout, rng, -3, 3);
            auto self = make_tensor(shape, dt, layout, rng, -3, 3);
            std::vector<double> want = values(*self);
            for (int64_t l = 0; l < src->numel(); ++l) {
              auto idx = unravel(l, ss);
              idx[d] = iv[idx[d]];
              want[ravel(idx, shape)] = get(*src, l);
            }
            kernels::index_copy_(*self, dim, *index, *src);
            for (int64_t l = 0; l < self->numel(); ++l) ASSERT_EQ(get(*self, l), want[l]);
          }
        }
      }
    }
  }
  auto self = zeros(Dims{3, 2}, DType::Float32);
  auto src = zeros(Dims{1, 2}, DType::Float32);
  expect_error(
      [&] { kernels::index_copy_(*self, 0, *index_tensor({3}, Dims{1}, DType::Int64), *src); },
      "index_copy_", "index 3 is out of bounds for dim 0 with size 3");
  auto bad = zeros(Dims{2, 2}, DType::Float32);
  expect_error(
      [&] { kernels::index_copy_(*self, 0, *index_tensor({1}, Dims{1}, DType::Int64), *bad); },
      "index_copy_", "source");
  auto other = zeros(Dims{1, 2}, DType::Float64);
  expect_error(
      [&] { kernels::index_copy_(*self, 0, *index_tensor({1}, Dims{1}, DType::Int64), *other); },
      "index_copy_");
}

TEST(Indexing, GatherScatter) {
  std::mt19937 rng(3);
  for (DType dt : {DType::Float32, DType::Int64, DType::Float16, DType::UInt8, DType::Float64}) {
    for (const Dims& shape : {Dims{7}, Dims{4, 6}, Dims{3, 4, 5}}) {
      const int64_t r = static_cast<int64_t>(shape.size());
      for (int64_t dim = -r; dim < r; ++dim) {
        const int64_t d = dim < 0 ? dim + r : dim;
        // index shape: smaller than self in the other dims, any size along dim.
        Dims is = shape;
        for (int64_t k = 0; k < r; ++k) is[k] = k == d ? 5 : std::max<int64_t>(1, shape[k] - 1);
        std::vector<int64_t> iv(static_cast<size_t>(checked_numel(is, "test")));
        for (auto& v : iv) v = static_cast<int64_t>(rng() % shape[d]);
        for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
          auto index = index_tensor(iv, is, DType::Int64, layout);
          auto self = make_tensor(shape, dt, layout, rng, 0, 9);
          // gather
          auto out = make_tensor(is, dt, Layout::Strided, rng);
          kernels::gather_out(*self, dim, *index, *out);
          for (int64_t l = 0; l < out->numel(); ++l) {
            auto idx = unravel(l, is);
            idx[d] = iv[l];
            ASSERT_EQ(get(*out, l), get(*self, ravel(idx, shape)));
          }
          // scatter_ (src), last write wins in row-major order of index
          Dims srcs = is;
          for (auto& v : srcs) v += 1;
          auto src = make_tensor(srcs, dt, Layout::Strided, rng, 0, 9);
          std::vector<double> want = values(*self);
          std::vector<double> want_add = want;
          for (int64_t l = 0; l < index->numel(); ++l) {
            auto idx = unravel(l, is);
            const double sv = get(*src, ravel(idx, srcs));
            idx[d] = iv[l];
            want[ravel(idx, shape)] = sv;
            want_add[ravel(idx, shape)] += sv;
          }
          auto clone = [&] {
            auto c = make_tensor(shape, dt, Layout::Strided, rng);
            for (int64_t l = 0; l < c->numel(); ++l) set(*c, l, get(*self, l));
            return c;
          };
          auto s1 = clone();
          kernels::scatter_(*s1, dim, *index, *src);
          for (int64_t l = 0; l < s1->numel(); ++l) ASSERT_EQ(get(*s1, l), want[l]);
          if (dt != DType::UInt8) {
            auto s2 = clone();
            kernels::scatter_add_(*s2, dim, *index, *src);
            for (int64_t l = 0; l < s2->numel(); ++l) {
              ASSERT_NEAR(get(*s2, l), want_add[l],
                          dt == DType::Float16 ? 0.1 : (dt == DType::Float32 ? 1e-4 : 1e-9));
            }
          }
          auto s3 = clone();
          kernels::scatter_(*s3, dim, *index, 7.0);
          std::vector<double> want_v = values(*self);
          for (int64_t l = 0; l < index->numel(); ++l) {
            auto idx = unravel(l, is);
            idx[d] = iv[l];
            want_v[ravel(idx, shape)] = 7;
          }
          for (int64_t l = 0; l < s3->numel(); ++l) ASSERT_EQ(get(*s3, l), want_v[l]);
        }
      }
    }
  }
  auto self = zeros(Dims{3, 4}, DType::Float32);
  auto out = zeros(Dims{2, 2}, DType::Float32);
  expect_error(
      [&] {
        kernels::gather_out(*self, 1, *index_tensor({0, 1, 4, 2}, Dims{2, 2}, DType::Int64), *out);
      },
      "gather", "index 4 is out of bounds for dim 1 with size 4");
  expect_error(
      [&] {
        kernels::gather_out(
            *self, 1, *index_tensor({0, 1, 2, 3, 0, 1, 2, 3}, Dims{4, 2}, DType::Int64), *out);
      },
      "gather");  // index.size(0) > self.size(0)
  expect_error(
      [&] {
        kernels::scatter_(*self, 0, *index_tensor({0, 3}, Dims{1, 2}, DType::Int64), 1.0);
      },
      "scatter_", "index 3 is out of bounds for dim 0 with size 3");
  expect_error(
      [&] {
        kernels::scatter_add_(*self, 0, *index_tensor({0, 1}, Dims{1, 2}, DType::Int64),
                              *zeros(Dims{1, 1}, DType::Float32));
      },
      "scatter_add_");  // index larger than src
  // Nothing was written by the failing calls.
  for (int64_t l = 0; l < self->numel(); ++l) EXPECT_EQ(get(*self, l), 0.0);
  // 0-dim
  auto z = zeros(Dims{}, DType::Float32);
  set(*z, 0, 4);
  auto zi = index_tensor({0}, Dims{}, DType::Int64);
  auto zo = zeros(Dims{}, DType::Float32);
  kernels::gather_out(*z, 0, *zi, *zo);
  EXPECT_EQ(get(*zo, 0), 4.0);
}

TEST(Indexing, MaskedFillAndSelect) {
  std::mt19937 rng(4);
  for (DType dt : kTypes) {
    for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
      auto x = make_tensor(Dims{4, 6}, dt, layout, rng, -5, 5);
      for (const Dims& ms : {Dims{4, 6}, Dims{1, 6}, Dims{4, 1}, Dims{6}, Dims{}}) {
        auto mask = make_tensor(ms, DType::Bool, Layout::Contiguous, rng);
        const auto before = values(*x);
        // masked_select first (reads x), then masked_fill_
        auto sel = kernels::masked_select(*x, *mask);
        std::vector<double> want_sel;
        std::vector<double> want = before;
        for (int64_t l = 0; l < 24; ++l) {
          const int64_t i = l / 6, j = l % 6;
          int64_t ml = 0;
          if (ms.size() == 2) ml = (ms[0] == 1 ? 0 : i) * ms[1] + (ms[1] == 1 ? 0 : j);
          if (ms.size() == 1) ml = j;
          if (get(*mask, ml) != 0) {
            want_sel.push_back(before[l]);
            want[l] = dt == DType::Bool ? 1 : (dt == DType::UInt8 ? 3 : -3);
          }
        }
        ASSERT_EQ(sel->numel(), static_cast<int64_t>(want_sel.size()));
        for (int64_t k = 0; k < sel->numel(); ++k) ASSERT_EQ(get(*sel, k), want_sel[k]);
        kernels::masked_fill_(*x, *mask, dt == DType::UInt8 ? 3 : -3);
        for (int64_t l = 0; l < 24; ++l) ASSERT_EQ(get(*x, l), want[l]);
      }
    }
  }
  auto x = zeros(Dims{4, 6}, DType::Float32);
  expect_error(
      [&] {
        kernels::masked_fill_(*x, *zeros(Dims{4, 6}, DType::Float32), 1);
      },
      "masked_fill_");
  expect_error([&] { kernels::masked_fill_(*x, *zeros(Dims{5}, DType::Bool), 1); }, "masked_fill_");
}

TEST(Indexing, CatStackSplitChunk) {
  std::mt19937 rng(5);
  for (DType dt : {DType::Float32, DType::Int64, DType::Float16}) {
    for (int64_t dim : {0, 1, 2, -1}) {
      const int64_t d = dim < 0 ? dim + 3 : dim;
      std::vector<TensorImplPtr> ts;
      std::vector<int64_t> lens = {2, 0, 3, 1};
      for (size_t i = 0; i < lens.size(); ++i) {
        Dims s{3, 4, 5};
        s[d] = lens[i];
        ts.push_back(make_tensor(s, i == 2 ? DType::Int32 : dt,
                                 i % 2 ? Layout::Transposed : Layout::Strided, rng, -9, 9));
      }
      auto legacy = empty(Dims{0}, dt);  // skipped, as in PyTorch
      std::vector<const TensorImpl*> ptrs;
      for (auto& t : ts) ptrs.push_back(t.get());
      ptrs.insert(ptrs.begin() + 1, legacy.get());
      const Dims os = kernels::cat_shape(ptrs, dim);
      Dims want_shape{3, 4, 5};
      want_shape[d] = 6;
      ASSERT_EQ(os, want_shape);
      auto out = make_tensor(os, dt, Layout::Transposed, rng);
      kernels::cat_out(ptrs, dim, *out);
      for (int64_t l = 0; l < out->numel(); ++l) {
        auto idx = unravel(l, os);
        size_t which = 0;
        while (idx[d] >= lens[which]) idx[d] -= lens[which++];
        Dims s{3, 4, 5};
        s[d] = lens[which];
        ASSERT_EQ(get(*out, l), get(*ts[which], ravel(idx, s)));
      }
      // split / chunk give views with the same contents
      auto pieces = kernels::split(*out, 4, dim);
      ASSERT_EQ(pieces.size(), 2u);
      EXPECT_EQ(pieces[1]->sizes()[d], 2);
      EXPECT_EQ(pieces[0]->storage(), out->storage());
      auto with = kernels::split_with_sizes(*out, Dims{1, 0, 5}, dim);
      ASSERT_EQ(with.size(), 3u);
      EXPECT_EQ(with[2]->sizes()[d], 5);
      auto ch = kernels::chunk(*out, 4, dim);
      ASSERT_EQ(ch.size(), 3u);  // ceil(6/4) = 2 per chunk
      for (size_t c = 0; c < ch.size(); ++c) {
        for (int64_t l = 0; l < ch[c]->numel(); ++l) {
          auto idx = unravel(l, ch[c]->sizes());
          idx[d] += 2 * static_cast<int64_t>(c);
          ASSERT_EQ(get(*ch[c], l), get(*out, ravel(idx, os)));
        }
      }
    }
  }
  auto a = zeros(Dims{2, 3}, DType::Float32), b = zeros(Dims{2, 4}, DType::Float32);
  std::vector<const TensorImpl*> ab{a.get(), b.get()};
  EXPECT_EQ(kernels::cat_shape(ab, 1), (Dims{2, 7}));
  expect_error([&] { kernels::cat_shape(ab, 0); }, "cat");
  expect_error([&] { kernels::stack_shape(ab, 0); }, "stack");
  auto e = zeros(Dims{0, 3}, DType::Float32);
  EXPECT_EQ(kernels::chunk(*e, 3, 0).size(), 3u);
  EXPECT_EQ(kernels::split(*e, 2, 0).size(), 1u);
  expect_error([&] { kernels::split(*a, 0, 1); }, "split");
  expect_error([&] { kernels::split_with_sizes(*a, Dims{1, 1}, 1); }, "split_with_sizes");
  // stack
  for (int64_t dim : {0, 1, 2, -1, -3}) {
    std::vector<TensorImplPtr> ts;
    std::vector<const TensorImpl*> ptrs;
    for (int i = 0; i < 3; ++i) {
      ts.push_back(make_tensor(Dims{2, 4}, DType::Float32, Layout::Transposed, rng));
      ptrs.push_back(ts.back().get());
    }
    const Dims os = kernels::stack_shape(ptrs, dim);
    const int64_t d = dim < 0 ? dim + 3 : dim;
    ASSERT_EQ(os[d], 3);
    auto out = empty(os, DType::Float32);
    kernels::stack_out(ptrs, dim, *out);
    for (int64_t l = 0; l < out->numel(); ++l) {
      auto idx = unravel(l, os);
      const int64_t which = idx[d];
      idx.erase(idx.begin() + d);
      ASSERT_EQ(get(*out, l), get(*ts[which], ravel(idx, Dims{2, 4})));
    }
  }
}

TEST(Indexing, Pad) {
  std::mt19937 rng(6);
  auto src_index = [](int64_t o, int64_t left, int64_t size, kernels::PadMode mode) -> int64_t {
    int64_t j = o - left;
    if (mode == kernels::PadMode::Constant) return (j >= 0 && j < size) ? j : -1;
    if (mode == kernels::PadMode::Replicate) return std::min(std::max<int64_t>(j, 0), size - 1);
    while (j < 0 || j >= size) j = j < 0 ? -j : 2 * (size - 1) - j;  // reflect
    return j;
  };
  struct Case {
    Dims shape;
    Dims pad;
    kernels::PadMode mode;
  };
  using M = kernels::PadMode;
  const std::vector<Case> cases = {{Dims{2, 3, 5}, Dims{1, 2}, M::Constant},
                                   {Dims{2, 3, 5}, Dims{1, 2, 0, 3}, M::Constant},
                                   {Dims{2, 3, 5}, Dims{-1, 2, 1, -2}, M::Constant},
                                   {Dims{2, 3, 5}, Dims{2, 1, 1, 2, 1, 0}, M::Constant},
                                   {Dims{2, 3, 5}, Dims{4, 3}, M::Reflect},
                                   {Dims{2, 3, 5}, Dims{2, 1, 2, 2}, M::Reflect},
                                   {Dims{1, 2, 4, 6}, Dims{3, 3, 3, 1}, M::Reflect},
                                   {Dims{2, 3, 5}, Dims{3, 1, 2, 0}, M::Replicate},
                                   {Dims{2, 0, 5}, Dims{1, 1}, M::Constant},
                                   {Dims{4}, Dims{0, 0}, M::Reflect}};
  for (DType dt : {DType::Float32, DType::Int64, DType::BFloat16, DType::UInt8}) {
    for (const auto& c : cases) {
      for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
        auto x = make_tensor(c.shape, dt, layout, rng, 0, 9);
        const Dims os = kernels::pad_shape(c.shape, c.pad);
        auto out = make_tensor(os, dt, layout, rng);
        kernels::pad_out(*x, c.pad, c.mode, 5, *out);
        const int64_t r = static_cast<int64_t>(c.shape.size());
        for (int64_t l = 0; l < out->numel(); ++l) {
          auto idx = unravel(l, os);
          bool fill = false;
          for (int64_t k = 0; k < static_cast<int64_t>(c.pad.size()) / 2; ++k) {
            const int64_t d = r - 1 - k;
            idx[d] = src_index(idx[d], c.pad[2 * k], c.shape[d], c.mode);
            fill |= idx[d] < 0;
          }
          const double want = fill ? 5.0 : get(*x, ravel(idx, c.shape));
          ASSERT_EQ(get(*out, l), want) << "pad case " << c.pad << " at " << l;
        }
      }
    }
  }
  auto x = zeros(Dims{2, 3}, DType::Float32);
  auto o = zeros(Dims{2, 9}, DType::Float32);
  expect_error([&] { kernels::pad_out(*x, Dims{3, 3}, kernels::PadMode::Reflect, 0, *o); }, "pad");
  expect_error([&] { kernels::pad_shape(Dims{2, 3}, Dims{1, 1, 1}); }, "pad");
  expect_error([&] { kernels::pad_shape(Dims{2, 3}, Dims{-2, -2}); }, "pad");
  // An artifact's pads: sums that overflow are errors (INT64_MAX twice once wrapped to size 2),
  // and an empty input padded to a 2^39-long dim builds no index maps (they took 4 TiB).
  const int64_t huge = std::numeric_limits<int64_t>::max();
  expect_error([&] { kernels::pad_shape(Dims{4}, Dims{huge, huge}); }, "pad");
  expect_error(
      [&] {
        kernels::pad_shape(Dims{4}, Dims{std::numeric_limits<int64_t>::min(), 8});
      },
      "pad");
  auto empty_in = zeros(Dims{0, 4}, DType::Float32);
  auto empty_out = zeros(Dims{0, (int64_t(1) << 39) + 4}, DType::Float32);
  kernels::pad_out(*empty_in, Dims{0, int64_t(1) << 39}, kernels::PadMode::Replicate, 0,
                   *empty_out);
}

TEST(Indexing, OneHot) {
  std::mt19937 rng(7);
  std::vector<int64_t> iv(12);
  for (auto& v : iv) v = static_cast<int64_t>(rng() % 5);
  iv[3] = 6;
  for (DType idt : {DType::Int64, DType::Int32}) {
    auto index = index_tensor(iv, Dims{3, 4}, idt, Layout::Transposed);
    const Dims os = kernels::one_hot_shape(*index);
    ASSERT_EQ(os, (Dims{3, 4, 7}));
    for (DType odt : {DType::Int64, DType::Float32}) {
      auto out = make_tensor(os, odt, Layout::Strided, rng);
      kernels::one_hot_out(*index, *out);
      for (int64_t l = 0; l < out->numel(); ++l) {
        ASSERT_EQ(get(*out, l), iv[l / 7] == l % 7 ? 1.0 : 0.0);
      }
    }
  }
  auto index = index_tensor({0, 3}, Dims{2}, DType::Int64);
  auto out = zeros(Dims{2, 3}, DType::Int64);
  expect_error([&] { kernels::one_hot_out(*index, *out); }, "one_hot",
               "class values must be in [0, 3), got 3");
  expect_error([&] { kernels::one_hot_shape(*zeros(Dims{0}, DType::Int64)); }, "one_hot");
}

TEST(Indexing, SortArgsortTopk) {
  std::mt19937 rng(8);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dt : {DType::Float32, DType::Float64, DType::Int32, DType::Float16, DType::UInt8}) {
    for (const Dims& shape : {Dims{9}, Dims{4, 7}, Dims{3, 5, 6}, Dims{}}) {
      const int64_t r = static_cast<int64_t>(shape.size());
      for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
        auto x = make_tensor(shape, dt, layout, rng, 0, 4);  // many ties
        if (is_floating(dt) && x->numel() > 5) {
          set(*x, 1, nan);
          set(*x, 4, nan);
        }
        for (int64_t dim = -std::max<int64_t>(r, 1); dim < std::max<int64_t>(r, 1); ++dim) {
          const int64_t d = r == 0 ? 0 : (dim < 0 ? dim + r : dim);
          const int64_t len = r == 0 ? 1 : shape[d];
          for (bool desc : {false, true}) {
            auto v = make_tensor(shape, dt, Layout::Transposed, rng);
            auto i = empty(shape, DType::Int64);
            auto ai = empty(shape, DType::Int64);
            kernels::sort_out(*x, dim, desc, *v, *i);
            kernels::argsort_out(*x, dim, desc, *ai);
            const int64_t k = std::min<int64_t>(3, len);
            Dims ks = shape;
            if (r) ks[d] = k;
            auto tv = empty(ks, dt);
            auto ti = empty(ks, DType::Int64);
            kernels::topk_out(*x, k, dim, desc, true, *tv, *ti);
            // Reference: stable sort of each line, NaN treated as the largest value.
            for (int64_t l = 0; l < x->numel(); ++l) {
              auto idx = unravel(l, shape);
              if (r && idx[d] != 0) continue;
              std::vector<double> line(len);
              std::vector<int64_t> ord(len);
              for (int64_t t = 0; t < len; ++t) {
                if (r) idx[d] = t;
                line[t] = get(*x, ravel(idx, shape));
              }
              std::iota(ord.begin(), ord.end(), 0);
              auto key = [](double a) {
                return std::isnan(a) ? std::numeric_limits<double>::infinity() : a;
              };
              auto rank_nan = [](double a) { return std::isnan(a) ? 1 : 0; };
              std::stable_sort(ord.begin(), ord.end(), [&](int64_t a, int64_t b) {
                if (rank_nan(line[a]) != rank_nan(line[b])) {
                  return desc ? rank_nan(line[a]) > rank_nan(line[b])
                              : rank_nan(line[a]) < rank_nan(line[b]);
                }
                return desc ? key(line[a]) > key(line[b]) : key(line[a]) < key(line[b]);
              });
              for (int64_t t = 0; t < len; ++t) {
                if (r) idx[d] = t;
                const int64_t ol = ravel(idx, shape);
                ASSERT_EQ(get(*i, ol), ord[t]) << "sort dim " << dim << " desc " << desc;
                ASSERT_EQ(get(*ai, ol), ord[t]);
                const double want = line[ord[t]];
                ASSERT_TRUE(std::isnan(want) ? std::isnan(get(*v, ol)) : get(*v, ol) == want);
                if (t < k) {
                  const int64_t kl = ravel(idx, ks);
                  ASSERT_EQ(get(*ti, kl), ord[t]) << "topk";
                  ASSERT_TRUE(std::isnan(want) ? std::isnan(get(*tv, kl)) : get(*tv, kl) == want);
                }
              }
            }
          }
        }
      }
    }
  }
  auto x = zeros(Dims{3, 4}, DType::Float32);
  expect_error([&] { kernels::topk_shape(*x, 5, 1); }, "topk");
  auto v = zeros(Dims{3, 4}, DType::Float32);
  auto i = zeros(Dims{3, 4}, DType::Int32);
  expect_error([&] { kernels::sort_out(*x, 1, false, *v, *i); }, "sort");
}
