// Views share storage and address the same elements a naive index computation does.
#include <gtest/gtest.h>

#include <limits>
#include <numeric>

#include "kiln/runtime/kernels/copy.h"
#include "kiln/runtime/tensor.h"
#include "kiln/runtime/views.h"

using namespace kiln;

namespace {
TensorImplPtr iota(Dims sizes) {
  auto t = empty(sizes, DType::Float32);
  std::iota(t->data_ptr<float>(), t->data_ptr<float>() + t->numel(), 0.0f);
  return t;
}
// Element at a multi-index, computed from sizes/strides directly.
float at(const TensorImpl& t, std::initializer_list<int64_t> idx) {
  int64_t off = 0, d = 0;
  for (int64_t i : idx) off += i * t.strides()[d++];
  return t.data_ptr<float>()[off];
}
}  // namespace

TEST(Views, TransposeAndPermute) {
  auto t = iota({2, 3, 4});
  auto tt = views::transpose(*t, 0, 2);
  EXPECT_EQ(tt->sizes(), (Dims{4, 3, 2}));
  EXPECT_EQ(tt->storage(), t->storage());
  EXPECT_FALSE(tt->is_contiguous());
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) EXPECT_EQ(at(*tt, {k, j, i}), i * 12 + j * 4 + k);
  auto p = views::permute(*t, Dims{1, 2, 0});
  EXPECT_EQ(p->sizes(), (Dims{3, 4, 2}));
  EXPECT_EQ(at(*p, {2, 1, 1}), 1 * 12 + 2 * 4 + 1);
  EXPECT_THROW(views::permute(*t, Dims{0, 0, 1}), Error);
}

TEST(Views, SliceWithStepNarrowSelect) {
  auto t = iota({10});
  auto s = views::slice(*t, 0, 1, 9, 3);  // 1, 4, 7
  EXPECT_EQ(s->sizes(), (Dims{3}));
  EXPECT_EQ(at(*s, {0}), 1);
  EXPECT_EQ(at(*s, {2}), 7);
  auto neg = views::slice(*t, 0, -3, 100);  // 7, 8, 9
  EXPECT_EQ(neg->sizes(), (Dims{3}));
  EXPECT_EQ(at(*neg, {0}), 7);
  // A step near 2^63: one element (size and stride arithmetic once overflowed).
  const int64_t max = std::numeric_limits<int64_t>::max();
  auto one = views::slice(*t, 0, 2, max, max);
  EXPECT_EQ(one->sizes(), (Dims{1}));
  EXPECT_EQ(at(*one, {0}), 2);
  auto m = iota({3, 4});
  auto row = views::select(*m, 0, -1);
  EXPECT_EQ(row->sizes(), (Dims{4}));
  EXPECT_EQ(at(*row, {1}), 9);
  auto n = views::narrow(*m, 1, 1, 2);
  EXPECT_EQ(n->sizes(), (Dims{3, 2}));
  EXPECT_EQ(at(*n, {2, 1}), 10);
  EXPECT_THROW(views::narrow(*m, 1, 3, 2), Error);
  EXPECT_THROW(views::select(*m, 0, 3), Error);
}

TEST(Views, ViewReshapeFlatten) {
  auto t = iota({2, 3, 4});
  auto v = views::view(*t, Dims{6, -1});
  EXPECT_EQ(v->sizes(), (Dims{6, 4}));
  EXPECT_EQ(v->storage(), t->storage());
  auto tt = views::transpose(*t, 1, 2);  // [2,4,3], not viewable as [8,3]... but [2,12] neither
  EXPECT_THROW(views::view(*tt, Dims{2, 12}), Error);
  auto r = views::reshape(*tt, Dims{2, 12});  // copies
  EXPECT_NE(r->storage(), t->storage());
  EXPECT_EQ(r->data_ptr<float>()[1], at(*tt, {0, 0, 1}));
  // A transposed tensor can still be viewed when only split dims change.
  auto split = views::view(*tt, Dims{2, 2, 2, 3});
  EXPECT_EQ(split->storage(), t->storage());
  EXPECT_EQ(at(*split, {1, 1, 0, 2}), at(*tt, {1, 2, 2}));
  auto f = views::flatten(*t, 1);
  EXPECT_EQ(f->sizes(), (Dims{2, 12}));
  EXPECT_THROW(views::view(*t, Dims{5, -1}), Error);
  EXPECT_THROW(views::view(*t, Dims{-1, -1}), Error);
  auto scalar = empty(Dims{}, DType::Float32);
  EXPECT_EQ(views::view(*scalar, Dims{1, 1})->sizes(), (Dims{1, 1}));
}

TEST(Views, ExpandSqueezeUnsqueeze) {
  auto t = iota({3, 1});
  auto e = views::expand(*t, Dims{2, 3, 4});
  EXPECT_EQ(e->sizes(), (Dims{2, 3, 4}));
  EXPECT_EQ(e->strides(), (Dims{0, 1, 0}));
  EXPECT_EQ(at(*e, {1, 2, 3}), 2);
  EXPECT_THROW(views::expand(*t, Dims{4, 4}), Error);
  auto u = views::unsqueeze(*t, 0);
  EXPECT_EQ(u->sizes(), (Dims{1, 3, 1}));
  auto u_last = views::unsqueeze(*t, -1);
  EXPECT_EQ(u_last->sizes(), (Dims{3, 1, 1}));
  EXPECT_EQ(views::squeeze(*u)->sizes(), (Dims{3}));
  EXPECT_EQ(views::squeeze(*u, 0)->sizes(), (Dims{3, 1}));
  EXPECT_EQ(views::squeeze(*u, 1)->sizes(), (Dims{1, 3, 1}));
}

TEST(Views, AsStridedIsBoundsChecked) {
  auto t = iota({6});
  auto w = views::as_strided(*t, Dims{3, 2}, Dims{2, 1}, 0);  // overlapping windows
  EXPECT_EQ(at(*w, {2, 1}), 5);
  EXPECT_THROW(views::as_strided(*t, Dims{3, 2}, Dims{2, 1}, 1), Error);  // reaches element 6
}

TEST(Views, ContiguousCopiesNonContiguous) {
  auto t = iota({3, 4});
  auto c = views::contiguous(*t);
  EXPECT_EQ(c.get(), t.get());
  auto tt = views::transpose(*t, 0, 1);
  auto cc = views::contiguous(*tt);
  EXPECT_TRUE(cc->is_contiguous());
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(cc->data_ptr<float>()[i * 3 + j], j * 4 + i);
}

TEST(Copy, ConvertsDTypesAndBroadcasts) {
  auto src = iota({1, 4});
  auto dst = empty(Dims{3, 4}, DType::Float16);
  kernels::copy_(*dst, *src);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_EQ(float(dst->data_ptr<Half>()[i * 4 + j]), j);
  auto back = empty(Dims{3, 4}, DType::Int64);
  kernels::copy_(*back, *dst);
  EXPECT_EQ(back->data_ptr<int64_t>()[11], 3);
  auto b = empty(Dims{3, 4}, DType::Bool);
  kernels::copy_(*b, *back);
  EXPECT_FALSE(b->data_ptr<bool>()[0]);
  EXPECT_TRUE(b->data_ptr<bool>()[1]);
  auto bad = empty(Dims{3, 5}, DType::Float32);
  EXPECT_THROW(kernels::copy_(*bad, *src), Error);
}

TEST(Copy, LargeStridedCopyIsExact) {
  auto t = iota({512, 300});
  auto tt = views::transpose(*t, 0, 1);
  auto out = empty(Dims{300, 512}, DType::Float32);
  kernels::copy_(*out, *tt);
  for (int i = 0; i < 300; ++i)
    for (int j = 0; j < 512; ++j) ASSERT_EQ(out->data_ptr<float>()[i * 512 + j], j * 300 + i);
}

// Permuted copies (the tiled transpose path and the element path) for every element width,
// shapes that are and are not multiples of the tile, the contiguous source dim in any position,
// layout changes whose dims merge, a broadcast dim: each destination element against the source
// element its index names.
TEST(Copy, PermutedCopiesMatchTheIndexFormula) {
  const std::vector<std::pair<Dims, Dims>> cases = {
      {{4, 64, 128}, {0, 2, 1}},
      {{3, 17, 33}, {0, 2, 1}},
      {{2, 5, 40, 24}, {0, 3, 1, 2}},
      {{40, 3, 24}, {2, 1, 0}},
      {{7, 9}, {1, 0}},
      {{2, 16, 16, 3}, {3, 1, 2, 0}},
      // NCHW <-> NHWC with few channels or a small plane: dims merged into [C][HW] per image.
      {{2, 3, 20, 21}, {0, 2, 3, 1}},
      {{1, 7, 7, 40}, {0, 3, 1, 2}},
      {{2, 33, 5, 7}, {0, 2, 3, 1}}};
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::UInt8}) {
    for (const auto& [sizes, perm] : cases) {
      auto src = empty(sizes, DType::Int64);
      std::iota(src->data_ptr<int64_t>(), src->data_ptr<int64_t>() + src->numel(), int64_t{0});
      auto typed = empty(sizes, dt);
      kernels::copy_(*typed, *src);  // the values mod 256 for uint8
      auto view = views::permute(*typed, perm);
      auto out = empty(view->sizes(), dt);
      kernels::copy_(*out, *view);
      auto as_long = empty(view->sizes(), DType::Int64);
      kernels::copy_(*as_long, *out);
      const int64_t n = out->numel(), r = static_cast<int64_t>(sizes.size());
      for (int64_t flat = 0; flat < n; ++flat) {
        int64_t rest = flat, source = 0;
        for (int64_t d = r - 1; d >= 0; --d) {
          const int64_t i = rest % view->sizes()[d];
          rest /= view->sizes()[d];
          source += i * src->strides()[perm[d]];
        }
        if (dt == DType::Float16 && source > 2048) continue;  // beyond float16's exact integers
        const int64_t want = dt == DType::UInt8 ? source % 256 : source;
        ASSERT_EQ(as_long->data_ptr<int64_t>()[flat], want)
            << dtype_short_name(dt) << " " << Dims(sizes) << " perm " << Dims(perm) << " at "
            << flat;
      }
    }
  }
  // A broadcast source (stride 0) transposed.
  auto row = iota({1, 24});
  auto wide = views::expand(*row, Dims{20, 24});
  auto t = views::transpose(*wide, 0, 1);
  auto out = empty(Dims{24, 20}, DType::Float32);
  kernels::copy_(*out, *t);
  for (int i = 0; i < 24; ++i)
    for (int j = 0; j < 20; ++j) ASSERT_EQ(out->data_ptr<float>()[i * 20 + j], i);
}
