// kiln::loop / kiln::cond regions stay loops and branches in the entry point: the carried value
// is a buffer initialized before the loop and rewritten at the end of each iteration; buffers
// made inside the body share one arena laid out at compile time and allocated before the loop
// (inside the entry block's arena), so an iteration allocates and frees nothing.
// RUN: kiln-opt --kiln-lower-to-loops %s | FileCheck %s

// CHECK-LABEL: func.func @kiln_entry
// CHECK: %[[ARENA:.*]] = call @kiln_abi_alloc(%{{.*}})
// CHECK: %[[BODY:.*]] = llvm.getelementptr %[[ARENA]][{{[0-9]+}}]
// The kernels' pointer arrays live at the top, outside the loop.
// CHECK-COUNT-3: llvm.alloca
// CHECK-NOT: llvm.alloca
// CHECK: call @kiln_kernel_0
// CHECK-NOT: kiln_abi_alloc
// CHECK: scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK-NOT: kiln_abi_alloc
// CHECK:   arith.index_cast %[[I]] : index to i64
// The scalar tensor and the sum are alive together: two slots of the body's arena.
// CHECK:   %[[T:.*]] = llvm.getelementptr %[[BODY]][0]
// CHECK:   llvm.store
// CHECK:   %[[N:.*]] = llvm.getelementptr %[[BODY]][64]
// CHECK:   call @kiln_kernel_1
// CHECK-NOT: kiln_abi_free
// CHECK:   call @kiln_kernel_2
// CHECK-NOT: kiln_abi_free
// CHECK: }
// CHECK: call @kiln_abi_free(%[[ARENA]]
// CHECK-NEXT: return
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
