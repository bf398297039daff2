// Gradients of the matmul family and the NN ops against finite differences (float64), plus
// forward values against hand computations where they are short.
#include <gtest/gtest.h>

#include <random>

#include "kiln/gradcheck.h"
#include "kiln/kiln.h"

using namespace kiln;
using autograd::gradcheck;

namespace {
Tensor rnd(Dims sizes, uint32_t seed, double lo = -1.0, double hi = 1.0, bool grad = true) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Tensor t = kiln::empty(sizes, TensorOptions(DType::Float64));
  for (int64_t i = 0; i < t.numel(); ++i) t.data_ptr<double>()[i] = dist(gen);
  if (grad) t.requires_grad_();
  return t;
}
void expect_gradcheck(const autograd::TensorFn& fn, const TensorList& in, const char* what) {
  auto r = gradcheck(fn, in);
  EXPECT_TRUE(r.ok) << what << ": " << r.message;
}
}  // namespace

TEST(NnOps, MatmulFamily) {
  expect_gradcheck([](const TensorList& v) { return TensorList{matmul(v[0], v[1])}; },
                   {rnd({2, 1, 3, 4}, 1), rnd({5, 4, 2}, 2)}, "batched broadcast matmul");
  expect_gradcheck([](const TensorList& v) { return TensorList{matmul(v[0], v[1])}; },
                   {rnd({4}, 3), rnd({2, 4, 3}, 4)}, "vector @ batch");
  expect_gradcheck([](const TensorList& v) { return TensorList{matmul(v[0], v[1])}; },
                   {rnd({3, 4}, 5), rnd({4}, 6)}, "mv");
  expect_gradcheck([](const TensorList& v) { return TensorList{dot(v[0], v[1])}; },
                   {rnd({5}, 7), rnd({5}, 8)}, "dot");
  expect_gradcheck([](const TensorList& v) { return TensorList{mm(v[0].t(), v[1])}; },
                   {rnd({4, 3}, 9), rnd({4, 2}, 10)}, "mm with transposed operand");
  expect_gradcheck(
      [](const TensorList& v) { return TensorList{addmm(v[0], v[1], v[2], 0.5, 2.0)}; },
      {rnd({3}, 11), rnd({2, 4}, 12), rnd({4, 3}, 13)}, "addmm");
  expect_gradcheck([](const TensorList& v) { return TensorList{linear(v[0], v[1], v[2])}; },
                   {rnd({2, 3, 4}, 14), rnd({5, 4}, 15), rnd({5}, 16)}, "linear");
  EXPECT_THROW(matmul(rnd({2, 3}, 1, -1, 1, false), rnd({4, 2}, 2, -1, 1, false)), Error);
}

TEST(NnOps, HandComputedMatmul) {
  Tensor a = tensor({{1.0, 2.0}, {3.0, 4.0}});
  Tensor b = tensor({{5.0, 6.0}, {7.0, 8.0}});
  Tensor c = matmul(a, b);
  EXPECT_FLOAT_EQ(c.index({0, 0}).item<float>(), 19.0f);
  EXPECT_FLOAT_EQ(c.index({1, 1}).item<float>(), 50.0f);
}

TEST(NnOps, Convolutions) {
  expect_gradcheck(
      [](const TensorList& v) {
        return TensorList{conv2d(v[0], v[1], v[2], {2, 1}, 1, 1, 1)};
      },
      {rnd({2, 3, 5, 4}, 21), rnd({4, 3, 3, 2}, 22), rnd({4}, 23)}, "conv2d stride/pad");
  expect_gradcheck(
      [](const TensorList& v) { return TensorList{conv2d(v[0], v[1], {}, 1, 2, 2, 2)}; },
      {rnd({1, 4, 6, 6}, 24), rnd({2, 2, 3, 3}, 25)}, "conv2d dilation/groups");
  expect_gradcheck([](const TensorList& v) { return TensorList{conv1d(v[0], v[1], v[2], 2, 1)}; },
                   {rnd({2, 2, 7}, 26), rnd({3, 2, 3}, 27), rnd({3}, 28)}, "conv1d");
  expect_gradcheck(
      [](const TensorList& v) { return TensorList{conv_transpose2d(v[0], v[1], v[2], 2, 1, 1)}; },
      {rnd({1, 2, 3, 3}, 29), rnd({2, 3, 3, 3}, 30), rnd({3}, 31)}, "conv_transpose2d");
  try {
    conv2d(rnd({100, 100}, 1, -1, 1, false), rnd({1, 1, 3, 3}, 2, -1, 1, false));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "conv2d");
    EXPECT_NE(std::string(e.what()).find("[100, 100]"), std::string::npos) << e.what();
  }
}

TEST(NnOps, Pooling) {
  expect_gradcheck([](const TensorList& v) { return TensorList{max_pool2d(v[0], 2, 1, 1)}; },
                   {rnd({2, 2, 5, 5}, 41)}, "max_pool2d");
  expect_gradcheck(
      [](const TensorList& v) { return TensorList{avg_pool2d(v[0], 3, 2, 1, true, false)}; },
      {rnd({1, 2, 6, 5}, 42)}, "avg_pool2d");
  expect_gradcheck(
      [](const TensorList& v) {
        return TensorList{adaptive_avg_pool2d(v[0], {2, 3})};
      },
      {rnd({1, 3, 5, 7}, 43)}, "adaptive_avg_pool2d");
  Tensor x = tensor({{1.0, 5.0}, {3.0, 2.0}}).reshape({1, 1, 2, 2});
  EXPECT_FLOAT_EQ(max_pool2d(x, 2).item<float>(), 5.0f);
  EXPECT_FLOAT_EQ(avg_pool2d(x, 2).item<float>(), 2.75f);
}

TEST(NnOps, Interpolate) {
  using O = InterpolateOptions;
  expect_gradcheck(
      [](const TensorList& v) {
        return TensorList{interpolate(v[0], O().size({5, 7}).mode(InterpolateMode::Bilinear))};
      },
      {rnd({2, 2, 3, 4}, 61)}, "bilinear");
  expect_gradcheck(
      [](const TensorList& v) {
        return TensorList{interpolate(
            v[0], O().size({2, 6}).mode(InterpolateMode::Bilinear).align_corners(true))};
      },
      {rnd({1, 3, 4, 3}, 62)}, "bilinear align_corners");
  expect_gradcheck(
      [](const TensorList& v) { return TensorList{interpolate(v[0], O().scale_factor({1.7}))}; },
      {rnd({1, 2, 3, 5}, 63)}, "nearest by scale factor");
  // Sizes as PyTorch computes them: floor(in * scale).
  Tensor x = rnd({1, 1, 5, 4}, 64, -1, 1, false);
  EXPECT_EQ(interpolate(x, O().scale_factor({1.7, 0.6})).sizes(), (Dims{1, 1, 8, 2}));
  EXPECT_EQ(interpolate(x, O().size({3})).sizes(), (Dims{1, 1, 3, 3}));
  // The hand-computed 2x2 -> 4x4 bilinear row of PyTorch's documentation.
  Tensor y = interpolate(tensor({{1.0, 2.0}, {3.0, 4.0}}).reshape({1, 1, 2, 2}),
                         O().scale_factor({2.0}).mode(InterpolateMode::Bilinear));
  EXPECT_FLOAT_EQ(y.index({0, 0, 0, 1}).item<float>(), 1.25f);
  EXPECT_FLOAT_EQ(y.index({0, 0, 1, 2}).item<float>(), 2.25f);
  auto expect_error = [&](const O& o, const char* needle, Tensor in = {}) {
    try {
      interpolate(in.defined() ? in : x, o);
      ADD_FAILURE() << "no error, expected " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.op(), "interpolate");
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(O(), "got neither");
  expect_error(O().size({4, 4}).scale_factor({2.0}), "got both");
  expect_error(O().size({4, 4}).align_corners(false), "align_corners");
  expect_error(O().size({4, 4, 4}), "1 or 2 values");
  expect_error(O().size({0, 4}), "> 0");
  expect_error(O().scale_factor({-1.0}), "scale factor > 0");
  expect_error(O().size({4, 4}), "4-d", rnd({2, 5, 4}, 65, -1, 1, false));
}

TEST(NnOps, Normalization) {
  Tensor rm = zeros({3}, DType::Float64), rv = ones({3}, DType::Float64);
  expect_gradcheck(
      [&](const TensorList& v) {
        return TensorList{batch_norm(v[0], Tensor(), Tensor(), v[1], v[2], true)};
      },
      {rnd({4, 3, 2, 2}, 51), rnd({3}, 52), rnd({3}, 53)}, "batch_norm training");
  expect_gradcheck(
      [&](const TensorList& v) { return TensorList{batch_norm(v[0], rm, rv, v[1], v[2], false)}; },
      {rnd({4, 3, 2}, 54), rnd({3}, 55), rnd({3}, 56)}, "batch_norm eval");
  expect_gradcheck(
      [](const TensorList& v) {
        return TensorList{layer_norm(v[0], Dims{3, 4}, v[1], v[2])};
      },
      {rnd({2, 3, 4}, 57), rnd({3, 4}, 58), rnd({3, 4}, 59)}, "layer_norm");
  expect_gradcheck([](const TensorList& v) { return TensorList{group_norm(v[0], 2, v[1], v[2])}; },
                   {rnd({2, 4, 3}, 60), rnd({4}, 61), rnd({4}, 62)}, "group_norm");
  // Running statistics: mean moves by momentum toward the batch mean, variance is unbiased.
  Tensor x = tensor({{1.0, 2.0}, {3.0, 6.0}});
  Tensor m = zeros({2}), var = ones({2});
  batch_norm(x, m, var, {}, {}, true, 0.5);
  EXPECT_FLOAT_EQ(m.index({0}).item<float>(), 1.0f);           // 0.5 * 0 + 0.5 * 2
  EXPECT_FLOAT_EQ(var.index({1}).item<float>(), 0.5f + 4.0f);  // 0.5 * 1 + 0.5 * var([2,6]) (=8)
}

TEST(NnOps, EmbeddingAndLosses) {
  Tensor idx = tensor({2.0, 0.0, 2.0}, DType::Int64);
  expect_gradcheck([&](const TensorList& v) { return TensorList{embedding(v[0], idx)}; },
                   {rnd({4, 3}, 71)}, "embedding");
  Tensor target = tensor({1.0, 0.0, 3.0}, DType::Int64);
  expect_gradcheck(
      [&](const TensorList& v) {
        return TensorList{cross_entropy(v[0], target, {}, -100, Reduction::Mean, 0.1)};
      },
      {rnd({3, 4}, 72)}, "cross_entropy");
  expect_gradcheck(
      [&](const TensorList& v) {
        return TensorList{nll_loss(log_softmax(v[0], 1), target, {}, 0, Reduction::Sum)};
      },
      {rnd({3, 4}, 73)}, "nll_loss");
  Tensor y = rnd({3, 4}, 74, -1, 1, false);
  expect_gradcheck([&](const TensorList& v) { return TensorList{mse_loss(v[0], y)}; },
                   {rnd({3, 4}, 75)}, "mse_loss");
  expect_gradcheck(
      [&](const TensorList& v) { return TensorList{smooth_l1_loss(v[0], y, Reduction::Sum, 0.5)}; },
      {rnd({3, 4}, 76)}, "smooth_l1_loss");
  Tensor t01 = rnd({3, 4}, 77, 0, 1, false);
  expect_gradcheck(
      [&](const TensorList& v) { return TensorList{binary_cross_entropy_with_logits(v[0], t01)}; },
      {rnd({3, 4}, 78)}, "bce_with_logits");
  // cross_entropy of uniform logits is log(C), by hand.
  Tensor logits = zeros({2, 4});
  EXPECT_NEAR(cross_entropy(logits, tensor({0.0, 3.0}, DType::Int64)).item<double>(), std::log(4.0),
              1e-6);
  EXPECT_THROW(cross_entropy(logits, tensor({0.0, 4.0}, DType::Int64)), Error);
}
