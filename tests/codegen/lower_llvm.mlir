// The full lowering leaves only the LLVM dialect: the entry point, kernels (a generated
// log-softmax row kernel among them), and declarations of the runtime's ABI (the softmax over
// dim 0); f32 transcendental functions are polynomials (no libm call).
// RUN: kiln-opt --kiln-lower-to-llvm %s | FileCheck %s
// With only -NOT lines, the LLVM prefix scans the whole output, every line of every function.
// RUN: kiln-opt --kiln-lower-to-llvm %s | FileCheck %s --check-prefix=LLVM

// CHECK-DAG: llvm.func @kiln_entry(%{{.*}}: !llvm.ptr)
// CHECK-DAG: llvm.func @kiln_abi_softmax(!llvm.ptr, !llvm.ptr)
// LLVM-NOT: scf.
// LLVM-NOT: arith.
// LLVM-NOT: math.
// LLVM-NOT: memref.
// LLVM-NOT: kiln.
// LLVM-NOT: @tanhf
// LLVM-NOT: @expf
func.func @forward(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %0 = kiln.tanh %x : tensor<4x16xf32> -> tensor<4x16xf32>
  %1 = kiln.exp %0 : tensor<4x16xf32> -> tensor<4x16xf32>
  %2 = kiln.softmax %1 {dim = 0 : i64} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %3 = kiln.log_softmax %2 {dim = 1 : i64} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  return %3 : tensor<4x16xf32>
}
