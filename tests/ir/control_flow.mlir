// kiln::cond / kiln::loop trace to upstream scf regions around kiln ops; they round-trip.
// RUN: kiln-opt %s | kiln-opt | FileCheck %s

// CHECK-LABEL: func.func @branch
func.func @branch(%x: tensor<2x3xf32>, %p: tensor<i1>) -> tensor<2x3xf32> {
  %flag = tensor.extract %p[] : tensor<i1>
  // CHECK: scf.if %{{.*}} -> (tensor<2x3xf32>)
  %r = scf.if %flag -> (tensor<2x3xf32>) {
    // CHECK: kiln.relu
    %a = kiln.relu %x : tensor<2x3xf32> -> tensor<2x3xf32>
    scf.yield %a : tensor<2x3xf32>
  } else {
    // CHECK: kiln.neg
    %b = kiln.neg %x : tensor<2x3xf32> -> tensor<2x3xf32>
    scf.yield %b : tensor<2x3xf32>
  }
  return %r : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @counted
func.func @counted(%x: tensor<4xf32>) -> tensor<4xf32> {
  %c0 = arith.constant 0 : index
  %c5 = arith.constant 5 : index
  %c1 = arith.constant 1 : index
  // CHECK: scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%{{.*}} = %{{.*}}) -> (tensor<4xf32>)
  %r = scf.for %i = %c0 to %c5 step %c1 iter_args(%c = %x) -> (tensor<4xf32>) {
    // CHECK: arith.index_cast %[[I]] : index to i64
    %i64 = arith.index_cast %i : index to i64
    %t = tensor.from_elements %i64 : tensor<i64>
    // CHECK: kiln.add
    %n = kiln.add %c, %t : tensor<4xf32>, tensor<i64>
    scf.yield %n : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}
