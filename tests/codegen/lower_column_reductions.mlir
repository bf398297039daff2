// sum / mean / amax / amin over consecutive leading dims that keep the last dim are column
// kernels: the input viewed as [A, R, I], each unit one a and a chunk of up to 256 columns whose
// accumulators (float64 for sums) sit in a stack array while the R rows are read contiguously,
// the input's elementwise tree (here x * x + b) computed in the pass: no buffer for the tree, no
// runtime call. When an operand does not step over a group of dims as over one (a permute inside
// the reduced block), the runtime's reduction.
// RUN: kiln-opt --kiln-lower-to-loops %s | FileCheck %s

// CHECK-LABEL: func.func @kiln_entry
// CHECK-NOT: kiln_abi_alloc
// CHECK: call @kiln_kernel_[[S:[0-9]+]]
// CHECK: call @kiln_kernel_[[M:[0-9]+]]
// CHECK: call @kiln_abi_amax
// CHECK: func.func private @kiln_kernel_[[S]]
// CHECK: llvm.alloca {{.*}} x f64
// CHECK: scf.for
// CHECK: arith.divsi
// CHECK: arith.remsi
// CHECK: scf.for
// CHECK: llvm.store
// CHECK: scf.for
// CHECK: scf.for
// CHECK: arith.mulf {{.*}} : f32
// CHECK: arith.addf {{.*}} : f32
// CHECK: arith.extf {{.*}} : f32 to f64
// CHECK: arith.addf {{.*}} : f64
// CHECK: scf.for
// CHECK: arith.truncf {{.*}} : f64 to f32
// CHECK: func.func private @kiln_kernel_[[M]]
// CHECK: arith.divf {{.*}} : f64
func.func @forward(%x: tensor<64x37xf32>, %b: tensor<37xf32>, %y: tensor<4x50x37xf32>, %z: tensor<5x6x7xf32>) -> (tensor<37xf32>, tensor<4x1x37xf32>, tensor<7xf32>) {
  %0 = kiln.mul %x, %x : tensor<64x37xf32>, tensor<64x37xf32>
  %1 = kiln.add %0, %b : tensor<64x37xf32>, tensor<37xf32>
  %2 = kiln.sum %1 {dims = array<i64: 0>, keepdim = false} : (tensor<64x37xf32>) -> tensor<37xf32>
  %3 = kiln.mean %y {dims = array<i64: 1>, keepdim = true} : (tensor<4x50x37xf32>) -> tensor<4x1x37xf32>
  %p = kiln.permute %z {dims = array<i64: 1, 0, 2>} : (tensor<5x6x7xf32>) -> tensor<6x5x7xf32>
  %4 = kiln.amax %p {dims = array<i64: 0, 1>, keepdim = false} : (tensor<6x5x7xf32>) -> tensor<7xf32>
  return %2, %3, %4 : tensor<37xf32>, tensor<4x1x37xf32>, tensor<7xf32>
}
