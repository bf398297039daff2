// Buffers made in nested loop bodies: each body's arena is one more buffer of the block around
// its loop, down to the entry block's arena (see lower_control_flow.mlir).
// RUN: kiln-opt --kiln-lower-to-loops %s | FileCheck %s

// A loop inside a loop: the inner body's arena becomes a buffer
// of the outer body, whose arena sits in the entry block's. Nothing is allocated per iteration.
// CHECK-LABEL: func.func @kiln_entry
// CHECK: %[[ARENA:.*]] = call @kiln_abi_alloc(%{{.*}})
// CHECK: %[[OUTER:.*]] = llvm.getelementptr %[[ARENA]][0]
// CHECK-NOT: kiln_abi_alloc
// CHECK: scf.for
// The inner loop's carried value is a buffer of the outer body, alive across the inner loop,
// beside the inner body's arena (the larger one, placed first).
// CHECK: %[[CARRY:.*]] = llvm.getelementptr %[[OUTER]][128]
// CHECK: call @kiln_kernel_1
// CHECK: %[[INNER:.*]] = llvm.getelementptr %[[OUTER]][0]
// CHECK-NEXT: scf.for
// CHECK: llvm.getelementptr %[[INNER]][0]
// CHECK: llvm.getelementptr %[[INNER]][64]
// CHECK-NOT: kiln_abi_alloc
// CHECK-NOT: kiln_abi_free
// CHECK: call @kiln_abi_free(%[[ARENA]]
// CHECK-NEXT: return
func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
  %c0 = arith.constant 0 : index
  %c3 = arith.constant 3 : index
  %c1 = arith.constant 1 : index
  %r = scf.for %i = %c0 to %c3 step %c1 iter_args(%c = %x) -> (tensor<4xf32>) {
    %s = scf.for %j = %c0 to %c3 step %c1 iter_args(%d = %c) -> (tensor<4xf32>) {
      %j64 = arith.index_cast %j : index to i64
      %t = tensor.from_elements %j64 : tensor<i64>
      %n = kiln.add %d, %t : tensor<4xf32>, tensor<i64>
      scf.yield %n : tensor<4xf32>
    }
    scf.yield %s : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}
