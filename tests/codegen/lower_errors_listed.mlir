// Every op that cannot be compiled is named at once with its position, before any code is
// emitted: two ops no strategy takes, and a result with a dynamic dimension.
// RUN: not kiln-opt --kiln-lower-to-llvm %s 2>&1 | FileCheck %s

// CHECK-DAG: cannot compile 'tensor.empty' (op #0 of @forward{{.*}}): no lowering for this op
// CHECK-DAG: cannot compile 'tensor.cast' (op #2 of @forward{{.*}}): result 0 has a dynamic dimension 0
// CHECK-DAG: cannot compile 'tensor.cast' (op #2 of @forward{{.*}}): no lowering for this op
// CHECK-DAG: cannot compile 'tensor.empty' (op #4 of @forward{{.*}}): no lowering for this op
func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = tensor.empty() : tensor<4xf32>
  %1 = kiln.add %x, %0 : tensor<4xf32>, tensor<4xf32>
  %2 = tensor.cast %1 : tensor<4xf32> to tensor<?xf32>
  %3 = kiln.exp %1 : tensor<4xf32> -> tensor<4xf32>
  %4 = tensor.empty() : tensor<4xf32>
  %5 = kiln.mul %3, %4 : tensor<4xf32>, tensor<4xf32>
  return %5 : tensor<4xf32>
}
