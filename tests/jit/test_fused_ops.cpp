// The passes' fused ops compiled from IR text (compile_module): conv2d_fused / linear_fused go to
// the runtime's kernels with their epilogues, kiln.fused regions become one loop nest. Checked
// against the same computation in eager ops.
#include <gtest/gtest.h>

#include "helpers.h"
#include "kiln/jit/compile.h"
#include "kiln/kiln.h"

using namespace kiln;
using kiln::test::max_rel_error;
using kiln::test::no_disk;
using kiln::test::rnd;

TEST(JitFusedOps, Conv2dFusedBiasResidualRelu) {
  const char* ir = R"mlir(
func.func @forward(%x: tensor<2x3x9x9xf32>, %w: tensor<4x3x3x3xf32>, %b: tensor<4xf32>,
                   %r: tensor<2x4x5x5xf32>) -> tensor<2x4x5x5xf32> {
  %0 = kiln.conv2d_fused %x, %w, %b, %r {stride = array<i64: 2, 2>, padding = array<i64: 1, 1>,
      dilation = array<i64: 1, 1>, groups = 1 : i64, activation = 1 : i64,
      clamp_min = 0.0 : f64, clamp_max = 0.0 : f64}
      : (tensor<2x3x9x9xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>, tensor<2x4x5x5xf32>)
      -> tensor<2x4x5x5xf32>
  return %0 : tensor<2x4x5x5xf32>
})mlir";
  Tensor x = rnd({2, 3, 9, 9}, 1), w = rnd({4, 3, 3, 3}, 2), b = rnd({4}, 3),
         r = rnd({2, 4, 5, 5}, 4);
  Tensor got = jit::compile_module(ir, no_disk())({x, w, b, r})[0];
  Tensor want = relu(conv2d(x, w, b, {2, 2}, {1, 1}) + r);
  EXPECT_LE(max_rel_error(got, want), 1e-5);
}

TEST(JitFusedOps, LinearFusedWithoutResidualClamp) {
  const char* ir = R"mlir(
func.func @forward(%x: tensor<5x7xf32>, %w: tensor<6x7xf32>, %b: tensor<6xf32>) -> tensor<5x6xf32> {
  %n = kiln.none
  %0 = kiln.linear_fused %x, %w, %b, %n {activation = 3 : i64, clamp_min = -0.5 : f64,
      clamp_max = 0.75 : f64} : (tensor<5x7xf32>, tensor<6x7xf32>, tensor<6xf32>, none)
      -> tensor<5x6xf32>
  return %0 : tensor<5x6xf32>
})mlir";
  Tensor x = rnd({5, 7}, 5), w = rnd({6, 7}, 6), b = rnd({6}, 7);
  Tensor got = jit::compile_module(ir, no_disk())({x, w, b})[0];
  EXPECT_LE(max_rel_error(got, clamp(linear(x, w, b), -0.5, 0.75)), 1e-5);
}

TEST(JitFusedOps, FusedRegionWithBroadcastAndTwoResults) {
  const char* ir = R"mlir(
func.func @forward(%x: tensor<4x8xf32>, %a: tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %0:2 = kiln.fused(%x, %a) : (tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  ^bb0(%p: tensor<4x8xf32>, %q: tensor<8xf32>):
    %1 = kiln.mul %p, %q : tensor<4x8xf32>, tensor<8xf32>
    %2 = kiln.tanh %1 : tensor<4x8xf32> -> tensor<4x8xf32>
    %3 = kiln.sigmoid %q : tensor<8xf32> -> tensor<8xf32>
    %4 = kiln.add %2, %3 : tensor<4x8xf32>, tensor<8xf32>
    kiln.yield %4, %1 : tensor<4x8xf32>, tensor<4x8xf32>
  }
  %5 = kiln.relu %0#0 : tensor<4x8xf32> -> tensor<4x8xf32>
  return %5, %0#1 : tensor<4x8xf32>, tensor<4x8xf32>
})mlir";
  Tensor x = rnd({4, 8}, 8), a = rnd({8}, 9);
  TensorList got = jit::compile_module(ir, no_disk())({x, a});
  ASSERT_EQ(got.size(), 2u);
  EXPECT_LE(max_rel_error(got[0], relu(tanh(x * a) + sigmoid(a))), 1e-5);
  EXPECT_LE(max_rel_error(got[1], x * a), 1e-6);
}
