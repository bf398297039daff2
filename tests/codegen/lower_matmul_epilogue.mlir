// A matmul's elementwise chain marked kiln.block_epilogue becomes the function the runtime's
// matmul calls on each block its GEMMs finish (kiln_abi_matmul_epilogue): no kernel of its own;
// a constant right operand keeps its call site's slot for the packed form.
// RUN: kiln-opt --kiln-fuse-block-epilogues --kiln-lower-to-loops %s | FileCheck %s

// CHECK-LABEL: func.func @kiln_entry
// CHECK-NOT: call @kiln_kernel_
// CHECK: %[[NULL:.*]] = llvm.mlir.zero
// CHECK: %[[FN:.*]] = constant @kiln_epilogue_[[N:[0-9]+]]
// CHECK: %[[PTR:.*]] = builtin.unrealized_conversion_cast %[[FN]]
// CHECK: call @kiln_abi_matmul_epilogue(%{{.*}}, %{{.*}}, %[[NULL]], %[[PTR]], %{{.*}})
// CHECK-NOT: call @kiln_kernel_
// CHECK: %[[SLOT:.*]] = llvm.mlir.addressof @kiln_prepared_
// CHECK: call @kiln_abi_matmul_epilogue(%{{.*}}, %{{.*}}, %[[SLOT]], %{{.*}}, %{{.*}})
// CHECK-NOT: call @kiln_kernel_
// CHECK: return
// CHECK: func.func private @kiln_epilogue_[[N]](
// CHECK: math.tanh
func.func @forward(%q: tensor<2x8x16xf32>, %k: tensor<2x16x8xf32>, %x: tensor<5x4xf32>, %xs: tensor<2x4xf32>) -> (tensor<2x8x8xf32>, tensor<5x3xf32>, tensor<2x3xf32>) {
  %c = kiln.constant dense<30.0> : tensor<f32> : tensor<f32>
  %w = kiln.constant dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0], [1.5, 2.5, 3.5]]> : tensor<4x3xf32> : tensor<4x3xf32>
  %0 = kiln.matmul %q, %k : tensor<2x8x16xf32>, tensor<2x16x8xf32>
  %1 = kiln.fused(%0, %c) : (tensor<2x8x8xf32>, tensor<f32>) -> tensor<2x8x8xf32> {
  ^bb0(%y: tensor<2x8x8xf32>, %s: tensor<f32>):
    %2 = kiln.div %y, %s : tensor<2x8x8xf32>, tensor<f32>
    %3 = kiln.tanh %2 : tensor<2x8x8xf32> -> tensor<2x8x8xf32>
    %4 = kiln.mul %3, %s : tensor<2x8x8xf32>, tensor<f32>
    kiln.yield %4 : tensor<2x8x8xf32>
  }
  %5 = kiln.matmul %x, %w : tensor<5x4xf32>, tensor<4x3xf32>
  %6 = kiln.sigmoid %5 : tensor<5x3xf32> -> tensor<5x3xf32>
  %7 = kiln.matmul %xs, %w : tensor<2x4xf32>, tensor<4x3xf32>
  return %1, %6, %7 : tensor<2x8x8xf32>, tensor<5x3xf32>, tensor<2x3xf32>
}
