// Views are strides, not copies: a transpose feeding an elementwise op is read through swapped
// strides (offset = i*1 + j*3 for a [3,2] view of a [2,3] buffer).
// RUN: kiln-opt --kiln-lower-to-loops %s | FileCheck %s

// CHECK-LABEL: func.func @kiln_entry
// CHECK-NOT: kiln_abi_alloc
// CHECK-NOT: kiln_abi_copy
// CHECK: func.func private @kiln_kernel
// CHECK: scf.for %[[I:[^ ]*]] =
// CHECK: scf.for %[[J:[^ ]*]] =
// CHECK: %[[C3:.*]] = arith.constant 3 : i64
// CHECK: %[[JS:.*]] = arith.muli %[[J]], %[[C3]]
// CHECK: arith.addi %{{.*}}, %[[JS]]
// CHECK: math.exp
func.func @forward(%x: tensor<2x3xf32>) -> tensor<3x2xf32> {
  %0 = kiln.transpose %x {dim0 = 0 : i64, dim1 = 1 : i64} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %1 = kiln.exp %0 : tensor<3x2xf32> -> tensor<3x2xf32>
  return %1 : tensor<3x2xf32>
}
