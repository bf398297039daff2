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

// x*1, x+0, x-0, x/1 and a transpose pair vanish; the two identical relus become one (CSE).
// CHECK-LABEL: func.func @identities
// CHECK-NEXT: %[[R:.*]] = kiln.relu %arg0
// CHECK-NEXT: return %[[R]], %[[R]]
func.func @identities(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>) {
  %one = kiln.constant dense<1.0> : tensor<f32> : tensor<f32>
  %zero = kiln.constant dense<0.0> : tensor<f32> : tensor<f32>
  %0 = kiln.mul %x, %one : tensor<2x3xf32>, tensor<f32>
  %1 = kiln.add %0, %zero : tensor<2x3xf32>, tensor<f32>
  %2 = kiln.sub %1, %zero : tensor<2x3xf32>, tensor<f32>
  %3 = kiln.div %2, %one : tensor<2x3xf32>, tensor<f32>
  %4 = kiln.transpose %3 {dim0 = 0 : i64, dim1 = 1 : i64} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %5 = kiln.transpose %4 {dim0 = 1 : i64, dim1 = 0 : i64} : (tensor<3x2xf32>) -> tensor<2x3xf32>
  %6 = kiln.relu %5 : tensor<2x3xf32> -> tensor<2x3xf32>
  %7 = kiln.relu %5 : tensor<2x3xf32> -> tensor<2x3xf32>
  return %6, %7 : tensor<2x3xf32>, tensor<2x3xf32>
}

// x*1 where the 1 broadcasts x to a bigger shape is not a no-op and stays.
// CHECK-LABEL: func.func @broadcasting_one_stays
// CHECK: kiln.mul
func.func @broadcasting_one_stays(%x: tensor<3xf32>) -> tensor<2x3xf32> {
  %one = kiln.constant dense<1.0> : tensor<2x3xf32> : tensor<2x3xf32>
  %0 = kiln.mul %x, %one : tensor<3xf32>, tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// reshape(reshape(x)) is one reshape; a reshape/slice/expand to the same type is nothing.
// CHECK-LABEL: func.func @shape_chains
// CHECK-NEXT: %[[R:.*]] = kiln.view %arg0 {shape = array<i64: 6>}
// CHECK-NEXT: return %[[R]], %arg0
func.func @shape_chains(%x: tensor<2x3xf32>) -> (tensor<6xf32>, tensor<2x3xf32>) {
  %0 = kiln.reshape %x {shape = array<i64: 3, 2>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %1 = kiln.view %0 {shape = array<i64: 6>} : (tensor<3x2xf32>) -> tensor<6xf32>
  %2 = kiln.slice %x {dim = 1 : i64, start = 0 : i64, end = 3 : i64, step = 1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %3 = kiln.expand %2 {shape = array<i64: 2, 3>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %1, %3 : tensor<6xf32>, tensor<2x3xf32>
}

// permute(permute(x)) composes; here to the identity.
// CHECK-LABEL: func.func @permutes
// CHECK-NEXT: return %arg0
func.func @permutes(%x: tensor<2x3x4xf32>) -> tensor<2x3x4xf32> {
  %0 = kiln.permute %x {dims = array<i64: 1, 2, 0>} : (tensor<2x3x4xf32>) -> tensor<3x4x2xf32>
  %1 = kiln.permute %0 {dims = array<i64: 2, 0, 1>} : (tensor<3x4x2xf32>) -> tensor<2x3x4xf32>
  return %1 : tensor<2x3x4xf32>
}

// A small constant subgraph folds: [1,2,3]^2 - (-2 * 0.5) = [2,5,10], * 1, then +0.5 and -0.5
// through negative alphas.
// CHECK-LABEL: func.func @constant_fold
// CHECK-NEXT: %[[C:.*]] = kiln.constant dense<[2.000000e+00, 5.000000e+00, 1.000000e+01]>
// CHECK-NEXT: return %[[C]]
func.func @constant_fold() -> tensor<3xf32> {
  %c = kiln.constant dense<[1.0, 2.0, 3.0]> : tensor<3xf32> : tensor<3xf32>
  %h = kiln.constant dense<0.5> : tensor<f32> : tensor<f32>
  %one = kiln.constant dense<1.0> : tensor<f32> : tensor<f32>
  %0 = kiln.mul %c, %c : tensor<3xf32>, tensor<3xf32>
  %1 = kiln.sub %0, %h {alpha = -2.0 : f64} : tensor<3xf32>, tensor<f32>
  %2 = kiln.mul %1, %one : tensor<3xf32>, tensor<f32>
  %3 = kiln.sub %2, %h {alpha = -1.0 : f64} : tensor<3xf32>, tensor<f32>
  %4 = kiln.add %3, %h {alpha = -1.0 : f64} : tensor<3xf32>, tensor<f32>
  return %4 : tensor<3xf32>
}

// Folding respects broadcasting: [[1],[2]] + [10, 20, 30] -> 2x3.
// CHECK-LABEL: func.func @fold_broadcast
// CHECK-NEXT: kiln.constant dense<{{\[\[}}1.100000e+01, 2.100000e+01, 3.100000e+01], [1.200000e+01, 2.200000e+01, 3.200000e+01]]>
func.func @fold_broadcast() -> tensor<2x3xf32> {
  %a = kiln.constant dense<[[1.0], [2.0]]> : tensor<2x1xf32> : tensor<2x1xf32>
  %b = kiln.constant dense<[10.0, 20.0, 30.0]> : tensor<3xf32> : tensor<3xf32>
  %0 = kiln.add %a, %b : tensor<2x1xf32>, tensor<3xf32>
  return %0 : tensor<2x3xf32>
}

// A clone inside the graph is a no-op; a returned clone stays (the caller gets a fresh tensor).
// CHECK-LABEL: func.func @clones
// CHECK-NEXT: %[[E:.*]] = kiln.exp %arg0
// CHECK-NEXT: %[[C:.*]] = kiln.clone %arg0
// CHECK-NEXT: return %[[E]], %[[C]]
func.func @clones(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %0 = kiln.clone %x : tensor<4xf32> -> tensor<4xf32>
  %1 = kiln.exp %0 : tensor<4xf32> -> tensor<4xf32>
  %2 = kiln.clone %x : tensor<4xf32> -> tensor<4xf32>
  return %1, %2 : tensor<4xf32>, tensor<4xf32>
}

// A transpose or permute moving only size-1 dims keeps every element in place: a reshape (a view).
// One that swaps two non-unit dims stays.
// CHECK-LABEL: func.func @unit_dim_transposes
// CHECK-NEXT: %[[A:.*]] = kiln.reshape %arg0 {shape = array<i64: 128, 1, 256>}
// CHECK-NEXT: %[[B:.*]] = kiln.reshape %arg1 {shape = array<i64: 4, 1, 1, 8>}
// CHECK-NEXT: %[[C:.*]] = kiln.transpose %arg2
// CHECK-NEXT: return %[[A]], %[[B]], %[[C]]
func.func @unit_dim_transposes(%x: tensor<1x128x256xf32>, %y: tensor<1x4x8x1xf32>,
                               %z: tensor<1x4x8xf32>)
    -> (tensor<128x1x256xf32>, tensor<4x1x1x8xf32>, tensor<1x8x4xf32>) {
  %0 = kiln.transpose %x {dim0 = 0 : i64, dim1 = 1 : i64} : (tensor<1x128x256xf32>) -> tensor<128x1x256xf32>
  %1 = kiln.permute %y {dims = array<i64: 1, 0, 3, 2>} : (tensor<1x4x8x1xf32>) -> tensor<4x1x1x8xf32>
  %2 = kiln.transpose %z {dim0 = 1 : i64, dim1 = 2 : i64} : (tensor<1x4x8xf32>) -> tensor<1x8x4xf32>
  return %0, %1, %2 : tensor<128x1x256xf32>, tensor<4x1x1x8xf32>, tensor<1x8x4xf32>
}
