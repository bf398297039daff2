// RUN: kiln-opt %s --kiln-choose-layout | FileCheck %s

// The runtime runs conv in NCHW only: the decision is recorded, nothing is inserted.
// CHECK-LABEL: func.func @conv
// CHECK-SAME: kiln.conv_layout = "nchw"
// CHECK-NEXT: kiln.none
// CHECK-NEXT: kiln.conv2d
// CHECK-NEXT: return
func.func @conv(%x: tensor<1x2x4x4xf32>, %w: tensor<2x2x1x1xf32>) -> tensor<1x2x4x4xf32> {
  %none = kiln.none
  %0 = kiln.conv2d %x, %w, %none {dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>, none) -> tensor<1x2x4x4xf32>
  return %0 : tensor<1x2x4x4xf32>
}
