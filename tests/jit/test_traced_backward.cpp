// Every fused backward traces (issue #28): conv1d, conv_transpose2d, layer norm, group norm,
// embedding, nll_loss, smooth_l1_loss and binary_cross_entropy_with_logits record their gradients
// as kiln.*_backward ops. A step computing the parameters' gradients is traced on one input and
// run by the interpreter, the JIT and a saved artifact on another; each gradient equals eager's on
// that input.

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "helpers.h"
#include "kiln/jit/compile.h"
#include "kiln/jit/save.h"
#include "kiln/kiln.h"
#include "kiln/runtime/model.h"

namespace kiln {
namespace {

using test::max_rel_error;
using test::rnd;
using Loss = std::function<Tensor(const TensorList& params, const TensorList& inputs)>;

// The gradients of loss(params, inputs) with respect to params, as a traceable function.
std::function<TensorList(const TensorList&)> gradients(TensorList& params, const Loss& loss) {
  return [&params, loss](const TensorList& inputs) {
    for (Tensor& p : params) p.set_grad(Tensor());
    Tensor l = loss(params, inputs);
    l.backward();
    TensorList grads;
    for (Tensor& p : params) grads.push_back(p.grad());
    return grads;
  };
}

void expect_traced_gradients_match(TensorList params, const Loss& loss, const TensorList& example,
                                   const TensorList& other, const std::string& backward_op) {
  auto fn = gradients(params, loss);
  jit::TraceOptions quiet;
  quiet.warn_on_read_back = false;
  jit::TracedFunction t = jit::trace(fn, example, quiet);
  EXPECT_NE(t.str().find("kiln." + backward_op), std::string::npos) << t.str();
  const TensorList eager = fn(other);
  const TensorList interpreted = t(other);
  jit::CompileOptions o;
  o.disk_cache = false;
  const TensorList compiled = jit::compile(t, o)(other);
  auto model = rt::Model::from_bytes(jit::save_to_bytes(t));
  rt::Session session(model);
  std::vector<const TensorImpl*> in;
  for (const Tensor& x : other) in.push_back(x.impl());
  auto saved = session.run(std::span<const TensorImpl* const>(in));
  ASSERT_EQ(saved.size(), eager.size());
  for (size_t i = 0; i < eager.size(); ++i) {
    EXPECT_LE(max_rel_error(interpreted[i], eager[i]), 1e-5) << backward_op << " grad " << i;
    EXPECT_LE(max_rel_error(compiled[i], eager[i]), 1e-5) << backward_op << " grad " << i;
    EXPECT_LE(max_rel_error(Tensor(saved[i]), eager[i]), 1e-5) << backward_op << " grad " << i;
  }
}

TEST(TracedBackward, Conv1d) {
  expect_traced_gradients_match(
      {rnd({4, 2, 3}, 1, 0.3).requires_grad_(), rnd({4}, 2).requires_grad_()},
      [](const TensorList& p, const TensorList& x) {
        return sum(conv1d(x[0], p[0], p[1], /*stride=*/2, /*padding=*/1) * x[1]);
      },
      {rnd({2, 2, 9}, 3), rnd({2, 4, 5}, 4)}, {rnd({2, 2, 9}, 5), rnd({2, 4, 5}, 6)},
      "conv1d_backward");
}

// Quantization-aware training: per-channel fake-quantized weights (small scales: part of each row
// is clamped and gets no gradient) and per-tensor fake-quantized activations.
TEST(TracedBackward, FakeQuantize) {
  const Tensor scales = full({4}, 0.004) + rnd({4}, 21, 0.001).abs();
  const Tensor zero_points = zeros({4}, TensorOptions(DType::Int64));
  expect_traced_gradients_match(
      {rnd({4, 6}, 19, 0.5).requires_grad_()},
      [scales, zero_points](const TensorList& p, const TensorList& x) {
        Tensor w = fake_quantize_per_channel_affine(p[0], scales, zero_points, 0, -127, 127);
        Tensor in = fake_quantize_per_tensor_affine(x[0], 0.02, 3, -128, 127);
        return sum(linear(in, w) * x[1]);
      },
      {rnd({3, 6}, 22), rnd({3, 4}, 23)}, {rnd({3, 6}, 24, 3.0), rnd({3, 4}, 25)},
      "fake_quantize_backward");
}

TEST(TracedBackward, ConvTranspose2d) {
  expect_traced_gradients_match(
      {rnd({3, 2, 3, 3}, 7, 0.3).requires_grad_(), rnd({2}, 8).requires_grad_()},
      [](const TensorList& p, const TensorList& x) {
        return sum(conv_transpose2d(x[0], p[0], p[1], 2, 1, 1) * x[1]);
      },
      {rnd({1, 3, 4, 4}, 9), rnd({1, 2, 8, 8}, 10)}, {rnd({1, 3, 4, 4}, 11), rnd({1, 2, 8, 8}, 12)},
      "conv_transpose2d_backward");
}

TEST(TracedBackward, LayerNorm) {
  expect_traced_gradients_match(
      {rnd({6}, 13).requires_grad_(), rnd({6}, 14).requires_grad_()},
      [](const TensorList& p, const TensorList& x) {
        Tensor in = x[0] * 1.0;  // not a leaf: its gradient is computed too
        return sum(layer_norm(in, Dims{6}, p[0], p[1], 1e-5) * x[1]);
      },
      {rnd({3, 6}, 15), rnd({3, 6}, 16)}, {rnd({3, 6}, 17), rnd({3, 6}, 18)},
      "layer_norm_backward");
}

TEST(TracedBackward, GroupNorm) {
  expect_traced_gradients_match(
      {rnd({4}, 19).requires_grad_(), rnd({4}, 20).requires_grad_()},
      [](const TensorList& p, const TensorList& x) {
        return sum(group_norm(x[0], 2, p[0], p[1], 1e-5) * x[1]);
      },
      {rnd({2, 4, 3, 3}, 21), rnd({2, 4, 3, 3}, 22)},
      {rnd({2, 4, 3, 3}, 23), rnd({2, 4, 3, 3}, 24)}, "group_norm_backward");
}

TEST(TracedBackward, Embedding) {
  expect_traced_gradients_match(
      {rnd({7, 3}, 25).requires_grad_()},
      [](const TensorList& p, const TensorList& x) {
        return sum(embedding(p[0], x[0], /*padding_idx=*/2) * x[1]);
      },
      {tensor({1.0, 2.0, 2.0, 6.0}, DType::Int64), rnd({4, 3}, 26)},
      {tensor({0.0, 3.0, 2.0, 3.0}, DType::Int64), rnd({4, 3}, 27)}, "embedding_backward");
}

TEST(TracedBackward, Losses) {
  expect_traced_gradients_match(
      {rnd({4, 5}, 28).requires_grad_()},
      [](const TensorList& p, const TensorList& x) {
        return nll_loss(log_softmax(matmul(x[0], p[0]), 1), x[1], x[2]);
      },
      {rnd({3, 4}, 29), tensor({0.0, 4.0, 2.0}, DType::Int64), rnd({5}, 30).abs()},
      {rnd({3, 4}, 31), tensor({1.0, 1.0, 3.0}, DType::Int64), rnd({5}, 32).abs()},
      "nll_loss_backward");
  expect_traced_gradients_match(
      {rnd({4, 5}, 33).requires_grad_()},
      [](const TensorList& p, const TensorList& x) {
        return smooth_l1_loss(matmul(x[0], p[0]), x[1], Reduction::Mean, 0.5);
      },
      {rnd({3, 4}, 34), rnd({3, 5}, 35)}, {rnd({3, 4}, 36), rnd({3, 5}, 37)},
      "smooth_l1_loss_backward");
  expect_traced_gradients_match(
      {rnd({4, 5}, 38).requires_grad_()},
      [](const TensorList& p, const TensorList& x) {
        return binary_cross_entropy_with_logits(matmul(x[0], p[0]), x[1], x[2], x[3]);
      },
      {rnd({3, 4}, 39), rnd({3, 5}, 40).sigmoid(), rnd({5}, 41).abs(), rnd({5}, 42).abs()},
      {rnd({3, 4}, 43), rnd({3, 5}, 44).sigmoid(), rnd({5}, 45).abs(), rnd({5}, 46).abs()},
      "binary_cross_entropy_with_logits_backward");
}

}  // namespace
}  // namespace kiln
