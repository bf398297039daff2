// RUN: kiln-opt %s --kiln-fuse-conv-avgpool | FileCheck %s

// A classifier head: 1x1 conv + bias + relu6, then the pool to 1x1: one kiln.conv2d_avgpool with
// the conv's operands and attributes, typed as the pool's result.
// CHECK-LABEL: func.func @head
// CHECK-NOT: kiln.conv2d_fused
// CHECK-NOT: kiln.adaptive_avg_pool2d
// CHECK: %[[H:.*]] = kiln.conv2d_avgpool %arg0, %arg1, %arg2 {activation = 2 : i64, clamp_max = 6.000000e+00 : f64, clamp_min = 0.000000e+00 : f64, dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (tensor<2x8x7x7xf32>, tensor<16x8x1x1xf32>, tensor<16xf32>) -> tensor<2x16x1x1xf32>
// CHECK-NOT: kiln.conv2d_fused
// CHECK-NOT: kiln.adaptive_avg_pool2d
// CHECK: return %[[H]]
func.func @head(%x: tensor<2x8x7x7xf32>, %w: tensor<16x8x1x1xf32>, %b: tensor<16xf32>) -> tensor<2x16x1x1xf32> {
  %none = kiln.none
  %y = kiln.conv2d_fused %x, %w, %b, %none {activation = 2 : i64, clamp_max = 6.0 : f64, clamp_min = 0.0 : f64, dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (tensor<2x8x7x7xf32>, tensor<16x8x1x1xf32>, tensor<16xf32>, none) -> tensor<2x16x7x7xf32>
  %p = kiln.adaptive_avg_pool2d %y {output_size = array<i64: 1, 1>} : (tensor<2x16x7x7xf32>) -> tensor<2x16x1x1xf32>
  return %p : tensor<2x16x1x1xf32>
}

// A plain kiln.conv2d (3x3, strided, no bias) fuses too, with no activation.
// CHECK-LABEL: func.func @plain_conv
// CHECK-NOT: kiln.conv2d %
// CHECK-NOT: kiln.adaptive_avg_pool2d
// CHECK: kiln.conv2d_avgpool %arg0, %arg1, %{{.*}} {activation = 0 : i64, clamp_max = 0.000000e+00 : f64, clamp_min = 0.000000e+00 : f64, dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 1, 1>, stride = array<i64: 2, 2>} : (tensor<1x3x9x9xf32>, tensor<4x3x3x3xf32>, none) -> tensor<1x4x1x1xf32>
// CHECK-NOT: kiln.conv2d %
// CHECK-NOT: kiln.adaptive_avg_pool2d
func.func @plain_conv(%x: tensor<1x3x9x9xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<1x4x1x1xf32> {
  %none = kiln.none
  %y = kiln.conv2d %x, %w, %none {dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 1, 1>, stride = array<i64: 2, 2>} : (tensor<1x3x9x9xf32>, tensor<4x3x3x3xf32>, none) -> tensor<1x4x5x5xf32>
  %p = kiln.adaptive_avg_pool2d %y {output_size = array<i64: 1, 1>} : (tensor<1x4x5x5xf32>) -> tensor<1x4x1x1xf32>
  return %p : tensor<1x4x1x1xf32>
}

// Left alone: a residual (ResNet's last block: it is added at every position before the relu),
// a map that is also returned, and a pool to 2x2.
// CHECK-LABEL: func.func @not_fused
// CHECK-NOT: kiln.conv2d_avgpool
// CHECK-COUNT-3: kiln.adaptive_avg_pool2d
// CHECK-NOT: kiln.conv2d_avgpool
func.func @not_fused(%x: tensor<1x8x7x7xf32>, %w: tensor<8x8x1x1xf32>) -> (tensor<1x8x1x1xf32>, tensor<1x8x1x1xf32>, tensor<1x8x7x7xf32>, tensor<1x8x2x2xf32>) {
  %none = kiln.none
  %r = kiln.conv2d_fused %x, %w, %none, %x {activation = 1 : i64, clamp_max = 0.0 : f64, clamp_min = 0.0 : f64, dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (tensor<1x8x7x7xf32>, tensor<8x8x1x1xf32>, none, tensor<1x8x7x7xf32>) -> tensor<1x8x7x7xf32>
  %p0 = kiln.adaptive_avg_pool2d %r {output_size = array<i64: 1, 1>} : (tensor<1x8x7x7xf32>) -> tensor<1x8x1x1xf32>
  %y = kiln.conv2d %x, %w, %none {dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (tensor<1x8x7x7xf32>, tensor<8x8x1x1xf32>, none) -> tensor<1x8x7x7xf32>
  %p1 = kiln.adaptive_avg_pool2d %y {output_size = array<i64: 1, 1>} : (tensor<1x8x7x7xf32>) -> tensor<1x8x1x1xf32>
  %z = kiln.conv2d %x, %w, %none {dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (tensor<1x8x7x7xf32>, tensor<8x8x1x1xf32>, none) -> tensor<1x8x7x7xf32>
  %p2 = kiln.adaptive_avg_pool2d %z {output_size = array<i64: 2, 2>} : (tensor<1x8x7x7xf32>) -> tensor<1x8x2x2xf32>
  return %p0, %p1, %y, %p2 : tensor<1x8x1x1xf32>, tensor<1x8x1x1xf32>, tensor<1x8x7x7xf32>, tensor<1x8x2x2xf32>
}
