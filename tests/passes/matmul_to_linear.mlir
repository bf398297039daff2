// RUN: kiln-opt %s --kiln-matmul-to-linear | FileCheck %s

// A matmul by a constant [3, 2] matrix: kiln.linear with the transposed [2, 3] constant (rows of
// the new weight are the old columns), the old constant gone.
// CHECK-LABEL: func.func @constant_weight
// CHECK-NOT: kiln.matmul
// CHECK-DAG: %[[W:.*]] = kiln.constant dense<{{\[\[}}1.000000e+00, 3.000000e+00, 5.000000e+00], [2.000000e+00, 4.000000e+00, 6.000000e+00]]> : tensor<2x3xf32>
// CHECK-DAG: %[[N:.*]] = kiln.none
// CHECK: %[[L:.*]] = kiln.linear %arg0, %[[W]], %[[N]] : (tensor<4x5x3xf32>, tensor<2x3xf32>, none) -> tensor<4x5x2xf32>
// CHECK-NOT: dense<{{\[\[}}1.000000e+00, 2.000000e+00
// CHECK: return %[[L]]
func.func @constant_weight(%x: tensor<4x5x3xf32>) -> tensor<4x5x2xf32> {
  %w = kiln.constant dense<[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]> : tensor<3x2xf32> : tensor<3x2xf32>
  %y = kiln.matmul %x, %w : tensor<4x5x3xf32>, tensor<3x2xf32>
  return %y : tensor<4x5x2xf32>
}

// Left alone: a weight that is an argument, a shared constant, a float64 product, a batched
// (rank-3) constant.
// CHECK-LABEL: func.func @not_rewritten
// CHECK-NOT: kiln.linear
// CHECK-COUNT-5: kiln.matmul
// CHECK-NOT: kiln.linear
func.func @not_rewritten(%x: tensor<4x3xf32>, %w: tensor<3x2xf32>, %xd: tensor<4x3xf64>) -> (tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf64>, tensor<2x4x2xf32>) {
  %c = kiln.constant dense<[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]> : tensor<3x2xf32> : tensor<3x2xf32>
  %cd = kiln.constant dense<[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]> : tensor<3x2xf64> : tensor<3x2xf64>
  %c3 = kiln.constant dense<1.5> : tensor<2x3x2xf32> : tensor<2x3x2xf32>
  %0 = kiln.matmul %x, %w : tensor<4x3xf32>, tensor<3x2xf32>
  %1 = kiln.matmul %x, %c : tensor<4x3xf32>, tensor<3x2xf32>
  %2 = kiln.matmul %x, %c : tensor<4x3xf32>, tensor<3x2xf32>
  %3 = kiln.matmul %xd, %cd : tensor<4x3xf64>, tensor<3x2xf64>
  %4 = kiln.matmul %x, %c3 : tensor<4x3xf32>, tensor<2x3x2xf32>
  return %0, %1, %2, %3, %4 : tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf64>, tensor<2x4x2xf32>
}
