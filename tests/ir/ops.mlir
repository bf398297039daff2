// Round trip: parse, verify, print, parse the print again.
// RUN: kiln-opt %s | kiln-opt | FileCheck %s

// CHECK-LABEL: func.func @elementwise
func.func @elementwise(%a: tensor<2x1xf32>, %b: tensor<3xf32>, %i: tensor<3xi32>) -> tensor<2x3xf32> {
  // CHECK: %[[S:.*]] = kiln.add %{{.*}}, %{{.*}} : tensor<2x1xf32>, tensor<3xf32>
  %0 = kiln.add %a, %b : tensor<2x1xf32>, tensor<3xf32>
  // CHECK: kiln.mul %[[S]], %{{.*}} : tensor<2x3xf32>, tensor<3xi32>
  %1 = kiln.mul %0, %i : tensor<2x3xf32>, tensor<3xi32>
  // CHECK: kiln.relu %{{.*}} : tensor<2x3xf32>
  %2 = kiln.relu %1 : tensor<2x3xf32> -> tensor<2x3xf32>
  return %2 : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @matmul
func.func @matmul(%a: tensor<8x2x3xf32>, %b: tensor<3x5xf32>) -> tensor<8x2x5xf32> {
  // CHECK: kiln.matmul %{{.*}}, %{{.*}} : tensor<8x2x3xf32>, tensor<3x5xf32>
  %0 = kiln.matmul %a, %b : tensor<8x2x3xf32>, tensor<3x5xf32>
  return %0 : tensor<8x2x5xf32>
}

// 1-D operands as torch.matmul takes them: dot (0-dim), row vector times matrices (the row dim
// dropped), matrix times vector.
// CHECK-LABEL: func.func @matmul_vectors
func.func @matmul_vectors(%v: tensor<3xf32>, %m: tensor<4x3x5xf32>, %w: tensor<2x3xf32>)
    -> (tensor<f32>, tensor<4x5xf32>, tensor<2xf32>) {
  // CHECK: kiln.matmul %{{.*}}, %{{.*}} : tensor<3xf32>, tensor<3xf32>
  %0 = kiln.matmul %v, %v : tensor<3xf32>, tensor<3xf32>
  %1 = kiln.matmul %v, %m : tensor<3xf32>, tensor<4x3x5xf32>
  %2 = kiln.matmul %w, %v : tensor<2x3xf32>, tensor<3xf32>
  return %0, %1, %2 : tensor<f32>, tensor<4x5xf32>, tensor<2xf32>
}

// CHECK-LABEL: func.func @interpolate
func.func @interpolate(%x: tensor<2x3x5x4xf32>) -> tensor<2x3x5x4xf32> {
  // CHECK: %[[U:.*]] = kiln.interpolate %{{.*}} {align_corners = false, mode = 1 : i64, output_size = array<i64: 8, 6>, scale_h = 1.700000e+00 : f64, scale_w = 1.700000e+00 : f64} : (tensor<2x3x5x4xf32>) -> tensor<2x3x8x6xf32>
  %0 = kiln.interpolate %x {mode = 1 : i64, align_corners = false, scale_h = 1.7 : f64, scale_w = 1.7 : f64, output_size = array<i64: 8, 6>} : (tensor<2x3x5x4xf32>) -> tensor<2x3x8x6xf32>
  // CHECK: kiln.interpolate_backward %[[U]] {{.*}}input_size = array<i64: 5, 4>, mode = 1 : i64{{.*}} -> tensor<2x3x5x4xf32>
  %1 = kiln.interpolate_backward %0 {mode = 1 : i64, align_corners = false, scale_h = 1.7 : f64, scale_w = 1.7 : f64, input_size = array<i64: 5, 4>} : (tensor<2x3x8x6xf32>) -> tensor<2x3x5x4xf32>
  return %1 : tensor<2x3x5x4xf32>
}
