// RUN: kiln-opt %s --kiln-fuse-epilogues | FileCheck %s

// The ResNet basic-block tail: relu(conv(x) + identity) -> one conv2d_fused with a residual.
// CHECK-LABEL: func.func @conv_residual_relu
// CHECK: %[[F:.*]] = kiln.conv2d_fused %arg0, %arg1, %arg2, %arg3 {activation = 1 : i64
// CHECK-NOT: kiln.add
// CHECK-NOT: kiln.relu
// CHECK: return %[[F]]
func.func @conv_residual_relu(%x: tensor<1x2x4x4xf32>, %w: tensor<2x2x3x3xf32>, %b: tensor<2xf32>, %id: tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32> {
  %0 = kiln.conv2d %x, %w, %b {dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 1, 1>, stride = array<i64: 1, 1>} : (tensor<1x2x4x4xf32>, tensor<2x2x3x3xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
  %1 = kiln.add %0, %id : tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>
  %2 = kiln.relu %1 : tensor<1x2x4x4xf32> -> tensor<1x2x4x4xf32>
  return %2 : tensor<1x2x4x4xf32>
}

// MobileNet's ReLU6 is clamp(0, 6): activation 2 (relu6) with its bounds.
// CHECK-LABEL: func.func @conv_relu6
// CHECK: kiln.conv2d_fused %arg0, %arg1, %{{.*}}, %{{.*}} {activation = 2 : i64, clamp_max = 6.000000e+00 : f64, clamp_min = 0.000000e+00 : f64
func.func @conv_relu6(%x: tensor<1x2x4x4xf32>, %w: tensor<2x1x3x3xf32>) -> tensor<1x2x4x4xf32> {
  %none = kiln.none
  %0 = kiln.conv2d %x, %w, %none {dilation = array<i64: 1, 1>, groups = 2 : i64, padding = array<i64: 1, 1>, stride = array<i64: 1, 1>} : (tensor<1x2x4x4xf32>, tensor<2x1x3x3xf32>, none) -> tensor<1x2x4x4xf32>
  %1 = kiln.clamp %0 {max = 6.0 : f64, min = 0.0 : f64} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  return %1 : tensor<1x2x4x4xf32>
}

// A per-channel constant add merges into the (absent) bias; a general clamp is activation 3.
// CHECK-LABEL: func.func @conv_bias_add_clamp
// CHECK: %[[B:.*]] = kiln.constant dense<[1.000000e+00, 2.000000e+00]>
// CHECK: kiln.conv2d_fused %arg0, %arg1, %[[B]], %{{.*}} {activation = 3 : i64, clamp_max = 1.000000e+00 : f64, clamp_min = -1.000000e+00 : f64
func.func @conv_bias_add_clamp(%x: tensor<1x2x4x4xf32>, %w: tensor<2x2x1x1xf32>) -> tensor<1x2x4x4xf32> {
  %none = kiln.none
  %c = kiln.constant dense<[[[1.0]], [[2.0]]]> : tensor<2x1x1xf32> : tensor<2x1x1xf32>
  %0 = kiln.conv2d %x, %w, %none {dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>, none) -> tensor<1x2x4x4xf32>
  %1 = kiln.add %0, %c : tensor<1x2x4x4xf32>, tensor<2x1x1xf32>
  %2 = kiln.clamp %1 {max = 1.0 : f64, min = -1.0 : f64} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  return %2 : tensor<1x2x4x4xf32>
}

// A conv whose output is also used elsewhere keeps its relu separate (both values are needed).
// CHECK-LABEL: func.func @multi_use_stays
// CHECK: kiln.conv2d %arg0
// CHECK: kiln.relu
func.func @multi_use_stays(%x: tensor<1x2x4x4xf32>, %w: tensor<2x2x1x1xf32>) -> (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) {
  %none = kiln.none
  %0 = kiln.conv2d %x, %w, %none {dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>, none) -> tensor<1x2x4x4xf32>
  %1 = kiln.relu %0 : tensor<1x2x4x4xf32> -> tensor<1x2x4x4xf32>
  return %0, %1 : tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>
}

// Linear + gelu(tanh) -> linear_fused activation 5; a broadcasting add is not a residual.
// CHECK-LABEL: func.func @linear_gelu
// CHECK: %[[L:.*]] = kiln.linear_fused %arg0, %arg1, %arg2, %{{.*}} {activation = 5 : i64
// CHECK: kiln.add %arg3, %[[L]]
func.func @linear_gelu(%x: tensor<3x4xf32>, %w: tensor<5x4xf32>, %b: tensor<5xf32>, %r: tensor<2x3x5xf32>) -> tensor<2x3x5xf32> {
  %0 = kiln.linear %x, %w, %b : (tensor<3x4xf32>, tensor<5x4xf32>, tensor<5xf32>) -> tensor<3x5xf32>
  %1 = kiln.gelu %0 {approximate = true} : (tensor<3x5xf32>) -> tensor<3x5xf32>
  %2 = kiln.add %r, %1 : tensor<2x3x5xf32>, tensor<3x5xf32>
  return %2 : tensor<2x3x5xf32>
}
