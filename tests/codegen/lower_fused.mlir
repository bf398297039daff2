// A kiln.fused region and its elementwise consumer are one loop nest: the region's body is
// inlined into the kernel, nothing is stored in between.
// RUN: kiln-opt --kiln-lower-to-loops %s | FileCheck %s

// CHECK-LABEL: func.func @kiln_entry
// CHECK-NOT: kiln_abi_alloc
// CHECK: call @kiln_kernel_[[K:[0-9]+]]
// CHECK-NOT: call @kiln_kernel
// CHECK: func.func private @kiln_kernel_[[K]]
// CHECK: arith.mulf
// CHECK: math.tanh
// CHECK: arith.cmpf ugt
// CHECK: llvm.store
// CHECK-NOT: llvm.store
func.func @forward(%x: tensor<4x8xf32>, %a: tensor<8xf32>) -> tensor<4x8xf32> {
  %0 = kiln.fused(%x, %a) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32> {
  ^bb0(%p: tensor<4x8xf32>, %q: tensor<8xf32>):
    %1 = kiln.mul %p, %q : tensor<4x8xf32>, tensor<8xf32>
    %2 = kiln.tanh %1 : tensor<4x8xf32> -> tensor<4x8xf32>
    kiln.yield %2 : tensor<4x8xf32>
  }
  %3 = kiln.relu %0 : tensor<4x8xf32> -> tensor<4x8xf32>
  return %3 : tensor<4x8xf32>
}
