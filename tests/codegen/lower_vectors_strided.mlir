// Vectors run along a kernel's innermost dim. An operand read across it (a transposed view) is
// taken when it is contiguous along another dim: its memref lists that dim last and its indexing
// map permutes the two (kiln.transposed_dim on the generic); tiles are a register's lanes square
// (16 x 16 floats at 512 bits), read as rows of the operand and transposed in registers by
// shuffles; the remainders along either dim are scalar loops. An operand strided along every dim
// (a slice with a step) and a transposed tile of bytes (thousands of shuffle lanes for LLVM) keep
// their kernels scalar loops (no kiln.vector_bits, no linalg).
// RUN: kiln-opt --kiln-lower-to-loops=vector-bits=512 %s | FileCheck %s
// RUN: kiln-opt --kiln-lower-to-vectors=vector-bits=512 %s | FileCheck %s --check-prefix=VEC

// CHECK-DAG: #[[ID:.*]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-DAG: #[[T:.*]] = affine_map<(d0, d1) -> (d1, d0)>
// CHECK-LABEL: func.func private @kiln_kernel_0(
// CHECK-SAME: kiln.vector_bits = 512
// CHECK: %[[X:.*]] = bufferization.to_tensor %{{.*}} restrict : memref<64x?xf32, strided<[48, 1], offset: ?>>
// CHECK: linalg.generic {indexing_maps = [#[[T]], #[[ID]], #[[ID]]]
// CHECK-SAME: ins(%[[X]], %{{.*}} : tensor<64x?xf32>, tensor<?x64xf32>)
// CHECK-SAME: kiln.transposed_dim = 0
// CHECK-LABEL: func.func private @kiln_kernel_1(
// CHECK-NOT: kiln.vector_bits
// CHECK-NOT: linalg.generic
// CHECK: scf.for
// CHECK: llvm.load {{.*}} -> f32
// CHECK-LABEL: func.func private @kiln_kernel_2(
// CHECK-NOT: kiln.vector_bits
// CHECK-NOT: linalg.generic
// CHECK: llvm.load {{.*}} -> i8
// CHECK-LABEL: func.func private @kiln_kernel_3(
// CHECK-SAME: kiln.vector_bits = 512
// CHECK: linalg.generic

// VEC-LABEL: func.func private @kiln_kernel_0(
// VEC: scf.for
// VEC: scf.for
// VEC: %[[ROWS:.*]] = vector.transfer_read {{.*}} : memref<64x?xf32, strided<[48, 1], offset: ?>>, vector<16x16xf32>
// VEC: vector.extract %[[ROWS]][0] : vector<16xf32> from vector<16x16xf32>
// VEC: vector.shuffle
// VEC-NOT: memref.load
// VEC: arith.addf {{.*}} : vector<16x16xf32>
// VEC: vector.transfer_write {{.*}} : vector<16x16xf32>, memref<?x64xf32
// A share's rows [begin, end) are known at run time: fewer than 16 left over are loops.
// VEC: scf.for
// VEC: memref.load
// VEC-LABEL: func.func private @kiln_kernel_1(
func.func @forward(%x: tensor<64x48xf32>, %y: tensor<48x64xf32>, %z: tensor<48x128xf32>, %b: tensor<80x70xi1>) -> (tensor<48x64xf32>, tensor<48x64xf32>, tensor<70x80xi1>, tensor<48x64xf32>) {
  %t = kiln.transpose %x {dim0 = 0 : i64, dim1 = 1 : i64} : (tensor<64x48xf32>) -> tensor<48x64xf32>
  %0 = kiln.add %t, %y : tensor<48x64xf32>, tensor<48x64xf32>
  %s = kiln.slice %z {dim = 1 : i64, start = 0 : i64, end = 128 : i64, step = 2 : i64} : (tensor<48x128xf32>) -> tensor<48x64xf32>
  %1 = kiln.add %s, %y : tensor<48x64xf32>, tensor<48x64xf32>
  %bt = kiln.transpose %b {dim0 = 0 : i64, dim1 = 1 : i64} : (tensor<80x70xi1>) -> tensor<70x80xi1>
  %2 = kiln.logical_not %bt : tensor<70x80xi1> -> tensor<70x80xi1>
  %3 = kiln.mul %y, %y : tensor<48x64xf32>, tensor<48x64xf32>
  return %0, %1, %2, %3 : tensor<48x64xf32>, tensor<48x64xf32>, tensor<70x80xi1>, tensor<48x64xf32>
}
