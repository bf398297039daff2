// Each kernel call in the entry block is lent, for its scratch, the largest stretch of the
// compile-time arena that no buffer alive across the call holds (kiln_abi_lease_begin/_end around
// it). Here a, b and c take 64 KiB each at offsets 0, 64 Ki and 128 Ki (a lives until the add).
// RUN: kiln-opt --kiln-lower-to-loops %s | FileCheck %s

// CHECK-DAG: func.func private @kiln_abi_lease_begin(!llvm.ptr, i64)
// CHECK-DAG: func.func private @kiln_abi_lease_end()
// CHECK-LABEL: func.func @kiln_entry
// CHECK: %[[A:.*]] = call @kiln_abi_alloc(%{{.*}}) : (i64) -> !llvm.ptr
// The first conv: only a (its output) is alive, so b's and c's 128 KiB are free.
// CHECK: llvm.mlir.addressof @kiln_desc_
// CHECK-NEXT: %[[G1:.*]] = llvm.getelementptr %[[A]][65536] : (!llvm.ptr) -> !llvm.ptr, i8
// CHECK-NEXT: %[[N1:.*]] = arith.constant 131072 : i64
// CHECK-NEXT: call @kiln_abi_lease_begin(%[[G1]], %[[N1]])
// CHECK-NEXT: call @kiln_abi_conv2d
// CHECK-NEXT: call @kiln_abi_lease_end()
// The second: a and b are alive, c's 64 KiB are free.
// CHECK: llvm.mlir.addressof @kiln_desc_
// CHECK-NEXT: %[[G2:.*]] = llvm.getelementptr %[[A]][131072] : (!llvm.ptr) -> !llvm.ptr, i8
// CHECK-NEXT: %[[N2:.*]] = arith.constant 65536 : i64
// CHECK-NEXT: call @kiln_abi_lease_begin(%[[G2]], %[[N2]])
// CHECK-NEXT: call @kiln_abi_conv2d
// CHECK-NEXT: call @kiln_abi_lease_end()
// The third reads b and writes c while a waits for the add: nothing is free, nothing is lent.
// CHECK-NOT: kiln_abi_lease_begin
// CHECK: call @kiln_abi_conv2d
// CHECK-NOT: kiln_abi_lease_begin
// CHECK: call @kiln_abi_free(%[[A]], %{{.*}})
func.func @forward(%x: tensor<1x16x32x32xf32>, %w1: tensor<16x16x3x3xf32>, %w2: tensor<16x16x3x3xf32>, %w3: tensor<16x16x3x3xf32>) -> tensor<1x16x32x32xf32> {
  %none = kiln.none
  %a = kiln.conv2d %x, %w1, %none {dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 1, 1>, stride = array<i64: 1, 1>} : (tensor<1x16x32x32xf32>, tensor<16x16x3x3xf32>, none) -> tensor<1x16x32x32xf32>
  %b = kiln.conv2d %a, %w2, %none {dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 1, 1>, stride = array<i64: 1, 1>} : (tensor<1x16x32x32xf32>, tensor<16x16x3x3xf32>, none) -> tensor<1x16x32x32xf32>
  %c = kiln.conv2d %b, %w3, %none {dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 1, 1>, stride = array<i64: 1, 1>} : (tensor<1x16x32x32xf32>, tensor<16x16x3x3xf32>, none) -> tensor<1x16x32x32xf32>
  %y = kiln.add %c, %a : tensor<1x16x32x32xf32>, tensor<1x16x32x32xf32>
  return %y : tensor<1x16x32x32xf32>
}
