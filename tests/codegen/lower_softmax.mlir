// A softmax over the last dim is a generated row kernel that also computes its input's
// elementwise tree (the scale and the broadcast mask): one kernel, no runtime softmax call, no
// buffer for the scaled scores. A softmax over another dim calls the runtime.
// RUN: kiln-opt --kiln-lower-to-loops %s | FileCheck %s

// CHECK-LABEL: func.func @kiln_entry
// CHECK-NOT: kiln_abi_alloc
// CHECK: call @kiln_kernel_[[K:[0-9]+]]
// CHECK-NOT: kiln_abi_softmax
// CHECK: call @kiln_abi_softmax
// CHECK: func.func private @kiln_kernel_[[K]]
// The row: the tree and the running max, then exp and the sum, then the scaling.
// CHECK: scf.for
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK: arith.maximumf
// CHECK: scf.for
// CHECK: math.exp
// CHECK: arith.addf {{.*}} fastmath<reassoc>
// CHECK: arith.divf
// CHECK: scf.for
// CHECK: arith.mulf
func.func @forward(%s: tensor<2x4x8xf32>, %mask: tensor<4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>) {
  %c = kiln.constant dense<0.125> : tensor<f32> : tensor<f32>
  %0 = kiln.mul %s, %c : tensor<2x4x8xf32>, tensor<f32>
  %1 = kiln.add %0, %mask : tensor<2x4x8xf32>, tensor<4x8xf32>
  %2 = kiln.softmax %1 {dim = -1 : i64} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %3 = kiln.softmax %s {dim = 1 : i64} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %2, %3 : tensor<2x4x8xf32>, tensor<2x4x8xf32>
}
