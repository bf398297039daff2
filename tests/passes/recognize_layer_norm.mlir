// RUN: kiln-opt %s --kiln-recognize-layer-norm | FileCheck %s

// PyTorch's ONNX export of nn.LayerNorm at opset 14: ReduceMean, Sub, Pow 2, ReduceMean, Add eps,
// Sqrt, Div, Mul weight, Add bias.
// CHECK-LABEL: func.func @onnx_export
// CHECK-NOT: kiln.mean
// CHECK: %[[N:.*]] = kiln.layer_norm %arg0, %arg1, %arg2 {eps = 9.99999974{{[0-9]*}}E-6 : f64, normalized_shape = array<i64: 8>}
// CHECK-NOT: kiln.sqrt
// CHECK: return %[[N]]
func.func @onnx_export(%x: tensor<2x4x8xf32>, %w: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<2x4x8xf32> {
  %two = kiln.constant dense<2.0> : tensor<f32> : tensor<f32>
  %eps = kiln.constant dense<1.0e-5> : tensor<f32> : tensor<f32>
  %m = kiln.mean %x {dims = array<i64: -1>, keepdim = true} : (tensor<2x4x8xf32>) -> tensor<2x4x1xf32>
  %d = kiln.sub %x, %m : tensor<2x4x8xf32>, tensor<2x4x1xf32>
  %p = kiln.pow %d, %two : tensor<2x4x8xf32>, tensor<f32>
  %v = kiln.mean %p {dims = array<i64: -1>, keepdim = true} : (tensor<2x4x8xf32>) -> tensor<2x4x1xf32>
  %e = kiln.add %v, %eps : tensor<2x4x1xf32>, tensor<f32>
  %s = kiln.sqrt %e : tensor<2x4x1xf32> -> tensor<2x4x1xf32>
  %n = kiln.div %d, %s : tensor<2x4x8xf32>, tensor<2x4x1xf32>
  %y = kiln.mul %n, %w : tensor<2x4x8xf32>, tensor<8xf32>
  %z = kiln.add %y, %b : tensor<2x4x8xf32>, tensor<8xf32>
  return %z : tensor<2x4x8xf32>
}

// Two trailing dims named positively, the square as a product, rsqrt (first in its product), the
// parameters first, eps on the left; no bias.
// CHECK-LABEL: func.func @two_dims_rsqrt
// CHECK: %[[NONE:.*]] = kiln.none
// CHECK: kiln.layer_norm %arg0, %arg1, %[[NONE]] {eps = 0.0{{.*}}, normalized_shape = array<i64: 3, 4>}
// CHECK-NOT: kiln.mul
func.func @two_dims_rsqrt(%x: tensor<2x3x4xf32>, %w: tensor<3x4xf32>) -> tensor<2x3x4xf32> {
  %eps = kiln.constant dense<0.0> : tensor<f32> : tensor<f32>
  %m = kiln.mean %x {dims = array<i64: 2, 1>, keepdim = true} : (tensor<2x3x4xf32>) -> tensor<2x1x1xf32>
  %d = kiln.sub %x, %m : tensor<2x3x4xf32>, tensor<2x1x1xf32>
  %p = kiln.mul %d, %d : tensor<2x3x4xf32>, tensor<2x3x4xf32>
  %v = kiln.mean %p {dims = array<i64: 1, 2>, keepdim = true} : (tensor<2x3x4xf32>) -> tensor<2x1x1xf32>
  %e = kiln.add %eps, %v : tensor<f32>, tensor<2x1x1xf32>
  %s = kiln.rsqrt %e : tensor<2x1x1xf32> -> tensor<2x1x1xf32>
  %n = kiln.mul %s, %d : tensor<2x1x1xf32>, tensor<2x3x4xf32>
  %y = kiln.mul %w, %n : tensor<3x4xf32>, tensor<2x3x4xf32>
  return %y : tensor<2x3x4xf32>
}

// No affine parameters; a weight of another shape ([1, 8]) stays a product after the norm.
// CHECK-LABEL: func.func @plain_then_broadcast
// CHECK: %[[N:.*]] = kiln.layer_norm %arg0, %{{.*}}, %{{.*}} {eps = 0.100000{{[0-9]*}} : f64, normalized_shape = array<i64: 8>}
// CHECK: kiln.mul %[[N]], %arg1
func.func @plain_then_broadcast(%x: tensor<4x8xf32>, %w: tensor<1x8xf32>) -> tensor<4x8xf32> {
  %two = kiln.constant dense<2.0> : tensor<f32> : tensor<f32>
  %eps = kiln.constant dense<0.1> : tensor<f32> : tensor<f32>
  %m = kiln.mean %x {dims = array<i64: 1>, keepdim = true} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %d = kiln.sub %x, %m : tensor<4x8xf32>, tensor<4x1xf32>
  %p = kiln.pow %d, %two : tensor<4x8xf32>, tensor<f32>
  %v = kiln.mean %p {dims = array<i64: 1>, keepdim = true} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %e = kiln.add %v, %eps : tensor<4x1xf32>, tensor<f32>
  %s = kiln.sqrt %e : tensor<4x1xf32> -> tensor<4x1xf32>
  %n = kiln.div %d, %s : tensor<4x8xf32>, tensor<4x1xf32>
  %y = kiln.mul %n, %w : tensor<4x8xf32>, tensor<1x8xf32>
  return %y : tensor<4x8xf32>
}

// One constant feeding two ops of the chain (eps 2 and the exponent 2): replaced once, erased once.
// CHECK-LABEL: func.func @shared_constant
// CHECK: kiln.layer_norm %arg0, %{{.*}}, %{{.*}} {eps = 2.000000e+00 : f64, normalized_shape = array<i64: 8>}
// CHECK-NOT: kiln.constant
// CHECK: return
func.func @shared_constant(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %two = kiln.constant dense<2.0> : tensor<f32> : tensor<f32>
  %m = kiln.mean %x {dims = array<i64: -1>, keepdim = true} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %d = kiln.sub %x, %m : tensor<4x8xf32>, tensor<4x1xf32>
  %p = kiln.pow %d, %two : tensor<4x8xf32>, tensor<f32>
  %v = kiln.mean %p {dims = array<i64: -1>, keepdim = true} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %e = kiln.add %v, %two : tensor<4x1xf32>, tensor<f32>
  %s = kiln.sqrt %e : tensor<4x1xf32> -> tensor<4x1xf32>
  %n = kiln.div %d, %s : tensor<4x8xf32>, tensor<4x1xf32>
  return %n : tensor<4x8xf32>
}

// Left alone: a leading dim's mean (not trailing), an exponent of 3, the centred value also
// returned, and a product by the square root.
// CHECK-LABEL: func.func @not_layer_norm
// CHECK-NOT: kiln.layer_norm
// CHECK: return
func.func @not_layer_norm(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %two = kiln.constant dense<2.0> : tensor<f32> : tensor<f32>
  %three = kiln.constant dense<3.0> : tensor<f32> : tensor<f32>
  %eps = kiln.constant dense<1.0e-5> : tensor<f32> : tensor<f32>
  // The mean over dim 0.
  %m0 = kiln.mean %x {dims = array<i64: 0>, keepdim = true} : (tensor<4x8xf32>) -> tensor<1x8xf32>
  %d0 = kiln.sub %x, %m0 : tensor<4x8xf32>, tensor<1x8xf32>
  %p0 = kiln.pow %d0, %two : tensor<4x8xf32>, tensor<f32>
  %v0 = kiln.mean %p0 {dims = array<i64: 0>, keepdim = true} : (tensor<4x8xf32>) -> tensor<1x8xf32>
  %e0 = kiln.add %v0, %eps : tensor<1x8xf32>, tensor<f32>
  %s0 = kiln.sqrt %e0 : tensor<1x8xf32> -> tensor<1x8xf32>
  %n0 = kiln.div %d0, %s0 : tensor<4x8xf32>, tensor<1x8xf32>
  // Cubed.
  %m1 = kiln.mean %x {dims = array<i64: 1>, keepdim = true} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %d1 = kiln.sub %x, %m1 : tensor<4x8xf32>, tensor<4x1xf32>
  %p1 = kiln.pow %d1, %three : tensor<4x8xf32>, tensor<f32>
  %v1 = kiln.mean %p1 {dims = array<i64: 1>, keepdim = true} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %e1 = kiln.add %v1, %eps : tensor<4x1xf32>, tensor<f32>
  %s1 = kiln.sqrt %e1 : tensor<4x1xf32> -> tensor<4x1xf32>
  %n1 = kiln.div %d1, %s1 : tensor<4x8xf32>, tensor<4x1xf32>
  // The centred value escapes (returned below).
  %m2 = kiln.mean %x {dims = array<i64: 1>, keepdim = true} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %d2 = kiln.sub %x, %m2 : tensor<4x8xf32>, tensor<4x1xf32>
  %p2 = kiln.pow %d2, %two : tensor<4x8xf32>, tensor<f32>
  %v2 = kiln.mean %p2 {dims = array<i64: 1>, keepdim = true} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %e2 = kiln.add %v2, %eps : tensor<4x1xf32>, tensor<f32>
  %s2 = kiln.sqrt %e2 : tensor<4x1xf32> -> tensor<4x1xf32>
  %n2 = kiln.div %d2, %s2 : tensor<4x8xf32>, tensor<4x1xf32>
  %r2 = kiln.add %n2, %d2 : tensor<4x8xf32>, tensor<4x8xf32>
  // A product by the square root (not its reciprocal).
  %m3 = kiln.mean %x {dims = array<i64: 1>, keepdim = true} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %d3 = kiln.sub %x, %m3 : tensor<4x8xf32>, tensor<4x1xf32>
  %p3 = kiln.pow %d3, %two : tensor<4x8xf32>, tensor<f32>
  %v3 = kiln.mean %p3 {dims = array<i64: 1>, keepdim = true} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %e3 = kiln.add %v3, %eps : tensor<4x1xf32>, tensor<f32>
  %s3 = kiln.sqrt %e3 : tensor<4x1xf32> -> tensor<4x1xf32>
  %n3 = kiln.mul %d3, %s3 : tensor<4x8xf32>, tensor<4x1xf32>
  return %n0, %n1, %r2, %n3 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}
