// RUN: kiln-opt %s --kiln-fuse-elementwise | FileCheck %s

// A chain of elementwise ops with a broadcast bias becomes one region; the matmul stays outside.
// CHECK-LABEL: func.func @chain
// CHECK: %[[M:.*]] = kiln.matmul
// CHECK-NEXT: %[[F:.*]] = kiln.fused(%[[M]], %arg2) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: ^bb0(%[[A:.*]]: tensor<4x8xf32>, %[[B:.*]]: tensor<8xf32>):
// CHECK-NEXT: %[[S:.*]] = kiln.add %[[A]], %[[B]]
// CHECK-NEXT: %[[T:.*]] = kiln.tanh %[[S]]
// CHECK-NEXT: %[[U:.*]] = kiln.mul %[[T]], %[[T]]
// CHECK-NEXT: kiln.yield %[[U]] : tensor<4x8xf32>
// CHECK: return %[[F]]
func.func @chain(%x: tensor<4x3xf32>, %w: tensor<3x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %0 = kiln.matmul %x, %w : tensor<4x3xf32>, tensor<3x8xf32>
  %1 = kiln.add %0, %b : tensor<4x8xf32>, tensor<8xf32>
  %2 = kiln.tanh %1 : tensor<4x8xf32> -> tensor<4x8xf32>
  %3 = kiln.mul %2, %2 : tensor<4x8xf32>, tensor<4x8xf32>
  return %3 : tensor<4x8xf32>
}

// A value used by a non-elementwise op between two members cannot be hidden in a region that
// ends after that op: exp+neg fuse, the sum reads exp's value, the later add starts anew.
// CHECK-LABEL: func.func @escaping_value
// CHECK: %[[F:.*]]:2 = kiln.fused(%arg0)
// CHECK: kiln.yield
// CHECK: %[[S:.*]] = kiln.sum %[[F]]#0
// CHECK: kiln.add %[[F]]#1, %[[S]]
func.func @escaping_value(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = kiln.exp %x : tensor<4xf32> -> tensor<4xf32>
  %1 = kiln.neg %0 : tensor<4xf32> -> tensor<4xf32>
  %2 = kiln.sum %0 {dims = array<i64>, keepdim = false} : (tensor<4xf32>) -> tensor<f32>
  %3 = kiln.add %1, %2 : tensor<4xf32>, tensor<f32>
  return %3 : tensor<4xf32>
}

// Two independent chains meeting in one op merge into a single region.
// CHECK-LABEL: func.func @merge
// CHECK-NEXT: %[[F:.*]] = kiln.fused(%arg0, %arg1)
// CHECK-COUNT-3: kiln.
// CHECK-NEXT: kiln.yield
// CHECK-NOT: kiln.fused
func.func @merge(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %0 = kiln.exp %x : tensor<4xf32> -> tensor<4xf32>
  %1 = kiln.neg %y : tensor<4xf32> -> tensor<4xf32>
  %2 = kiln.mul %0, %1 : tensor<4xf32>, tensor<4xf32>
  return %2 : tensor<4xf32>
}
