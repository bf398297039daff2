// RUN: kiln-opt %s --kiln-fold-batch-norm | FileCheck %s

// conv (no bias) + eval batch_norm -> conv with W' = W * g / sqrt(v + eps), b' = (0 - m) * s + beta.
// Channel 0: s = 2 / sqrt(3 + 1) = 1, W' = 2 * 1 = 2, b' = (0 - 1) * 1 + 0.5 = -0.5.
// Channel 1: s = 2 / sqrt(0 + 1) = 2, W' = 3 * 2 = 6, b' = (0 - 2) * 2 + 0 = -4.
// CHECK-LABEL: func.func @conv_bn
// CHECK-DAG: %[[W:.*]] = kiln.constant dense<{{\[\[\[\[}}2.000000e+00]]], {{\[\[\[}}6.000000e+00]]]]>
// CHECK-DAG: %[[B:.*]] = kiln.constant dense<[-5.000000e-01, -4.000000e+00]>
// CHECK: %[[C:.*]] = kiln.conv2d %arg0, %[[W]], %[[B]]
// CHECK-NOT: kiln.batch_norm
// CHECK: return %[[C]]
func.func @conv_bn(%x: tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32> {
  %w = kiln.constant dense<[[[[2.0]]], [[[3.0]]]]> : tensor<2x1x1x1xf32> : tensor<2x1x1x1xf32>
  %none = kiln.none
  %m = kiln.constant dense<[1.0, 2.0]> : tensor<2xf32> : tensor<2xf32>
  %v = kiln.constant dense<[3.0, 0.0]> : tensor<2xf32> : tensor<2xf32>
  %g = kiln.constant dense<[2.0, 2.0]> : tensor<2xf32> : tensor<2xf32>
  %b = kiln.constant dense<[0.5, 0.0]> : tensor<2xf32> : tensor<2xf32>
  %0 = kiln.conv2d %x, %w, %none {dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (tensor<1x1x4x4xf32>, tensor<2x1x1x1xf32>, none) -> tensor<1x2x4x4xf32>
  %1 = kiln.batch_norm %0, %m, %v, %g, %b {eps = 1.0 : f64, momentum = 0.1 : f64, training = false} : (tensor<1x2x4x4xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
  return %1 : tensor<1x2x4x4xf32>
}

// Training-mode batch_norm (batch statistics) never folds.
// CHECK-LABEL: func.func @training_bn_stays
// CHECK: kiln.batch_norm
func.func @training_bn_stays(%x: tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32> {
  %w = kiln.constant dense<[[[[1.0]]], [[[3.0]]]]> : tensor<2x1x1x1xf32> : tensor<2x1x1x1xf32>
  %none = kiln.none
  %m = kiln.constant dense<[1.0, 2.0]> : tensor<2xf32> : tensor<2xf32>
  %v = kiln.constant dense<[3.0, 0.0]> : tensor<2xf32> : tensor<2xf32>
  %0 = kiln.conv2d %x, %w, %none {dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (tensor<1x1x4x4xf32>, tensor<2x1x1x1xf32>, none) -> tensor<1x2x4x4xf32>
  %1 = kiln.batch_norm %0, %m, %v, %none, %none {eps = 1.0 : f64, momentum = 0.1 : f64, training = true} : (tensor<1x2x4x4xf32>, tensor<2xf32>, tensor<2xf32>, none, none) -> tensor<1x2x4x4xf32>
  return %1 : tensor<1x2x4x4xf32>
}

// Weights that are still arguments (not frozen) cannot fold.
// CHECK-LABEL: func.func @unfrozen_stays
// CHECK: kiln.batch_norm
func.func @unfrozen_stays(%x: tensor<3x2xf32>, %w: tensor<2x2xf32>) -> tensor<3x2xf32> {
  %none = kiln.none
  %m = kiln.constant dense<[1.0, 2.0]> : tensor<2xf32> : tensor<2xf32>
  %v = kiln.constant dense<[3.0, 0.0]> : tensor<2xf32> : tensor<2xf32>
  %0 = kiln.linear %x, %w, %none : (tensor<3x2xf32>, tensor<2x2xf32>, none) -> tensor<3x2xf32>
  %1 = kiln.batch_norm %0, %m, %v, %none, %none {eps = 1.0 : f64, momentum = 0.1 : f64, training = false} : (tensor<3x2xf32>, tensor<2xf32>, tensor<2xf32>, none, none) -> tensor<3x2xf32>
  return %1 : tensor<3x2xf32>
}

// linear + eval batch_norm over [N, C]: rows of W scale; bias 1 -> (1 - 1) * 1 + 0 = 0, (1 - 2) * 1 = -1.
// CHECK-LABEL: func.func @linear_bn
// CHECK-DAG: %[[W:.*]] = kiln.constant dense<{{\[\[}}1.000000e+00, 2.000000e+00], [3.000000e+00, 4.000000e+00]]>
// CHECK-DAG: %[[B:.*]] = kiln.constant dense<[0.000000e+00, -1.000000e+00]>
// CHECK: kiln.linear %arg0, %[[W]], %[[B]]
// CHECK-NOT: kiln.batch_norm
func.func @linear_bn(%x: tensor<3x2xf32>) -> tensor<3x2xf32> {
  %none = kiln.none
  %w = kiln.constant dense<[[0.5, 1.0], [3.0, 4.0]]> : tensor<2x2xf32> : tensor<2x2xf32>
  %bias = kiln.constant dense<[1.0, 1.0]> : tensor<2xf32> : tensor<2xf32>
  %m = kiln.constant dense<[1.0, 2.0]> : tensor<2xf32> : tensor<2xf32>
  %v = kiln.constant dense<[0.0, 0.0]> : tensor<2xf32> : tensor<2xf32>
  %g = kiln.constant dense<[2.0, 1.0]> : tensor<2xf32> : tensor<2xf32>
  %0 = kiln.linear %x, %w, %bias : (tensor<3x2xf32>, tensor<2x2xf32>, tensor<2xf32>) -> tensor<3x2xf32>
  %1 = kiln.batch_norm %0, %m, %v, %g, %none {eps = 1.0 : f64, momentum = 0.1 : f64, training = false} : (tensor<3x2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, none) -> tensor<3x2xf32>
  return %1 : tensor<3x2xf32>
}
