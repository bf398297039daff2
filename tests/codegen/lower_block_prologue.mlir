// A linear's input chain marked kiln.block_prologue (--kiln-fuse-block-prologues) becomes a
// function the runtime's linear calls to fill each block of the input's rows just before its GEMM
// reads them (kiln_abi_linear_prologue): no kernel of its own and no buffer (the input is
// described with a null data pointer); with an epilogue chain after the linear too, one call
// takes both functions; a matmul by a matrix likewise.
// RUN: kiln-opt --kiln-fuse-block-epilogues --kiln-fuse-block-prologues --kiln-lower-to-loops %s | FileCheck %s
// RUN: kiln-opt --kiln-lower-to-loops %s | FileCheck %s --check-prefix=SEPARATE

// CHECK-LABEL: func.func @kiln_entry
// CHECK-NOT: call @kiln_kernel_
// CHECK: %[[UNSTORED:.*]] = llvm.mlir.zero
// CHECK: %[[NULL:.*]] = llvm.mlir.zero
// CHECK: llvm.store %[[UNSTORED]]
// CHECK: %[[PRO:.*]] = constant @kiln_prologue_[[P:[0-9]+]]
// CHECK: %[[PPTR:.*]] = builtin.unrealized_conversion_cast %[[PRO]]
// CHECK: call @kiln_abi_linear_prologue(%{{.*}}, %{{.*}}, %[[NULL]], %[[PPTR]], %{{.*}}, %[[NULL]], %[[NULL]])
// CHECK-NOT: call @kiln_kernel_
// CHECK: %[[PRO2:.*]] = constant @kiln_prologue_
// CHECK: %[[PPTR2:.*]] = builtin.unrealized_conversion_cast %[[PRO2]]
// CHECK: %[[EPI:.*]] = constant @kiln_epilogue_
// CHECK: %[[EPTR:.*]] = builtin.unrealized_conversion_cast %[[EPI]]
// CHECK: call @kiln_abi_linear_fused_prologue(%{{.*}}, %{{.*}}, %{{.*}}, %[[PPTR2]], %{{.*}}, %[[EPTR]], %{{.*}})
// CHECK-NOT: call @kiln_kernel_
// CHECK: call @kiln_abi_matmul_prologue(
// CHECK-NOT: call @kiln_kernel_
// CHECK: return
// CHECK: func.func private @kiln_prologue_[[P]](
// CHECK: arith.addf
// CHECK: arith.select
// CHECK: llvm.store

// SEPARATE-LABEL: func.func @kiln_entry
// SEPARATE: call @kiln_kernel_
// SEPARATE: call @kiln_abi_linear(
func.func @forward(%x: tensor<6x5xf32>, %r: tensor<6x5xf32>, %w: tensor<8x5xf32>, %b: tensor<8xf32>, %w2: tensor<4x8xf32>, %m: tensor<5x3xf32>) -> (tensor<6x8xf32>, tensor<6x4xf32>, tensor<6x3xf32>) {
  %n = kiln.none
  %0 = kiln.fused(%x, %r) : (tensor<6x5xf32>, tensor<6x5xf32>) -> tensor<6x5xf32> {
  ^bb0(%a: tensor<6x5xf32>, %c: tensor<6x5xf32>):
    %1 = kiln.add %a, %c : tensor<6x5xf32>, tensor<6x5xf32>
    %2 = kiln.relu %1 : tensor<6x5xf32> -> tensor<6x5xf32>
    kiln.yield %2 : tensor<6x5xf32>
  }
  %3 = kiln.linear %0, %w, %b : (tensor<6x5xf32>, tensor<8x5xf32>, tensor<8xf32>) -> tensor<6x8xf32>
  %4 = kiln.sigmoid %3 : tensor<6x8xf32> -> tensor<6x8xf32>
  %5 = kiln.linear_fused %4, %w2, %n, %n {activation = 0 : i64, clamp_min = 0.0 : f64, clamp_max = 0.0 : f64} : (tensor<6x8xf32>, tensor<4x8xf32>, none, none) -> tensor<6x4xf32>
  %6 = kiln.tanh %5 : tensor<6x4xf32> -> tensor<6x4xf32>
  %7 = kiln.exp %r : tensor<6x5xf32> -> tensor<6x5xf32>
  %8 = kiln.matmul %7, %m : tensor<6x5xf32>, tensor<5x3xf32>
  return %3, %6, %8 : tensor<6x8xf32>, tensor<6x4xf32>, tensor<6x3xf32>
}
