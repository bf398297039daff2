// RUN: kiln-opt %s --kiln-fuse-block-prologues | FileCheck %s

// A linear's input computed by a chain (a residual add, a relu, a mask): the chain is marked to
// run as the linear's block prologue and moves down to just before it, past the unrelated op.
// CHECK-LABEL: func.func @masked_projection
// CHECK: kiln.exp %arg4
// CHECK-NEXT: %[[P:.*]] = kiln.fused(%arg0, %arg1, %arg2) {kiln.block_prologue}
// CHECK: %[[L:.*]] = kiln.linear %[[P]], %arg3
// CHECK: return %[[L]]
func.func @masked_projection(%x: tensor<4x6xf32>, %r: tensor<4x6xf32>, %m: tensor<4x1xf32>, %w: tensor<8x6xf32>, %u: tensor<3xf32>) -> (tensor<4x8xf32>, tensor<3xf32>) {
  %n = kiln.none
  %0 = kiln.fused(%x, %r, %m) : (tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x1xf32>) -> tensor<4x6xf32> {
  ^bb0(%a: tensor<4x6xf32>, %b: tensor<4x6xf32>, %c: tensor<4x1xf32>):
    %1 = kiln.add %a, %b : tensor<4x6xf32>, tensor<4x6xf32>
    %2 = kiln.relu %1 : tensor<4x6xf32> -> tensor<4x6xf32>
    %3 = kiln.mul %2, %c : tensor<4x6xf32>, tensor<4x1xf32>
    kiln.yield %3 : tensor<4x6xf32>
  }
  %e = kiln.exp %u : tensor<3xf32> -> tensor<3xf32>
  %4 = kiln.linear %0, %w, %n : (tensor<4x6xf32>, tensor<8x6xf32>, none) -> tensor<4x8xf32>
  return %4, %e : tensor<4x8xf32>, tensor<3xf32>
}

// A single elementwise op becomes a one-op kiln.fused, marked.
// CHECK-LABEL: func.func @single_op
// CHECK: %[[P:.*]] = kiln.fused(%arg0) {kiln.block_prologue}
// CHECK: kiln.tanh
// CHECK: kiln.linear_fused %[[P]]
func.func @single_op(%x: tensor<3x5xf32>, %w: tensor<8x5xf32>, %b: tensor<8xf32>) -> tensor<3x8xf32> {
  %n = kiln.none
  %0 = kiln.tanh %x : tensor<3x5xf32> -> tensor<3x5xf32>
  %1 = kiln.linear_fused %0, %w, %b, %n {activation = 1 : i64, clamp_min = 0.0 : f64, clamp_max = 0.0 : f64} : (tensor<3x5xf32>, tensor<8x5xf32>, tensor<8xf32>, none) -> tensor<3x8xf32>
  return %1 : tensor<3x8xf32>
}

// A matmul by a matrix takes its input chain the same way; one by a batch of matrices does not
// (its rows are not one product's).
// CHECK-LABEL: func.func @matmuls
// CHECK: %[[P:.*]] = kiln.fused(%arg0) {kiln.block_prologue}
// CHECK-NEXT: ^bb0
// CHECK: kiln.matmul %[[P]], %arg1
// CHECK-NOT: kiln.block_prologue
// CHECK: return
func.func @matmuls(%x: tensor<2x3x5xf32>, %m: tensor<5x4xf32>, %bm: tensor<2x5x4xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x4xf32>) {
  %0 = kiln.sigmoid %x : tensor<2x3x5xf32> -> tensor<2x3x5xf32>
  %1 = kiln.matmul %0, %m : tensor<2x3x5xf32>, tensor<5x4xf32>
  %2 = kiln.tanh %x : tensor<2x3x5xf32> -> tensor<2x3x5xf32>
  %3 = kiln.matmul %2, %bm : tensor<2x3x5xf32>, tensor<2x5x4xf32>
  return %1, %3 : tensor<2x3x4xf32>, tensor<2x3x4xf32>
}

// Left alone: an input also returned (needed whole), an input that is also the residual, a
// chain that is another linear's block epilogue, float64, a chain feeding the weight, and a
// kiln.fused with two results.
// CHECK-LABEL: func.func @not_taken
// CHECK-NOT: kiln.block_prologue
// CHECK: return
func.func @not_taken(%x: tensor<3x8xf32>, %w: tensor<8x8xf32>, %xd: tensor<3x8xf64>, %wd: tensor<8x8xf64>) -> (tensor<3x8xf32>, tensor<3x8xf32>, tensor<3x8xf32>, tensor<3x8xf32>, tensor<3x8xf64>, tensor<3x8xf32>, tensor<3x8xf32>, tensor<3x8xf32>) {
  %n = kiln.none
  %0 = kiln.exp %x : tensor<3x8xf32> -> tensor<3x8xf32>
  %1 = kiln.linear %0, %w, %n : (tensor<3x8xf32>, tensor<8x8xf32>, none) -> tensor<3x8xf32>
  %2 = kiln.sigmoid %x : tensor<3x8xf32> -> tensor<3x8xf32>
  %3 = kiln.linear_fused %2, %w, %n, %2 {activation = 0 : i64, clamp_min = 0.0 : f64, clamp_max = 0.0 : f64} : (tensor<3x8xf32>, tensor<8x8xf32>, none, tensor<3x8xf32>) -> tensor<3x8xf32>
  %4 = kiln.linear %x, %w, %n : (tensor<3x8xf32>, tensor<8x8xf32>, none) -> tensor<3x8xf32>
  %5 = kiln.fused(%4) {kiln.block_epilogue} : (tensor<3x8xf32>) -> tensor<3x8xf32> {
  ^bb0(%a: tensor<3x8xf32>):
    %6 = kiln.tanh %a : tensor<3x8xf32> -> tensor<3x8xf32>
    kiln.yield %6 : tensor<3x8xf32>
  }
  %7 = kiln.linear %5, %w, %n : (tensor<3x8xf32>, tensor<8x8xf32>, none) -> tensor<3x8xf32>
  %8 = kiln.exp %xd : tensor<3x8xf64> -> tensor<3x8xf64>
  %9 = kiln.linear %8, %wd, %n : (tensor<3x8xf64>, tensor<8x8xf64>, none) -> tensor<3x8xf64>
  %10 = kiln.neg %w : tensor<8x8xf32> -> tensor<8x8xf32>
  %11 = kiln.linear %x, %10, %n : (tensor<3x8xf32>, tensor<8x8xf32>, none) -> tensor<3x8xf32>
  %12:2 = kiln.fused(%x) : (tensor<3x8xf32>) -> (tensor<3x8xf32>, tensor<3x8xf32>) {
  ^bb0(%a: tensor<3x8xf32>):
    %13 = kiln.tanh %a : tensor<3x8xf32> -> tensor<3x8xf32>
    %14 = kiln.exp %a : tensor<3x8xf32> -> tensor<3x8xf32>
    kiln.yield %13, %14 : tensor<3x8xf32>, tensor<3x8xf32>
  }
  %15 = kiln.linear %12#0, %w, %n : (tensor<3x8xf32>, tensor<8x8xf32>, none) -> tensor<3x8xf32>
  %16 = kiln.linear %12#1, %w, %n : (tensor<3x8xf32>, tensor<8x8xf32>, none) -> tensor<3x8xf32>
  return %0, %1, %3, %7, %9, %11, %15, %16 : tensor<3x8xf32>, tensor<3x8xf32>, tensor<3x8xf32>, tensor<3x8xf32>, tensor<3x8xf64>, tensor<3x8xf32>, tensor<3x8xf32>, tensor<3x8xf32>
}
