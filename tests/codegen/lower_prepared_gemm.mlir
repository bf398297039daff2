// A linear layer whose weight is a frozen (non-splat) constant, and a matmul whose right operand is
// one, call the runtime's *_prepared entry points with a slot of their own, as convolutions do
// (lower_prepared.mlir): the runtime packs the weight once for the GEMM instead of on every call
// (an RNN's recurrent weight, once per step). A weight passed as an argument may change between
// calls: plain call.
// RUN: kiln-opt --kiln-lower-to-loops %s | FileCheck %s

// CHECK-DAG: llvm.mlir.global internal @[[S0:kiln_prepared_[0-9]+]](0 : i64)
// CHECK-DAG: llvm.mlir.global internal @[[S1:kiln_prepared_[0-9]+]](0 : i64)
// CHECK-DAG: llvm.mlir.global internal @[[S2:kiln_prepared_[0-9]+]](0 : i64)
// CHECK-DAG: func.func private @kiln_abi_matmul_prepared(!llvm.ptr, !llvm.ptr, !llvm.ptr)
// CHECK-DAG: func.func private @kiln_abi_linear_prepared(!llvm.ptr, !llvm.ptr, !llvm.ptr)
// CHECK-DAG: func.func private @kiln_abi_linear_fused_prepared(!llvm.ptr, !llvm.ptr, !llvm.ptr)
// CHECK-DAG: func.func private @kiln_abi_linear(!llvm.ptr, !llvm.ptr)
// CHECK-LABEL: func.func @kiln_entry
// CHECK: call @kiln_abi_linear_prepared(%{{.*}}, %{{.*}}, %{{.*}})
// CHECK: call @kiln_abi_linear_fused_prepared(%{{.*}}, %{{.*}}, %{{.*}})
// CHECK: call @kiln_abi_linear(%{{.*}}, %{{.*}}) : (!llvm.ptr, !llvm.ptr) -> ()
// CHECK: call @kiln_abi_matmul_prepared(%{{.*}}, %{{.*}}, %{{.*}})
// CHECK: return
// CHECK-LABEL: func.func @kiln_entry_release()
// CHECK-COUNT-3: call @kiln_abi_release_prepared
func.func @forward(%x: tensor<3x2xf32>, %w3: tensor<2x2xf32>) -> tensor<3x2xf32> {
  %none = kiln.none
  %w = kiln.constant dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32> : tensor<2x2xf32>
  %w2 = kiln.constant dense<[[0.5, -1.0], [2.0, 0.25]]> : tensor<2x2xf32> : tensor<2x2xf32>
  %0 = kiln.linear %x, %w, %none : (tensor<3x2xf32>, tensor<2x2xf32>, none) -> tensor<3x2xf32>
  %1 = kiln.linear_fused %0, %w2, %none, %none {activation = 1 : i64, clamp_max = 0.0 : f64, clamp_min = 0.0 : f64} : (tensor<3x2xf32>, tensor<2x2xf32>, none, none) -> tensor<3x2xf32>
  %2 = kiln.linear %1, %w3, %none : (tensor<3x2xf32>, tensor<2x2xf32>, none) -> tensor<3x2xf32>
  %3 = kiln.matmul %2, %w2 : tensor<3x2xf32>, tensor<2x2xf32>
  return %3 : tensor<3x2xf32>
}
