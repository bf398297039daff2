// RUN: kiln-opt %s --kiln-fold-qdq | FileCheck %s

// The QDQ form of a conv layer with a float bias and relu: one kiln.qconv2d. The bias becomes
// int32 at x_scale * w_scale[o]: 0.5 / (0.1 * 0.25) = 20, -0.3 / (0.1 * 0.5) = -6.
// CHECK-LABEL: func.func @conv_relu
// CHECK-NOT: kiln.conv2d
// CHECK-NOT: kiln.relu
// CHECK: %[[B:.*]] = kiln.constant dense<[20, -6]> : tensor<2xi32>
// CHECK: %[[Q:.*]] = kiln.qconv2d %arg0, %[[XS:.*]], %[[XZ:.*]], %[[W:.*]], %[[WS:.*]], %[[WZ:.*]], %[[B]], %[[YS:.*]], %[[YZ:.*]] {dilation = array<i64: 1, 1>, dtype = 5 : i64, groups = 1 : i64, padding = array<i64: 1, 1>, relu = true, stride = array<i64: 1, 1>}
// CHECK-NOT: kiln.quantize
// CHECK: return %[[Q]]
func.func @conv_relu(%xq: tensor<1x3x4x4xui8>) -> tensor<1x2x4x4xui8> {
  %xs = kiln.constant dense<0.1> : tensor<f32> : tensor<f32>
  %xz = kiln.constant dense<128> : tensor<i32> : tensor<i32>
  %wq = kiln.constant dense<3> : tensor<2x3x3x3xi8> : tensor<2x3x3x3xi8>
  %ws = kiln.constant dense<[0.25, 0.5]> : tensor<2xf32> : tensor<2xf32>
  %wz = kiln.constant dense<0> : tensor<2xi32> : tensor<2xi32>
  %b = kiln.constant dense<[0.5, -0.3]> : tensor<2xf32> : tensor<2xf32>
  %ys = kiln.constant dense<0.2> : tensor<f32> : tensor<f32>
  %yz = kiln.constant dense<10> : tensor<i32> : tensor<i32>
  %x = kiln.dequantize %xq, %xs, %xz {axis = 1 : i64} : (tensor<1x3x4x4xui8>, tensor<f32>, tensor<i32>) -> tensor<1x3x4x4xf32>
  %w = kiln.dequantize %wq, %ws, %wz {axis = 0 : i64} : (tensor<2x3x3x3xi8>, tensor<2xf32>, tensor<2xi32>) -> tensor<2x3x3x3xf32>
  %y = kiln.conv2d %x, %w, %b {dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 1, 1>, stride = array<i64: 1, 1>} : (tensor<1x3x4x4xf32>, tensor<2x3x3x3xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
  %r = kiln.relu %y : tensor<1x2x4x4xf32> -> tensor<1x2x4x4xf32>
  %q = kiln.quantize %r, %ys, %yz {axis = 1 : i64, dtype = 5 : i64} : (tensor<1x2x4x4xf32>, tensor<f32>, tensor<i32>) -> tensor<1x2x4x4xui8>
  return %q : tensor<1x2x4x4xui8>
}

// A linear layer without bias or relu, int8 out: kiln.qlinear with no bias (kiln.none), and the
// scales need not be constants.
// CHECK-LABEL: func.func @linear
// CHECK: %[[N:.*]] = kiln.none
// CHECK: %[[Q:.*]] = kiln.qlinear %arg0, %arg1, %arg2, %arg3, %arg4, %arg5, %[[N]], %arg6, %arg7 {dtype = 4 : i64, relu = false}
// CHECK-NOT: kiln.linear
// CHECK: return %[[Q]]
func.func @linear(%xq: tensor<2x8xi8>, %xs: tensor<f32>, %xz: tensor<i32>, %wq: tensor<4x8xi8>, %ws: tensor<f32>, %wz: tensor<i32>, %ys: tensor<f32>, %yz: tensor<i32>) -> tensor<2x4xi8> {
  %none = kiln.none
  %x = kiln.dequantize %xq, %xs, %xz {axis = 1 : i64} : (tensor<2x8xi8>, tensor<f32>, tensor<i32>) -> tensor<2x8xf32>
  %w = kiln.dequantize %wq, %ws, %wz {axis = 1 : i64} : (tensor<4x8xi8>, tensor<f32>, tensor<i32>) -> tensor<4x8xf32>
  %y = kiln.linear %x, %w, %none : (tensor<2x8xf32>, tensor<4x8xf32>, none) -> tensor<2x4xf32>
  %q = kiln.quantize %y, %ys, %yz {axis = 1 : i64, dtype = 4 : i64} : (tensor<2x4xf32>, tensor<f32>, tensor<i32>) -> tensor<2x4xi8>
  return %q : tensor<2x4xi8>
}

// The float result has another user: nothing folds (the layer must stay float for it).
// CHECK-LABEL: func.func @shared_result
// CHECK: kiln.linear
// CHECK: kiln.quantize
// CHECK-NOT: kiln.qlinear
func.func @shared_result(%xq: tensor<2x8xi8>, %xs: tensor<f32>, %xz: tensor<i32>, %wq: tensor<4x8xi8>, %ws: tensor<f32>, %wz: tensor<i32>, %ys: tensor<f32>, %yz: tensor<i32>) -> (tensor<2x4xi8>, tensor<2x4xf32>) {
  %none = kiln.none
  %x = kiln.dequantize %xq, %xs, %xz {axis = 1 : i64} : (tensor<2x8xi8>, tensor<f32>, tensor<i32>) -> tensor<2x8xf32>
  %w = kiln.dequantize %wq, %ws, %wz {axis = 1 : i64} : (tensor<4x8xi8>, tensor<f32>, tensor<i32>) -> tensor<4x8xf32>
  %y = kiln.linear %x, %w, %none : (tensor<2x8xf32>, tensor<4x8xf32>, none) -> tensor<2x4xf32>
  %q = kiln.quantize %y, %ys, %yz {axis = 1 : i64, dtype = 4 : i64} : (tensor<2x4xf32>, tensor<f32>, tensor<i32>) -> tensor<2x4xi8>
  return %q, %y : tensor<2x4xi8>, tensor<2x4xf32>
}

// A float bias with scales that are not constants cannot become int32: nothing folds.
// CHECK-LABEL: func.func @bias_needs_constant_scales
// CHECK: kiln.linear
// CHECK-NOT: kiln.qlinear
func.func @bias_needs_constant_scales(%xq: tensor<2x8xi8>, %xs: tensor<f32>, %xz: tensor<i32>, %wq: tensor<4x8xi8>, %ws: tensor<f32>, %wz: tensor<i32>, %b: tensor<4xf32>, %ys: tensor<f32>, %yz: tensor<i32>) -> tensor<2x4xi8> {
  %x = kiln.dequantize %xq, %xs, %xz {axis = 1 : i64} : (tensor<2x8xi8>, tensor<f32>, tensor<i32>) -> tensor<2x8xf32>
  %w = kiln.dequantize %wq, %ws, %wz {axis = 1 : i64} : (tensor<4x8xi8>, tensor<f32>, tensor<i32>) -> tensor<4x8xf32>
  %y = kiln.linear %x, %w, %b : (tensor<2x8xf32>, tensor<4x8xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %q = kiln.quantize %y, %ys, %yz {axis = 1 : i64, dtype = 4 : i64} : (tensor<2x4xf32>, tensor<f32>, tensor<i32>) -> tensor<2x4xi8>
  return %q : tensor<2x4xi8>
}

// ReLU6 under a quantize whose top (quantize(6) = 6 / 0.025 = 240 + 20 = 260 >= 255) saturates
// anyway folds like relu; with a wider output range (quantize(6) = 6 / 0.05 + 20 = 140) the clamp
// cuts inside the range and stays.
// CHECK-LABEL: func.func @relu6
// CHECK: kiln.qconv2d {{.*}}relu = true
// CHECK-NOT: kiln.clamp
// CHECK-LABEL: func.func @clamp_inside_range
// CHECK: kiln.conv2d
// CHECK: kiln.clamp
// CHECK-NOT: kiln.qconv2d
func.func @relu6(%xq: tensor<1x1x2x2xui8>) -> tensor<1x1x1x1xui8> {
  %xs = kiln.constant dense<0.1> : tensor<f32> : tensor<f32>
  %xz = kiln.constant dense<0> : tensor<i32> : tensor<i32>
  %wq = kiln.constant dense<1> : tensor<1x1x2x2xi8> : tensor<1x1x2x2xi8>
  %ws = kiln.constant dense<0.5> : tensor<f32> : tensor<f32>
  %wz = kiln.constant dense<0> : tensor<i32> : tensor<i32>
  %none = kiln.none
  %ys = kiln.constant dense<0.025> : tensor<f32> : tensor<f32>
  %yz = kiln.constant dense<20> : tensor<i32> : tensor<i32>
  %x = kiln.dequantize %xq, %xs, %xz {axis = 1 : i64} : (tensor<1x1x2x2xui8>, tensor<f32>, tensor<i32>) -> tensor<1x1x2x2xf32>
  %w = kiln.dequantize %wq, %ws, %wz {axis = 0 : i64} : (tensor<1x1x2x2xi8>, tensor<f32>, tensor<i32>) -> tensor<1x1x2x2xf32>
  %y = kiln.conv2d %x, %w, %none {dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>, none) -> tensor<1x1x1x1xf32>
  %r = kiln.clamp %y {min = 0.0 : f64, max = 6.0 : f64} : (tensor<1x1x1x1xf32>) -> tensor<1x1x1x1xf32>
  %q = kiln.quantize %r, %ys, %yz {axis = 1 : i64, dtype = 5 : i64} : (tensor<1x1x1x1xf32>, tensor<f32>, tensor<i32>) -> tensor<1x1x1x1xui8>
  return %q : tensor<1x1x1x1xui8>
}

func.func @clamp_inside_range(%xq: tensor<1x1x2x2xui8>) -> tensor<1x1x1x1xui8> {
  %xs = kiln.constant dense<0.1> : tensor<f32> : tensor<f32>
  %xz = kiln.constant dense<0> : tensor<i32> : tensor<i32>
  %wq = kiln.constant dense<1> : tensor<1x1x2x2xi8> : tensor<1x1x2x2xi8>
  %ws = kiln.constant dense<0.5> : tensor<f32> : tensor<f32>
  %wz = kiln.constant dense<0> : tensor<i32> : tensor<i32>
  %none = kiln.none
  %ys = kiln.constant dense<0.05> : tensor<f32> : tensor<f32>
  %yz = kiln.constant dense<20> : tensor<i32> : tensor<i32>
  %x = kiln.dequantize %xq, %xs, %xz {axis = 1 : i64} : (tensor<1x1x2x2xui8>, tensor<f32>, tensor<i32>) -> tensor<1x1x2x2xf32>
  %w = kiln.dequantize %wq, %ws, %wz {axis = 0 : i64} : (tensor<1x1x2x2xi8>, tensor<f32>, tensor<i32>) -> tensor<1x1x2x2xf32>
  %y = kiln.conv2d %x, %w, %none {dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>, none) -> tensor<1x1x1x1xf32>
  %r = kiln.clamp %y {min = 0.0 : f64, max = 6.0 : f64} : (tensor<1x1x1x1xf32>) -> tensor<1x1x1x1xf32>
  %q = kiln.quantize %r, %ys, %yz {axis = 1 : i64, dtype = 5 : i64} : (tensor<1x1x1x1xf32>, tensor<f32>, tensor<i32>) -> tensor<1x1x1x1xui8>
  return %q : tensor<1x1x1x1xui8>
}
