// Gradients of indexing, joining and padding ops against finite differences (float64).
#include <gtest/gtest.h>

#include <random>

#include "kiln/gradcheck.h"
#include "kiln/kiln.h"

using namespace kiln;

namespace {
Tensor rnd(Dims sizes, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-1, 1);
  Tensor t = kiln::empty(sizes, TensorOptions(DType::Float64));
  for (int64_t i = 0; i < t.numel(); ++i) t.data_ptr<double>()[i] = dist(gen);
  return t.requires_grad_();
}
Tensor ints(std::initializer_list<double> v) {
  return tensor(v, DType::Int64);
}
void check(const autograd::TensorFn& fn, const TensorList& in, const char* what) {
  auto r = autograd::gradcheck(fn, in);
  EXPECT_TRUE(r.ok) << what << ": " << r.message;
}
}  // namespace

TEST(IndexingOps, SelectGatherScatter) {
  Tensor idx = ints({2, 0, 2});
  check([&](const TensorList& v) { return TensorList{index_select(v[0], 1, idx)}; },
        {rnd({2, 3}, 1)}, "index_select");
  Tensor gidx = tensor({{0.0, 2.0}, {1.0, 1.0}}, DType::Int64);
  check([&](const TensorList& v) { return TensorList{gather(v[0], 1, gidx)}; }, {rnd({2, 3}, 2)},
        "gather");
  Tensor sidx = tensor({{0.0, 2.0}, {1.0, 0.0}}, DType::Int64);
  check([&](const TensorList& v) { return TensorList{scatter(v[0], 1, sidx, v[1])}; },
        {rnd({2, 3}, 3), rnd({2, 2}, 4)}, "scatter");
  check([&](const TensorList& v) { return TensorList{scatter_add(v[0], 1, gidx, v[1])}; },
        {rnd({2, 3}, 5), rnd({2, 2}, 6)}, "scatter_add");
  check([&](const TensorList& v) { return TensorList{index_add(v[0], 0, idx, v[1], 0.5)}; },
        {rnd({3, 2}, 7), rnd({3, 2}, 8)}, "index_add");
  check(
      [&](const TensorList& v) {
        return TensorList{index_copy(v[0], 1, ints({2, 0}), v[1])};
      },
      {rnd({2, 3}, 17), rnd({2, 2}, 18)}, "index_copy");
  Tensor mask = tensor({1.0, 0.0, 1.0}, DType::Bool);
  check([&](const TensorList& v) { return TensorList{masked_fill(v[0], mask, 2.0)}; },
        {rnd({2, 3}, 9)}, "masked_fill");
  EXPECT_THROW(index_select(rnd({2, 3}, 1), 1, ints({3})), Error);
}

TEST(IndexingOps, JoinSplitPad) {
  check(
      [](const TensorList& v) {
        return TensorList{cat({v[0], v[1]}, 1)};
      },
      {rnd({2, 1}, 11), rnd({2, 3}, 12)}, "cat");
  check(
      [](const TensorList& v) {
        return TensorList{stack({v[0], v[1]}, -1)};
      },
      {rnd({2, 3}, 13), rnd({2, 3}, 14)}, "stack");
  check([](const TensorList& v) { return split(v[0], 2, 1); }, {rnd({2, 5}, 15)}, "split");
  check([](const TensorList& v) { return chunk(v[0], 2, 0); }, {rnd({3, 2}, 16)}, "chunk");
  check(
      [](const TensorList& v) {
        return TensorList{pad(v[0], {1, 2, 0, 1}, PadMode::Constant, 3.0)};
      },
      {rnd({2, 3, 4}, 17)}, "pad constant");
  check(
      [](const TensorList& v) {
        return TensorList{pad(v[0], {2, 1}, PadMode::Reflect)};
      },
      {rnd({2, 4}, 18)}, "pad reflect");
  check(
      [](const TensorList& v) {
        return TensorList{pad(v[0], {1, 3, 2, 0}, PadMode::Replicate)};
      },
      {rnd({1, 3, 3}, 19)}, "pad replicate");
  // Reflect by hand: [1,2,3] padded (2,1) -> [3,2,1,2,3,2].
  Tensor r = pad(tensor({1.0, 2.0, 3.0}).reshape({1, 3}), {2, 1}, PadMode::Reflect);
  const float expect[] = {3, 2, 1, 2, 3, 2};
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(r.index({0, i}).item<float>(), expect[i]);
}

TEST(IndexingOps, SortTopkOneHot) {
  check([](const TensorList& v) { return TensorList{topk(v[0], 2, 1).first}; }, {rnd({3, 4}, 21)},
        "topk");
  check([](const TensorList& v) { return TensorList{sort(v[0], 0, true).first}; },
        {rnd({4, 2}, 22)}, "sort");
  Tensor oh = one_hot(ints({0, 2}), 3);
  EXPECT_EQ(oh.sizes(), (Dims{2, 3}));
  EXPECT_EQ(oh.index({1, 2}).item<int64_t>(), 1);
  auto [v, i] = topk(tensor({1.0, 5.0, 3.0}), 2);
  EXPECT_FLOAT_EQ(v.index({0}).item<float>(), 5.0f);
  EXPECT_EQ(i.index({1}).item<int64_t>(), 2);
}
