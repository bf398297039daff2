// sum, mean, amax, amin and var over the last dim are row kernels that compute their input's
// elementwise tree (here RMSNorm's x * x) in the pass over each row and store one value per row:
// no buffer for the tree, no runtime call. Sums run in float64. Over a leading dim: a column
// kernel (lower_column_reductions.mlir).
// With a vector width the pass is a linalg reduction, tiled into partial results in registers.
// RUN: kiln-opt --kiln-lower-to-loops %s | FileCheck %s
// RUN: kiln-opt --kiln-lower-to-vectors=vector-bits=256 %s | FileCheck %s --check-prefix=VEC

// CHECK-LABEL: func.func @kiln_entry
// CHECK-NOT: kiln_abi_alloc
// CHECK: call @kiln_kernel_[[S:[0-9]+]]
// CHECK: call @kiln_kernel_[[M:[0-9]+]]
// CHECK: call @kiln_kernel_[[V:[0-9]+]]
// CHECK: call @kiln_kernel_{{[0-9]+}}
// CHECK-NOT: call @kiln_abi_sum
// CHECK: func.func private @kiln_kernel_[[S]]
// CHECK: scf.for
// CHECK: arith.mulf {{.*}} : f32
// CHECK: arith.extf {{.*}} : f32 to f64
// CHECK: arith.addf {{.*}} fastmath<reassoc> : f64
// CHECK: arith.divf {{.*}} : f64
// CHECK: arith.truncf {{.*}} : f64 to f32
// CHECK: llvm.store
// CHECK: func.func private @kiln_kernel_[[M]]
// CHECK: arith.maximumf
// The unbiased variance: the mean, then the squared deviations, over n - 1 = 99.
// CHECK: func.func private @kiln_kernel_[[V]]
// CHECK: arith.addf {{.*}} fastmath<reassoc> : f64
// CHECK: scf.for
// CHECK: arith.subf {{.*}} : f64
// CHECK: arith.mulf {{.*}} : f64
// CHECK: arith.constant 9.900000e+01 : f64

// VEC-LABEL: func.func private @kiln_kernel_0
// VEC: memref.alloca() {{.*}} : memref<8xf64>
// VEC: scf.for {{.*}} -> (vector<8xf64>)
// VEC: arith.mulf {{.*}} : vector<8xf32>
// VEC: arith.extf {{.*}} : vector<8xf32> to vector<8xf64>
// VEC: vector.reduction <add>, {{.*}} : vector<8xf64> into f64
// VEC-LABEL: func.func private @kiln_kernel_1
// VEC: scf.for {{.*}} -> (vector<16xf32>)
// VEC: arith.maximumf {{.*}} : vector<16xf32>
// VEC: vector.reduction <maximumf>
func.func @forward(%x: tensor<4x100xf32>) -> (tensor<4x1xf32>, tensor<4xf32>, tensor<100xf32>, tensor<4xf32>) {
  %0 = kiln.mul %x, %x : tensor<4x100xf32>, tensor<4x100xf32>
  %1 = kiln.mean %0 {dims = array<i64: -1>, keepdim = true} : (tensor<4x100xf32>) -> tensor<4x1xf32>
  %c = kiln.constant dense<2.0> : tensor<f32> : tensor<f32>
  %2 = kiln.mul %x, %c : tensor<4x100xf32>, tensor<f32>
  %3 = kiln.amax %2 {dims = array<i64: 1>, keepdim = false} : (tensor<4x100xf32>) -> tensor<4xf32>
  %v = kiln.var %x {dims = array<i64: -1>, unbiased = true, keepdim = false} : (tensor<4x100xf32>) -> tensor<4xf32>
  %4 = kiln.sum %x {dims = array<i64: 0>, keepdim = false} : (tensor<4x100xf32>) -> tensor<100xf32>
  return %1, %3, %4, %v : tensor<4x1xf32>, tensor<4xf32>, tensor<100xf32>, tensor<4xf32>
}
