// RUN: kiln-opt %s --kiln-eliminate-gradients=num-outputs=1 | FileCheck %s
// RUN: not kiln-opt %s --kiln-eliminate-gradients=num-outputs=3 2>&1 | FileCheck %s --check-prefix=ERR

// Without kiln.num_outputs (a module not from the tracer) the option says how many results are
// outputs; the rest (here an updated weight) are dropped with what computes them.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: (%arg0: tensor<2xf32>) -> tensor<2xf32>
// CHECK-NEXT: %[[E:.*]] = kiln.exp %arg0
// CHECK-NEXT: return %[[E]]
// ERR: kiln-eliminate-gradients: keeping 3 results, but @forward returns 2
func.func @forward(%x: tensor<2xf32>, %w: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) {
  %0 = kiln.exp %x : tensor<2xf32> -> tensor<2xf32>
  %1 = kiln.mul %w, %0 : tensor<2xf32>, tensor<2xf32>
  return %0, %1 : tensor<2xf32>, tensor<2xf32>
}
