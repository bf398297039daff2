// RUN: kiln-opt %s --kiln-inference-pipeline | FileCheck %s

// A frozen conv-bn-relu6 followed by an elementwise tail: bn folds into the conv, relu6 fuses
// into its epilogue, the tail becomes one kiln.fused, the layout decision is recorded.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: kiln.conv_layout = "nchw"
// CHECK-NOT: kiln.batch_norm
// CHECK: %[[C:.*]] = kiln.conv2d_fused %arg0, {{.*}} {activation = 2 : i64
// CHECK: kiln.fused(%[[C]]
// CHECK: kiln.sigmoid
// CHECK: kiln.yield
func.func @forward(%x: tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32> attributes {kiln.arg_names = ["input0"], kiln.num_outputs = 1 : i64} {
  %w = kiln.constant dense<[[[[2.0]]], [[[3.0]]]]> : tensor<2x1x1x1xf32> : tensor<2x1x1x1xf32>
  %none = kiln.none
  %m = kiln.constant dense<[1.0, 2.0]> : tensor<2xf32> : tensor<2xf32>
  %v = kiln.constant dense<[3.0, 0.0]> : tensor<2xf32> : tensor<2xf32>
  %two = kiln.constant dense<2.0> : tensor<f32> : tensor<f32>
  %0 = kiln.conv2d %x, %w, %none {dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (tensor<1x1x4x4xf32>, tensor<2x1x1x1xf32>, none) -> tensor<1x2x4x4xf32>
  %1 = kiln.batch_norm %0, %m, %v, %none, %none {eps = 1.0 : f64, momentum = 0.1 : f64, training = false} : (tensor<1x2x4x4xf32>, tensor<2xf32>, tensor<2xf32>, none, none) -> tensor<1x2x4x4xf32>
  %2 = kiln.clamp %1 {max = 6.0 : f64, min = 0.0 : f64} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %3 = kiln.sigmoid %2 : tensor<1x2x4x4xf32> -> tensor<1x2x4x4xf32>
  %4 = kiln.mul %3, %two : tensor<1x2x4x4xf32>, tensor<f32>
  return %4 : tensor<1x2x4x4xf32>
}
