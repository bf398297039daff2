// Vectors run along a kernel's innermost dim, so the vector pipeline takes a kernel only when
// every operand is contiguous or broadcast there. Adding a transposed view reads its operand at a
// stride: that kernel stays scalar loops (no kiln.vector_bits, no linalg); the contiguous one in
// the same function is a linalg.generic.
// RUN: kiln-opt --kiln-lower-to-loops=vector-bits=512 %s | FileCheck %s

// CHECK-LABEL: func.func private @kiln_kernel_0(
// CHECK-NOT: kiln.vector_bits
// CHECK-NOT: linalg.generic
// CHECK: scf.for
// CHECK: llvm.load {{.*}} -> f32
// CHECK-LABEL: func.func private @kiln_kernel_1(
// CHECK-SAME: kiln.vector_bits = 512
// CHECK: linalg.generic
func.func @forward(%x: tensor<64x48xf32>, %y: tensor<48x64xf32>) -> (tensor<48x64xf32>, tensor<48x64xf32>) {
  %t = kiln.transpose %x {dim0 = 0 : i64, dim1 = 1 : i64} : (tensor<64x48xf32>) -> tensor<48x64xf32>
  %0 = kiln.add %t, %y : tensor<48x64xf32>, tensor<48x64xf32>
  %1 = kiln.mul %y, %y : tensor<48x64xf32>, tensor<48x64xf32>
  return %0, %1 : tensor<48x64xf32>, tensor<48x64xf32>
}
