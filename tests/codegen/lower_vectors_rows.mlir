// Row kernels in the vector pipeline (DESIGN.md §5, linalg_rows.cpp): the scalar loops over the
// rows stay; each pass over a row is a linalg.generic on tensors over the operands' 1-D row views
// (a reduction into a rank-0 tensor, or a map into the row), the input's elementwise tree
// recomputed in each pass. Each reduction is tiled into one tile of partial results (256 bits x 2
// registers: 16 floats, 8 doubles), carried in registers across its loop, merged by one
// horizontal reduction after it; the remainder peeled (200 = 12 x 16 + 8; 37 = 4 x 8 + 5 and
// 2 x 16 + 5). The reductions' buffers are stack slots at the function's entry, not allocations
// per row; the result is written in place (no copy).
// RUN: kiln-opt --kiln-lower-to-loops=vector-bits=256 %s | FileCheck %s --check-prefix=LINALG
// RUN: kiln-opt --kiln-lower-to-vectors=vector-bits=256 %s | FileCheck %s --check-prefix=VEC
// RUN: kiln-opt --kiln-lower-to-llvm=vector-bits=256 %s | FileCheck %s --check-prefix=LLVM
// Without a width: the scalar row loops.
// RUN: kiln-opt --kiln-lower-to-loops %s | FileCheck %s --check-prefix=SCALAR

// Softmax of the scaled, masked scores: the maximum, the exponentials (into the result's row),
// their sum, the scaling in place.
// LINALG-LABEL: func.func private @kiln_kernel_0
// LINALG-SAME: kiln.vector_bits = 256
// LINALG: scf.for
// LINALG: scf.for
// LINALG-DAG: %[[S:.*]] = bufferization.to_tensor %{{.*}} restrict : memref<200xf32, strided<[1], offset: ?>>
// LINALG-DAG: %[[MASK:.*]] = bufferization.to_tensor %{{.*}} restrict : memref<200xf32, strided<[1], offset: ?>>
// LINALG: %[[MAX0:.*]] = linalg.fill ins(%{{.*}} : f32) outs(%{{.*}} : tensor<f32>)
// LINALG: %[[MAX:.*]] = linalg.generic {{.*}} iterator_types = ["reduction"]} ins(%[[S]], %[[MASK]] : {{.*}}) outs(%[[MAX0]] : tensor<f32>)
// LINALG: arith.maximumf
// LINALG: %[[M:.*]] = tensor.extract %[[MAX]][]
// LINALG: %[[E:.*]] = linalg.generic {{.*}} iterator_types = ["parallel"]} {{.*}} outs(%{{.*}} : tensor<200xf32>)
// LINALG: arith.subf %{{.*}}, %[[M]]
// LINALG: math.exp
// LINALG: %[[SUM:.*]] = linalg.generic {{.*}} iterator_types = ["reduction"]} ins(%[[S]], %[[MASK]], %[[E]] : {{.*}}) outs(%{{.*}} : tensor<f32>)
// LINALG: arith.addf {{.*}} fastmath<reassoc>
// LINALG: %[[Y:.*]] = linalg.generic {{.*}} iterator_types = ["parallel"]} {{.*}} outs(%[[E]] : tensor<200xf32>)
// LINALG: bufferization.materialize_in_destination %[[Y]] in restrict writable

// VEC-LABEL: func.func private @kiln_kernel_0
// VEC-NOT: memref.alloc(
// VEC-NOT: memref.copy
// VEC-NOT: linalg.
// VEC: memref.alloca() {{.*}} : memref<16xf32>
// VEC: scf.for
// VEC: scf.for
// VEC: %[[MAXT:.*]] = scf.for {{.*}} iter_args(%{{.*}} = %{{.*}}) -> (vector<16xf32>)
// VEC: arith.maximumf {{.*}} : vector<16xf32>
// VEC: scf.yield
// VEC: vector.transfer_write %[[MAXT]]
// VEC: vector.transfer_read {{.*}} vector<8xf32>
// VEC: vector.reduction <maximumf>, {{.*}} : vector<16xf32> into f32
// VEC: scf.for
// VEC: vector.transfer_write {{.*}} : vector<16xf32>, memref<200xf32
// VEC: scf.for {{.*}} -> (vector<16xf32>)
// VEC: arith.addf {{.*}} fastmath<reassoc> : vector<16xf32>
// VEC: vector.reduction <add>, {{.*}} : vector<16xf32> into f32
// VEC: scf.for
// VEC: arith.mulf {{.*}} : vector<16xf32>
// VEC: vector.transfer_write {{.*}} : vector<16xf32>, memref<200xf32

// Layer norm with a weight and bias: the mean and the variance summed in float64 (8 doubles a
// tile), then the affine map; the weight's and bias's rows are the same for every row.
// VEC-LABEL: func.func private @kiln_kernel_1
// VEC-NOT: memref.alloc(
// VEC-NOT: linalg.
// VEC: memref.alloca() {{.*}} : memref<8xf64>
// VEC: scf.for
// VEC: scf.for {{.*}} -> (vector<8xf64>)
// VEC: arith.extf {{.*}} : vector<8xf32> to vector<8xf64>
// VEC: arith.addf {{.*}} fastmath<reassoc> : vector<8xf64>
// VEC: vector.reduction <add>, {{.*}} : vector<8xf64> into f64
// VEC: scf.for {{.*}} -> (vector<8xf64>)
// VEC: arith.mulf {{.*}} : vector<8xf64>
// VEC: vector.reduction <add>, {{.*}} : vector<8xf64> into f64
// VEC: math.sqrt {{.*}} : f64
// VEC: scf.for
// VEC-COUNT-3: vector.transfer_read {{.*}} vector<16xf32>
// VEC: vector.transfer_write {{.*}} : vector<16xf32>, memref<37xf32
// VEC: vector.transfer_write {{.*}} : vector<5xf32>, memref<37xf32

// logsumexp: two reductions, one value stored per row.
// VEC-LABEL: func.func private @kiln_kernel_2
// VEC: vector.reduction <maximumf>
// VEC: vector.reduction <add>
// VEC: llvm.store {{.*}} : f32, !llvm.ptr

// The reductions reassociate in LLVM too (the horizontal sums), and their stack slots are
// allocated at the entry.
// LLVM-LABEL: llvm.func @kiln_kernel_0
// LLVM: llvm.alloca {{.*}} x f32
// LLVM: llvm.intr.vector.reduce.fmaximum
// LLVM: "llvm.intr.vector.reduce.fadd"({{.*}}) <{fastmathFlags = #llvm.fastmath<reassoc>}> : (f32, vector<16xf32>) -> f32
// LLVM-LABEL: llvm.func @kiln_kernel_1
// LLVM: "llvm.intr.vector.reduce.fadd"({{.*}}) <{fastmathFlags = #llvm.fastmath<reassoc>}> : (f64, vector<8xf64>) -> f64

// SCALAR-LABEL: func.func private @kiln_kernel_0
// SCALAR-NOT: kiln.vector_bits
// SCALAR-NOT: linalg.
// SCALAR: arith.maximumf {{.*}} : f32
func.func @forward(%s: tensor<2x4x200xf32>, %mask: tensor<4x200xf32>, %x: tensor<6x37xf32>, %w: tensor<37xf32>, %b: tensor<37xf32>) -> (tensor<2x4x200xf32>, tensor<6x37xf32>, tensor<6xf32>) {
  %c = kiln.constant dense<0.125> : tensor<f32> : tensor<f32>
  %0 = kiln.mul %s, %c : tensor<2x4x200xf32>, tensor<f32>
  %1 = kiln.add %0, %mask : tensor<2x4x200xf32>, tensor<4x200xf32>
  %2 = kiln.softmax %1 {dim = -1 : i64} : (tensor<2x4x200xf32>) -> tensor<2x4x200xf32>
  %3 = kiln.layer_norm %x, %w, %b {normalized_shape = array<i64: 37>, eps = 1.0e-05 : f64} : (tensor<6x37xf32>, tensor<37xf32>, tensor<37xf32>) -> tensor<6x37xf32>
  %4 = kiln.logsumexp %x {dims = array<i64: -1>, keepdim = false} : (tensor<6x37xf32>) -> tensor<6xf32>
  return %2, %3, %4 : tensor<2x4x200xf32>, tensor<6x37xf32>, tensor<6xf32>
}
