// A logsumexp over the last dim is a generated row kernel that also computes its input's
// elementwise tree: one kernel, no runtime logsumexp call, no buffer for the tree; two passes
// over each row (the maximum, then the shifted sum of exponentials) and one store per row. Over
// another dim it calls the runtime.
// RUN: kiln-opt --kiln-lower-to-loops %s | FileCheck %s

// CHECK-LABEL: func.func @kiln_entry
// CHECK: call @kiln_kernel_[[K:[0-9]+]]
// CHECK-NOT: call @kiln_abi_logsumexp
// CHECK: call @kiln_kernel_[[K2:[0-9]+]]
// CHECK: call @kiln_abi_logsumexp
// CHECK: func.func private @kiln_kernel_[[K]]
// The tree and the running maximum, then exp of the tree minus the shift and the sum.
// CHECK: scf.for
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK: arith.maximumf
// CHECK: math.absf
// CHECK: arith.select
// CHECK: scf.for
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK: math.exp
// CHECK: arith.addf {{.*}} fastmath<reassoc>
// CHECK: math.log
// CHECK: llvm.store
// CHECK-NOT: scf.for
// CHECK: return
func.func @forward(%s: tensor<2x4x8xf32>, %bias: tensor<8xf32>) -> (tensor<2x4xf32>, tensor<2x4x1xf32>, tensor<4x8xf32>) {
  %c = kiln.constant dense<0.5> : tensor<f32> : tensor<f32>
  %0 = kiln.mul %s, %c : tensor<2x4x8xf32>, tensor<f32>
  %1 = kiln.add %0, %bias : tensor<2x4x8xf32>, tensor<8xf32>
  %2 = kiln.logsumexp %1 {dims = array<i64: -1>, keepdim = false} : (tensor<2x4x8xf32>) -> tensor<2x4xf32>
  %3 = kiln.logsumexp %s {dims = array<i64: 2>, keepdim = true} : (tensor<2x4x8xf32>) -> tensor<2x4x1xf32>
  %4 = kiln.logsumexp %s {dims = array<i64: 0>, keepdim = false} : (tensor<2x4x8xf32>) -> tensor<4x8xf32>
  return %2, %3, %4 : tensor<2x4xf32>, tensor<2x4x1xf32>, tensor<4x8xf32>
}
