// An update op computed in a loop's carried buffer (masked_fill of the carried value, yielded back
// in its place: control_flow.cpp's in-place plan) reads and writes one buffer. Its vector kernel
// takes that buffer's tensor as the generic's init (writable), read through the output argument,
// so bufferization updates it in place: no allocation, no copy.
// RUN: kiln-opt --kiln-lower-to-loops=vector-bits=256 %s | FileCheck %s --check-prefix=LINALG
// RUN: kiln-opt --kiln-lower-to-vectors=vector-bits=256 %s | FileCheck %s --check-prefix=VEC

// The kernel writing the loop's result (the copy of %x into the carried buffer comes first).
// LINALG-LABEL: func.func private @kiln_kernel_1
// LINALG: %[[MASK:.*]] = bufferization.to_tensor %{{.*}} restrict : memref<?xi8
// LINALG: %[[C:.*]] = bufferization.to_tensor %[[BUF:.*]] restrict writable : memref<?xf32
// LINALG: %[[R:.*]] = linalg.generic {{.*}} ins(%[[MASK]] : tensor<?xi8>) outs(%[[C]] : tensor<?xf32>)
// LINALG: ^bb0(%[[M:.*]]: i8, %[[OLD:.*]]: f32):
// LINALG: %[[BIT:.*]] = arith.trunci %[[M]] : i8 to i1
// LINALG: arith.select %[[BIT]], %{{.*}}, %[[OLD]] : f32
// LINALG: bufferization.materialize_in_destination %[[R]] in writable %[[BUF]]

// VEC-LABEL: func.func private @kiln_kernel_1
// VEC-NOT: memref.alloc
// VEC-NOT: memref.copy
// VEC: %[[OLD:.*]] = vector.transfer_read %[[BUF:.*]][%{{.*}}], {{.*}} vector<16xf32>
// VEC: vector.transfer_write %{{.*}}, %[[BUF]][%{{.*}}] {{.*}} : vector<16xf32>
// VEC-NOT: memref.copy
// VEC: return
func.func @forward(%x: tensor<40xf32>, %m: tensor<40xi1>) -> tensor<40xf32> {
  %c0 = arith.constant 0 : index
  %c5 = arith.constant 5 : index
  %c1 = arith.constant 1 : index
  %r = scf.for %i = %c0 to %c5 step %c1 iter_args(%c = %x) -> (tensor<40xf32>) {
    %n = kiln.masked_fill %c, %m {value = 3.0 : f64} : (tensor<40xf32>, tensor<40xi1>) -> tensor<40xf32>
    scf.yield %n : tensor<40xf32>
  }
  return %r : tensor<40xf32>
}
