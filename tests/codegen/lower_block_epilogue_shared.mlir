// A block epilogue whose product's value is needed too (returned here; a training step's backward
// alike): the product keeps its own buffer and the chain, called on each block the GEMM finishes,
// writes its result into its own buffer at the same offsets (the last pointer of its context)
// instead of mapping the block in place. No kernel of its own.
// RUN: kiln-opt --kiln-fuse-block-epilogues --kiln-lower-to-loops %s | FileCheck %s

// CHECK-LABEL: func.func @kiln_entry
// CHECK-NOT: call @kiln_kernel_
// CHECK: call @kiln_abi_linear_epilogue(
// CHECK-NOT: call @kiln_kernel_
// CHECK: return
// The chain's function: the product's value read through c, its output pointer from ctx (slot
// 2, after the leaves: the product's value and the scale), stored to there.
// CHECK: func.func private @kiln_epilogue_{{[0-9]+}}(%[[CTX:.*]]: !llvm.ptr, %[[C:.*]]: !llvm.ptr,
// CHECK: %[[Y:.*]] = llvm.getelementptr %[[C]]
// CHECK: %[[SLOT:.*]] = llvm.getelementptr %[[CTX]][2]
// CHECK: %[[OUT:.*]] = llvm.load %[[SLOT]]
// CHECK: %[[AT:.*]] = llvm.getelementptr %[[Y]]
// CHECK: %[[V:.*]] = llvm.load %[[AT]]
// CHECK: math.tanh %[[V]]
// CHECK: %[[TO:.*]] = llvm.getelementptr %[[OUT]]
// CHECK: llvm.store %{{.*}}, %[[TO]]
func.func @forward(%x: tensor<6x5xf32>, %w: tensor<8x5xf32>, %s: tensor<8xf32>) -> (tensor<6x8xf32>, tensor<6x8xf32>) {
  %n = kiln.none
  %0 = kiln.linear %x, %w, %n : (tensor<6x5xf32>, tensor<8x5xf32>, none) -> tensor<6x8xf32>
  %1 = kiln.fused(%0, %s) : (tensor<6x8xf32>, tensor<8xf32>) -> tensor<6x8xf32> {
  ^bb0(%y: tensor<6x8xf32>, %sc: tensor<8xf32>):
    %2 = kiln.tanh %y : tensor<6x8xf32> -> tensor<6x8xf32>
    %3 = kiln.mul %2, %sc : tensor<6x8xf32>, tensor<8xf32>
    kiln.yield %3 : tensor<6x8xf32>
  }
  return %0, %1 : tensor<6x8xf32>, tensor<6x8xf32>
}
