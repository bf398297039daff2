// The vector pipeline (DESIGN.md §5): an elementwise kernel is one linalg.generic on tensors over
// its buffers (a broadcast operand's dim projected out of its map), then tiled along the
// innermost dim to a tile of vector registers (256 bits x 2 = 16 floats), the remainder peeled
// (5 of 37: one vector of 5), bufferized in place (no allocation, no copy), then LLVM vector
// code. lower_vectors_masked.mlir: a remainder of unknown size.
// RUN: kiln-opt --kiln-lower-to-loops=vector-bits=256 %s | FileCheck %s --check-prefix=LINALG
// RUN: kiln-opt --kiln-lower-to-vectors=vector-bits=256 %s | FileCheck %s --check-prefix=VEC
// RUN: kiln-opt --kiln-lower-to-llvm=vector-bits=256 %s | FileCheck %s --check-prefix=LLVM
// Without a width, scalar loops (LLVM's loop vectorizer widens them).
// RUN: kiln-opt --kiln-lower-to-loops %s | FileCheck %s --check-prefix=SCALAR

// LINALG-LABEL: func.func private @kiln_kernel_0
// LINALG-SAME: kiln.vector_bits = 256
// LINALG-DAG: %[[X:.*]] = bufferization.to_tensor %{{.*}} restrict : memref<?x37xf32, strided<[37, 1], offset: ?>>
// LINALG-DAG: %[[A:.*]] = bufferization.to_tensor %{{.*}} restrict : memref<37xf32, strided<[1]>>
// LINALG-DAG: %[[OUT:.*]] = tensor.empty(%{{.*}}) : tensor<?x37xf32>
// LINALG: %[[R:.*]] = linalg.generic
// LINALG-SAME: iterator_types = ["parallel", "parallel"]
// LINALG-SAME: ins(%[[X]], %[[A]] : tensor<?x37xf32>, tensor<37xf32>) outs(%[[OUT]] : tensor<?x37xf32>)
// LINALG: arith.mulf
// LINALG: arith.addf
// LINALG: arith.select
// LINALG: linalg.yield
// LINALG: bufferization.materialize_in_destination %[[R]] in restrict writable

// VEC-LABEL: func.func private @kiln_kernel_0
// VEC-NOT: memref.alloc
// VEC-NOT: memref.copy
// VEC-NOT: linalg.
// VEC: scf.for
// VEC: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c16
// VEC: vector.transfer_read {{.*}} vector<16xf32>
// VEC: arith.mulf {{.*}} : vector<16xf32>
// VEC: vector.transfer_write {{.*}} : vector<16xf32>, memref<?x37xf32
// The remainder (37 = 2 x 16 + 5), at column 32.
// VEC: vector.transfer_read %{{.*}}[%{{.*}}, %c32], {{.*}} vector<5xf32>
// VEC: vector.transfer_write {{.*}} : vector<5xf32>, memref<?x37xf32
// VEC-NOT: memref.copy
// VEC: return

// LLVM-LABEL: llvm.func @kiln_kernel_0
// LLVM: llvm.load {{.*}} -> vector<16xf32>
// LLVM: llvm.fmul {{.*}} : vector<16xf32>
// LLVM: llvm.store {{.*}} : vector<16xf32>, !llvm.ptr
// LLVM: llvm.store {{.*}} : vector<5xf32>, !llvm.ptr

// SCALAR-LABEL: func.func private @kiln_kernel_0
// SCALAR-NOT: linalg.generic
// SCALAR: llvm.load {{.*}} -> f32
func.func @forward(%x: tensor<4x37xf32>, %a: tensor<37xf32>) -> tensor<4x37xf32> {
  %c = kiln.constant dense<2.0> : tensor<f32> : tensor<f32>
  %0 = kiln.mul %x, %a : tensor<4x37xf32>, tensor<37xf32>
  %1 = kiln.add %0, %c : tensor<4x37xf32>, tensor<f32>
  %2 = kiln.relu %1 : tensor<4x37xf32> -> tensor<4x37xf32>
  return %2 : tensor<4x37xf32>
}
