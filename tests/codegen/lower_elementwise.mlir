// Elementwise chains become one fused loop nest in a kernel function; no intermediate buffers.
// RUN: kiln-opt --kiln-lower-to-loops %s | FileCheck %s

// CHECK-LABEL: func.func @kiln_entry(%{{.*}}: !llvm.ptr)
// CHECK-NOT: kiln_abi_alloc
// CHECK: call @kiln_kernel_[[K:[0-9]+]]
// CHECK-NOT: call @kiln_kernel
// CHECK: return
// CHECK: func.func private @kiln_kernel_[[K]](%{{.*}}: !llvm.ptr, %[[B:.*]]: i64, %[[E:.*]]: i64)
// CHECK: scf.for %[[I:.*]] = %[[B]] to %[[E]]
// CHECK: scf.for
// The broadcast [8] operand is read at the inner index only.
// CHECK: llvm.load {{.*}} -> f32
// CHECK: llvm.load {{.*}} -> f32
// CHECK: arith.mulf
// CHECK: arith.constant 2.000000e+00 : f32
// CHECK: arith.addf
// CHECK: arith.cmpf ugt
// CHECK: arith.select
// CHECK: llvm.store {{.*}} : f32, !llvm.ptr
func.func @forward(%x: tensor<4x8xf32>, %a: tensor<8xf32>) -> tensor<4x8xf32> {
  %c = kiln.constant dense<2.0> : tensor<f32> : tensor<f32>
  %0 = kiln.mul %x, %a : tensor<4x8xf32>, tensor<8xf32>
  %1 = kiln.add %0, %c : tensor<4x8xf32>, tensor<f32>
  %2 = kiln.relu %1 : tensor<4x8xf32> -> tensor<4x8xf32>
  return %2 : tensor<4x8xf32>
}
