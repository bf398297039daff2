// RUN: kiln-opt %s --kiln-eliminate-gradients | FileCheck %s
// RUN: kiln-opt %s --kiln-eliminate-gradients=drop-loss-head=true | FileCheck %s --check-prefix=HEAD

// A hand-written SGD step: loss, its gradient and the updated weight (an in-out result).
// Keeping kiln.num_outputs = 1 result drops the backward and the update and the argument only they
// read (the learning-rate tensor).
// CHECK-LABEL: func.func @forward
// CHECK-SAME: (%arg0: tensor<4x3xf32>, %arg1: tensor<4xi64>, %arg2: tensor<2x3xf32>) -> tensor<f32>
// CHECK-SAME: kiln.arg_names = ["input0", "input1", "w"], kiln.num_outputs = 1 : i64
// CHECK: kiln.linear
// CHECK-NEXT: %[[L:.*]] = kiln.cross_entropy
// CHECK-NEXT: return %[[L]]
// With drop-loss-head the logits are the result and the targets argument goes too.
// HEAD-LABEL: func.func @forward
// HEAD-SAME: (%arg0: tensor<4x3xf32>, %arg1: tensor<2x3xf32>) -> tensor<4x2xf32>
// HEAD-SAME: kiln.arg_names = ["input0", "w"]
// HEAD-NEXT: %[[N:.*]] = kiln.none
// HEAD-NEXT: %[[Y:.*]] = kiln.linear %arg0, %arg1, %[[N]]
// HEAD-NEXT: return %[[Y]]
func.func @forward(%x: tensor<4x3xf32>, %t: tensor<4xi64>, %w: tensor<2x3xf32>, %lr: tensor<f32>) -> (tensor<f32>, tensor<2x3xf32>) attributes {kiln.arg_names = ["input0", "input1", "w", "lr"], kiln.num_outputs = 1 : i64} {
  %none = kiln.none
  %y = kiln.linear %x, %w, %none : (tensor<4x3xf32>, tensor<2x3xf32>, none) -> tensor<4x2xf32>
  %loss = kiln.cross_entropy %y, %t, %none {ignore_index = -100 : i64, label_smoothing = 0.0 : f64, reduction = 1 : i64} : (tensor<4x2xf32>, tensor<4xi64>, none) -> tensor<f32>
  %one = kiln.constant dense<1.0> : tensor<f32> : tensor<f32>
  %gy = kiln.cross_entropy_backward %one, %y, %t, %none {ignore_index = -100 : i64, label_smoothing = 0.0 : f64, reduction = 1 : i64} : (tensor<f32>, tensor<4x2xf32>, tensor<4xi64>, none) -> tensor<4x2xf32>
  %gyt = kiln.transpose %gy {dim0 = 0 : i64, dim1 = 1 : i64} : (tensor<4x2xf32>) -> tensor<2x4xf32>
  %gw = kiln.matmul %gyt, %x : tensor<2x4xf32>, tensor<4x3xf32>
  %step = kiln.mul %gw, %lr : tensor<2x3xf32>, tensor<f32>
  %w2 = kiln.sub %w, %step : tensor<2x3xf32>, tensor<2x3xf32>
  return %loss, %w2 : tensor<f32>, tensor<2x3xf32>
}

