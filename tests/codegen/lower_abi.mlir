// GEMM/conv-class ops call the runtime's C ABI with a constant descriptor; intermediate buffers
// sit at offsets of one arena laid out at compile time (one kiln_abi_alloc per call, freed before
// returning); the last op writes the caller's result buffer directly.
// RUN: kiln-opt --kiln-lower-to-loops %s | FileCheck %s

// Operand descriptors: 4 tensors; x [2,4] f32 strides [4,1]; ... ; the absent bias is (-1, 0, 0).
// CHECK-DAG: llvm.mlir.global internal constant @[[D0:kiln_desc_[0-9]+]](dense<[4, 0, 2, 2, 4, 4, 1, 0, 0, 2, 8, 4,
// CHECK-DAG: llvm.mlir.global internal constant @[[D1:kiln_desc_[0-9]+]](dense<[4, 0, 2, 2, 8, 8, 1, 0, 0, 2, 3, 8, 8, 1, 0, -1, 0, 0,
// CHECK-DAG: func.func private @kiln_abi_linear(!llvm.ptr, !llvm.ptr)
// CHECK-LABEL: func.func @kiln_entry
// The hidden [2,8] values and their relu are alive together: 2 x 64 bytes, at offsets 0 and 64.
// CHECK: %[[SIZE:.*]] = arith.constant 128 : i64
// CHECK: %[[A:.*]] = call @kiln_abi_alloc(%[[SIZE]]) : (i64) -> !llvm.ptr
// CHECK-DAG: llvm.getelementptr %[[A]][0] : (!llvm.ptr) -> !llvm.ptr, i8
// CHECK-DAG: llvm.getelementptr %[[A]][64] : (!llvm.ptr) -> !llvm.ptr, i8
// CHECK: llvm.mlir.addressof @[[D0]]
// CHECK: call @kiln_abi_linear
// The relu is a loop over the hidden buffer into the second one.
// CHECK: call @kiln_kernel_{{[0-9]+}}
// CHECK: llvm.mlir.addressof @[[D1]]
// CHECK: call @kiln_abi_linear
// CHECK-NOT: kiln_abi_alloc
// CHECK: call @kiln_abi_free(%[[A]], %{{.*}})
// CHECK-NEXT: return
func.func @forward(%x: tensor<2x4xf32>, %w1: tensor<8x4xf32>, %b1: tensor<8xf32>, %w2: tensor<3x8xf32>) -> tensor<2x3xf32> {
  %none = kiln.none
  %0 = kiln.linear %x, %w1, %b1 : (tensor<2x4xf32>, tensor<8x4xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %1 = kiln.relu %0 : tensor<2x8xf32> -> tensor<2x8xf32>
  %2 = kiln.linear %1, %w2, %none : (tensor<2x8xf32>, tensor<3x8xf32>, none) -> tensor<2x3xf32>
  return %2 : tensor<2x3xf32>
}
