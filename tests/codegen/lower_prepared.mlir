// A convolution whose weight is a frozen (non-splat) constant calls the runtime's *_prepared
// entry point with a mutable, zero-initialized slot of its own: the runtime packs the weight once
// and keeps it there. A weight passed as an argument may change between calls: plain call.
// kiln_entry_release() frees the slots' contents (the JIT calls it before unloading).
// RUN: kiln-opt --kiln-lower-to-loops %s | FileCheck %s

// CHECK-DAG: llvm.mlir.global internal @[[SLOT:kiln_prepared_[0-9]+]](0 : i64) {addr_space = 0 : i32, alignment = 8 : i64} : i64
// CHECK-DAG: func.func private @kiln_abi_conv2d_prepared(!llvm.ptr, !llvm.ptr, !llvm.ptr)
// CHECK-DAG: func.func private @kiln_abi_conv2d(!llvm.ptr, !llvm.ptr)
// CHECK-LABEL: func.func @kiln_entry
// CHECK: %[[S:.*]] = llvm.mlir.addressof @[[SLOT]] : !llvm.ptr
// CHECK: call @kiln_abi_conv2d_prepared(%{{.*}}, %{{.*}}, %[[S]])
// CHECK: call @kiln_abi_conv2d(%{{.*}}, %{{.*}}) : (!llvm.ptr, !llvm.ptr) -> ()
// CHECK: return
// The JIT calls kiln_entry_release before unloading the code: it frees what the slot holds.
// CHECK-LABEL: func.func @kiln_entry_release()
// CHECK: %[[R:.*]] = llvm.mlir.addressof @[[SLOT]] : !llvm.ptr
// CHECK: call @kiln_abi_release_prepared(%[[R]]) : (!llvm.ptr) -> ()
// CHECK: return
func.func @forward(%x: tensor<1x2x4x4xf32>, %w2: tensor<2x2x1x1xf32>) -> tensor<1x2x4x4xf32> {
  %none = kiln.none
  %w = kiln.constant dense<[[[[1.0]], [[2.0]]], [[[3.0]], [[4.0]]]]> : tensor<2x2x1x1xf32> : tensor<2x2x1x1xf32>
  %0 = kiln.conv2d %x, %w, %none {dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>, none) -> tensor<1x2x4x4xf32>
  %1 = kiln.conv2d %0, %w2, %none {dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>, none) -> tensor<1x2x4x4xf32>
  return %1 : tensor<1x2x4x4xf32>
}
