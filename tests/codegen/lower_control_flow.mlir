// kiln::loop / kiln::cond regions stay loops and branches in the entry point: the carried value
// is a buffer initialized before the loop and rewritten at the end of each iteration; buffers
// made inside the body are freed inside it.
// RUN: kiln-opt --kiln-lower-to-loops %s | FileCheck %s

// CHECK-LABEL: func.func @kiln_entry
// The kernels' pointer arrays live at the top, outside the loop.
// CHECK-COUNT-3: llvm.alloca
// CHECK-NOT: llvm.alloca
// CHECK: call @kiln_kernel_0
// CHECK: scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK:   arith.index_cast %[[I]] : index to i64
// CHECK:   %[[T:.*]] = func.call @kiln_abi_alloc
// CHECK:   llvm.store
// CHECK:   %[[N:.*]] = func.call @kiln_abi_alloc
// CHECK:   call @kiln_kernel_1
// CHECK:   call @kiln_abi_free(%[[T]]
// CHECK:   call @kiln_kernel_2
// CHECK:   call @kiln_abi_free(%[[N]]
// CHECK: }
// CHECK: return
func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
  %c0 = arith.constant 0 : index
  %c5 = arith.constant 5 : index
  %c1 = arith.constant 1 : index
  %r = scf.for %i = %c0 to %c5 step %c1 iter_args(%c = %x) -> (tensor<4xf32>) {
    %i64 = arith.index_cast %i : index to i64
    %t = tensor.from_elements %i64 : tensor<i64>
    %n = kiln.add %c, %t : tensor<4xf32>, tensor<i64>
    scf.yield %n : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}
