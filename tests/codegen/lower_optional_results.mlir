// An ABI call whose optional result nothing uses passes it as absent (-1, 0, 0 in the descriptor,
// a null pointer): max_pool2d then skips its indices. A used one gets a buffer.
// RUN: kiln-opt --kiln-lower-to-loops %s | FileCheck %s

// Descriptor of the first call: 3 tensors; x [1,2,4,4] f32; y [1,2,2,2] f32; indices absent.
// CHECK-DAG: llvm.mlir.global internal constant @[[D0:kiln_desc_[0-9]+]](dense<[3, 0, 4, 1, 2, 4, 4, 32, 16, 4, 1, 0, 0, 4, 1, 2, 2, 2, 8, 4, 2, 1, 0, -1, 0, 0,
// The second call's indices ([1,2,2,2] i64) are returned, so present.
// CHECK-DAG: llvm.mlir.global internal constant @[[D1:kiln_desc_[0-9]+]](dense<[3, 0, 4, 1, 2, 4, 4, 32, 16, 4, 1, 0, 0, 4, 1, 2, 2, 2, 8, 4, 2, 1, 0, {{[0-9]+}}, 4, 1, 2, 2, 2,
// CHECK-LABEL: func.func @kiln_entry
// CHECK: llvm.mlir.addressof @[[D0]]
// CHECK: call @kiln_abi_max_pool2d
// CHECK: llvm.mlir.addressof @[[D1]]
// CHECK: call @kiln_abi_max_pool2d
func.func @forward(%x: tensor<1x2x4x4xf32>) -> (tensor<1x2x2x2xf32>, tensor<1x2x2x2xf32>, tensor<1x2x2x2xi64>) {
  %p:2 = kiln.max_pool2d %x {ceil_mode = false, dilation = array<i64: 1, 1>, kernel = array<i64: 2, 2>, padding = array<i64: 0, 0>, stride = array<i64: 2, 2>} : (tensor<1x2x4x4xf32>) -> (tensor<1x2x2x2xf32>, tensor<1x2x2x2xi64>)
  %q:2 = kiln.max_pool2d %x {ceil_mode = false, dilation = array<i64: 1, 1>, kernel = array<i64: 2, 2>, padding = array<i64: 0, 0>, stride = array<i64: 2, 2>} : (tensor<1x2x4x4xf32>) -> (tensor<1x2x2x2xf32>, tensor<1x2x2x2xi64>)
  return %p#0, %q#0, %q#1 : tensor<1x2x2x2xf32>, tensor<1x2x2x2xf32>, tensor<1x2x2x2xi64>
}
