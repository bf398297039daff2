// The vector pipeline on a dense chain of unknown extent: the kernel runs over [begin, end) of its
// one coalesced dim (the thread pool's share), so the peeled remainder's size is dynamic and its
// reads and writes are masked. A kiln.fused region's two results (exp and a comparison, stored
// as bytes) come from one generic and one loop; the lanes follow the widest element (f32: 8 per
// 256 bits, 16 per tile). f32 exp is the runtime's formula, expanded before vectorization.
// RUN: kiln-opt --kiln-lower-to-loops=vector-bits=256 %s | FileCheck %s --check-prefix=LINALG
// RUN: kiln-opt --kiln-lower-to-vectors=vector-bits=256 %s | FileCheck %s --check-prefix=VEC
// RUN: kiln-opt --kiln-lower-to-llvm=vector-bits=256 %s | FileCheck %s --check-prefix=LLVM

// LINALG-LABEL: func.func private @kiln_kernel_0
// LINALG: %[[E0:.*]] = tensor.empty(%{{.*}}) : tensor<?xf32>
// LINALG: %[[E1:.*]] = tensor.empty(%{{.*}}) : tensor<?xi8>
// LINALG: %[[R:.*]]:2 = linalg.generic
// LINALG-SAME: outs(%[[E0]], %[[E1]] : tensor<?xf32>, tensor<?xi8>)
// LINALG: math.exp
// LINALG: arith.cmpf ogt
// LINALG: arith.extui %{{.*}} : i1 to i8
// LINALG: bufferization.materialize_in_destination %[[R]]#0
// LINALG: bufferization.materialize_in_destination %[[R]]#1

// VEC-LABEL: func.func private @kiln_kernel_0
// VEC-NOT: memref.alloc
// VEC-NOT: math.exp
// VEC: scf.for %{{.*}} = %c0 to %{{.*}} step %c16
// VEC: vector.transfer_read {{.*}} : memref<?xf32, strided<[1], offset: ?>>, vector<16xf32>
// VEC-DAG: vector.transfer_write {{.*}} : vector<16xf32>, memref<?xf32
// VEC-DAG: vector.transfer_write {{.*}} : vector<16xi8>, memref<?xi8
// VEC: scf.for
// VEC: %[[M:.*]] = vector.create_mask %{{.*}} : vector<16xi1>
// VEC: vector.transfer_read %{{.*}}, %[[M]] {in_bounds = [true]} : memref<?xf32, strided<[1], offset: ?>>, vector<16xf32>
// VEC-DAG: vector.transfer_write %{{.*}}, %[[M]] {in_bounds = [true]} : vector<16xf32>, memref<?xf32
// VEC-DAG: vector.transfer_write %{{.*}}, %[[M]] {in_bounds = [true]} : vector<16xi8>, memref<?xi8
// VEC-NOT: memref.copy
// VEC: return

// LLVM-LABEL: llvm.func @kiln_kernel_0
// LLVM: llvm.load {{.*}} -> vector<16xf32>
// LLVM: llvm.intr.masked.load {{.*}} -> vector<16xf32>
// LLVM: llvm.intr.masked.store {{.*}} : vector<16xf32>, vector<16xi1>
// LLVM: llvm.intr.masked.store {{.*}} : vector<16xi8>, vector<16xi1>
func.func @forward(%x: tensor<1000xf32>, %z: tensor<f32>) -> (tensor<1000xf32>, tensor<1000xi1>) {
  %0:2 = kiln.fused(%x, %z) : (tensor<1000xf32>, tensor<f32>) -> (tensor<1000xf32>, tensor<1000xi1>) {
  ^bb0(%p: tensor<1000xf32>, %q: tensor<f32>):
    %1 = kiln.exp %p : tensor<1000xf32> -> tensor<1000xf32>
    %2 = kiln.gt %p, %q : tensor<1000xf32>, tensor<f32>
    kiln.yield %1, %2 : tensor<1000xf32>, tensor<1000xi1>
  }
  return %0#0, %0#1 : tensor<1000xf32>, tensor<1000xi1>
}
