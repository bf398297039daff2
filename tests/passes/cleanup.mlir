// RUN: kiln-opt %s --kiln-cleanup | FileCheck %s

// relu(relu(x)) folds to relu(x); the unused add disappears.
// CHECK-LABEL: func.func @double_relu
// CHECK-NEXT: %[[R:.*]] = kiln.relu %arg0
// CHECK-NEXT: return %[[R]]
func.func @double_relu(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = kiln.relu %x : tensor<4xf32> -> tensor<4xf32>
  %1 = kiln.relu %0 : tensor<4xf32> -> tensor<4xf32>
  %dead = kiln.add %0, %1 : tensor<4xf32>, tensor<4xf32>
  return %1 : tensor<4xf32>
}
