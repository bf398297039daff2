// GEMM/conv-class ops call the runtime's C ABI with a constant descriptor; intermediate buffers
// come from kiln_abi_alloc and are freed after their last use; the last op writes the caller's
// result buffer directly.
// RUN: kiln-opt --kiln-lower-to-loops %s | FileCheck %s

// Operand descriptors: 4 tensors; x [2,4] f32 strides [4,1]; ... ; the absent bias is (-1, 0, 0).
// CHECK-DAG: llvm.mlir.global internal constant @[[D0:kiln_desc_[0-9]+]](dense<[4, 0, 2, 2, 4, 4, 1, 0, 0, 2, 8, 4,
// CHECK-DAG: llvm.mlir.global internal constant @[[D1:kiln_desc_[0-9]+]](dense<[4, 0, 2, 2, 8, 8, 1, 0, 0, 2, 3, 8, 8, 1, 0, -1, 0, 0,
// CHECK-DAG: func.func private @kiln_abi_linear(!llvm.ptr, !llvm.ptr)
// CHECK-LABEL: func.func @kiln_entry
// CHECK: %[[OUT:.*]] = llvm.load %{{.*}} : !llvm.ptr -> !llvm.ptr
// CHECK: %[[H:.*]] = call @kiln_abi_alloc(%{{.*}}) : (i64) -> !llvm.ptr
// CHECK: llvm.mlir.addressof @[[D0]]
// CHECK: call @kiln_abi_linear
// The relu is a loop over the hidden buffer, in place into a second buffer.
// CHECK: call @kiln_kernel_{{[0-9]+}}
// CHECK: call @kiln_abi_free(%[[H]]
// CHECK: llvm.mlir.addressof @[[D1]]
// CHECK: call @kiln_abi_linear
// CHECK: call @kiln_abi_free
// CHECK: return
func.func @forward(%x: tensor<2x4xf32>, %w1: tensor<8x4xf32>, %b1: tensor<8xf32>, %w2: tensor<3x8xf32>) -> tensor<2x3xf32> {
  %none = kiln.none
  %0 = kiln.linear %x, %w1, %b1 : (tensor<2x4xf32>, tensor<8x4xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %1 = kiln.relu %0 : tensor<2x8xf32> -> tensor<2x8xf32>
  %2 = kiln.linear %1, %w2, %none : (tensor<2x8xf32>, tensor<3x8xf32>, none) -> tensor<2x3xf32>
  return %2 : tensor<2x3xf32>
}
