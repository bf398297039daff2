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

// A residual add with relu between Q/DQ pairs: one kiln.qadd on the bytes.
// CHECK-LABEL: func.func @residual_add_relu
// CHECK: %[[Q:.*]] = kiln.qadd %arg0, %arg1, %arg2, %arg3, %arg4, %arg5, %arg6, %arg7 {dtype = 5 : i64, relu = true}
// CHECK-NOT: kiln.dequantize
// CHECK-NOT: kiln.add
// CHECK-NOT: kiln.relu
// CHECK-NOT: kiln.quantize
// CHECK: return %[[Q]]
func.func @residual_add_relu(%aq: tensor<1x4x3x3xui8>, %as: tensor<f32>, %az: tensor<i32>, %bq: tensor<1x4x3x3xi8>, %bs: tensor<f32>, %bz: tensor<i32>, %ys: tensor<f32>, %yz: tensor<i32>) -> tensor<1x4x3x3xui8> {
  %a = kiln.dequantize %aq, %as, %az {axis = 1 : i64} : (tensor<1x4x3x3xui8>, tensor<f32>, tensor<i32>) -> tensor<1x4x3x3xf32>
  %b = kiln.dequantize %bq, %bs, %bz {axis = 1 : i64} : (tensor<1x4x3x3xi8>, tensor<f32>, tensor<i32>) -> tensor<1x4x3x3xf32>
  %s = kiln.add %a, %b : tensor<1x4x3x3xf32>, tensor<1x4x3x3xf32>
  %r = kiln.relu %s : tensor<1x4x3x3xf32> -> tensor<1x4x3x3xf32>
  %q = kiln.quantize %r, %ys, %yz {axis = 1 : i64, dtype = 5 : i64} : (tensor<1x4x3x3xf32>, tensor<f32>, tensor<i32>) -> tensor<1x4x3x3xui8>
  return %q : tensor<1x4x3x3xui8>
}

// Adds that are not a plain same-shape sum stay float: a broadcast operand, an alpha, a sum that
// has another user.
// CHECK-LABEL: func.func @adds_that_stay_float
// CHECK-NOT: kiln.qadd
// CHECK: return
func.func @adds_that_stay_float(%aq: tensor<1x4x3x3xui8>, %bq: tensor<1x4x1x1xui8>, %s: tensor<f32>, %z: tensor<i32>) -> (tensor<1x4x3x3xui8>, tensor<1x4x3x3xui8>, tensor<1x4x3x3xui8>, tensor<1x4x3x3xf32>) {
  %a = kiln.dequantize %aq, %s, %z {axis = 1 : i64} : (tensor<1x4x3x3xui8>, tensor<f32>, tensor<i32>) -> tensor<1x4x3x3xf32>
  %b = kiln.dequantize %bq, %s, %z {axis = 1 : i64} : (tensor<1x4x1x1xui8>, tensor<f32>, tensor<i32>) -> tensor<1x4x1x1xf32>
  %s0 = kiln.add %a, %b : tensor<1x4x3x3xf32>, tensor<1x4x1x1xf32>
  %q0 = kiln.quantize %s0, %s, %z {axis = 1 : i64, dtype = 5 : i64} : (tensor<1x4x3x3xf32>, tensor<f32>, tensor<i32>) -> tensor<1x4x3x3xui8>
  %s1 = kiln.add %a, %a {alpha = 2.0 : f64} : tensor<1x4x3x3xf32>, tensor<1x4x3x3xf32>
  %q1 = kiln.quantize %s1, %s, %z {axis = 1 : i64, dtype = 5 : i64} : (tensor<1x4x3x3xf32>, tensor<f32>, tensor<i32>) -> tensor<1x4x3x3xui8>
  %s2 = kiln.add %a, %a : tensor<1x4x3x3xf32>, tensor<1x4x3x3xf32>
  %q2 = kiln.quantize %s2, %s, %z {axis = 1 : i64, dtype = 5 : i64} : (tensor<1x4x3x3xf32>, tensor<f32>, tensor<i32>) -> tensor<1x4x3x3xui8>
  return %q0, %q1, %q2, %s2 : tensor<1x4x3x3xui8>, tensor<1x4x3x3xui8>, tensor<1x4x3x3xui8>, tensor<1x4x3x3xf32>
}

// max_pool2d moves above the dequantize and runs on the bytes; the quantize with the same
// constant parameters then gives those bytes back, and no float op is left.
// CHECK-LABEL: func.func @max_pool_on_bytes
// CHECK: %[[P:.*]], %{{.*}} = kiln.max_pool2d %arg0 {{.*}} : (tensor<1x2x4x4xui8>) -> (tensor<1x2x2x2xui8>, tensor<1x2x2x2xi64>)
// CHECK-NOT: kiln.quantize
// CHECK: return %[[P]] :
func.func @max_pool_on_bytes(%xq: tensor<1x2x4x4xui8>) -> tensor<1x2x2x2xui8> {
  %s = kiln.constant dense<0.05> : tensor<f32> : tensor<f32>
  %z = kiln.constant dense<3> : tensor<i32> : tensor<i32>
  %s2 = kiln.constant dense<0.05> : tensor<f32> : tensor<f32>
  %z2 = kiln.constant dense<3> : tensor<i32> : tensor<i32>
  %x = kiln.dequantize %xq, %s, %z {axis = 1 : i64} : (tensor<1x2x4x4xui8>, tensor<f32>, tensor<i32>) -> tensor<1x2x4x4xf32>
  %p:2 = kiln.max_pool2d %x {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, ceil_mode = false} : (tensor<1x2x4x4xf32>) -> (tensor<1x2x2x2xf32>, tensor<1x2x2x2xi64>)
  %q = kiln.quantize %p#0, %s2, %z2 {axis = 1 : i64, dtype = 5 : i64} : (tensor<1x2x2x2xf32>, tensor<f32>, tensor<i32>) -> tensor<1x2x2x2xui8>
  return %q : tensor<1x2x2x2xui8>
}

// Other parameters after the pool: the pool still runs on the bytes, then a requantize in float
// (dequantize -> quantize) on the pooled values. A pool whose indices are used stays float.
// CHECK-LABEL: func.func @max_pool_requantized
// CHECK: kiln.max_pool2d %arg0 {{.*}} : (tensor<1x2x4x4xui8>) -> (tensor<1x2x2x2xui8>, tensor<1x2x2x2xi64>)
// CHECK: kiln.dequantize
// CHECK: kiln.quantize
// CHECK: kiln.max_pool2d %{{.*}} : (tensor<1x2x4x4xf32>) -> (tensor<1x2x2x2xf32>, tensor<1x2x2x2xi64>)
func.func @max_pool_requantized(%xq: tensor<1x2x4x4xui8>, %s: tensor<f32>, %z: tensor<i32>, %s2: tensor<f32>) -> (tensor<1x2x2x2xui8>, tensor<1x2x2x2xi64>) {
  %x = kiln.dequantize %xq, %s, %z {axis = 1 : i64} : (tensor<1x2x4x4xui8>, tensor<f32>, tensor<i32>) -> tensor<1x2x4x4xf32>
  %p:2 = kiln.max_pool2d %x {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, ceil_mode = false} : (tensor<1x2x4x4xf32>) -> (tensor<1x2x2x2xf32>, tensor<1x2x2x2xi64>)
  %q = kiln.quantize %p#0, %s2, %z {axis = 1 : i64, dtype = 5 : i64} : (tensor<1x2x2x2xf32>, tensor<f32>, tensor<i32>) -> tensor<1x2x2x2xui8>
  %y = kiln.dequantize %xq, %s, %z {axis = 1 : i64} : (tensor<1x2x4x4xui8>, tensor<f32>, tensor<i32>) -> tensor<1x2x4x4xf32>
  %p2:2 = kiln.max_pool2d %y {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, ceil_mode = false} : (tensor<1x2x4x4xf32>) -> (tensor<1x2x2x2xf32>, tensor<1x2x2x2xi64>)
  return %q, %p2#1 : tensor<1x2x2x2xui8>, tensor<1x2x2x2xi64>
}

// The schema's view ops move above a per-tensor dequantize too (a channel shuffle's transpose, a
// slice): the next layer then reads the bytes.
// CHECK-LABEL: func.func @views_on_bytes
// CHECK: %[[T:.*]] = kiln.transpose %arg0 {{.*}} -> tensor<1x4x2x3xui8>
// CHECK: %[[S:.*]] = kiln.slice %[[T]] {{.*}} -> tensor<1x2x2x3xui8>
// CHECK-NOT: kiln.quantize
// CHECK: return %[[S]]
func.func @views_on_bytes(%xq: tensor<1x2x4x3xui8>) -> tensor<1x2x2x3xui8> {
  %s = kiln.constant dense<0.05> : tensor<f32> : tensor<f32>
  %z = kiln.constant dense<3> : tensor<i32> : tensor<i32>
  %x = kiln.dequantize %xq, %s, %z {axis = 1 : i64} : (tensor<1x2x4x3xui8>, tensor<f32>, tensor<i32>) -> tensor<1x2x4x3xf32>
  %t = kiln.transpose %x {dim0 = 1 : i64, dim1 = 2 : i64} : (tensor<1x2x4x3xf32>) -> tensor<1x4x2x3xf32>
  %c = kiln.slice %t {dim = 1 : i64, start = 0 : i64, end = 4 : i64, step = 2 : i64} : (tensor<1x4x2x3xf32>) -> tensor<1x2x2x3xf32>
  %q = kiln.quantize %c, %s, %z {axis = 1 : i64, dtype = 5 : i64} : (tensor<1x2x2x3xf32>, tensor<f32>, tensor<i32>) -> tensor<1x2x2x3xui8>
  return %q : tensor<1x2x2x3xui8>
}

// A global average pool (an adaptive one to 1x1) and an avg_pool2d between Q/DQ pairs: each one
// kiln.qavg_pool2d on the bytes, the global one with the plane as its window.
// CHECK-LABEL: func.func @average_pools_on_bytes
// CHECK: %[[G:.*]] = kiln.qavg_pool2d %arg0, %arg1, %arg2, %arg3, %arg4 {ceil_mode = false, count_include_pad = true, dtype = 5 : i64, kernel = array<i64: 7, 7>, padding = array<i64: 0, 0>, stride = array<i64: 7, 7>}
// CHECK: %[[P:.*]] = kiln.qavg_pool2d %arg0, %arg1, %arg2, %arg3, %arg4 {ceil_mode = true, count_include_pad = false, dtype = 4 : i64, kernel = array<i64: 3, 3>, padding = array<i64: 1, 1>, stride = array<i64: 2, 2>}
// CHECK-NOT: kiln.dequantize
// CHECK-NOT: kiln.quantize
// CHECK: return %[[G]], %[[P]]
func.func @average_pools_on_bytes(%xq: tensor<2x8x7x7xui8>, %xs: tensor<f32>, %xz: tensor<i32>, %ys: tensor<f32>, %yz: tensor<i32>) -> (tensor<2x8x1x1xui8>, tensor<2x8x4x4xi8>) {
  %x = kiln.dequantize %xq, %xs, %xz {axis = 1 : i64} : (tensor<2x8x7x7xui8>, tensor<f32>, tensor<i32>) -> tensor<2x8x7x7xf32>
  %g = kiln.adaptive_avg_pool2d %x {output_size = array<i64: 1, 1>} : (tensor<2x8x7x7xf32>) -> tensor<2x8x1x1xf32>
  %qg = kiln.quantize %g, %ys, %yz {axis = 1 : i64, dtype = 5 : i64} : (tensor<2x8x1x1xf32>, tensor<f32>, tensor<i32>) -> tensor<2x8x1x1xui8>
  %p = kiln.avg_pool2d %x {kernel = array<i64: 3, 3>, stride = array<i64: 2, 2>, padding = array<i64: 1, 1>, ceil_mode = true, count_include_pad = false} : (tensor<2x8x7x7xf32>) -> tensor<2x8x4x4xf32>
  %qp = kiln.quantize %p, %ys, %yz {axis = 1 : i64, dtype = 4 : i64} : (tensor<2x8x4x4xf32>, tensor<f32>, tensor<i32>) -> tensor<2x8x4x4xi8>
  return %qg, %qp : tensor<2x8x1x1xui8>, tensor<2x8x4x4xi8>
}

// Average pools that stay float: windows of different sizes (7 is not a multiple of 3), a relu
// before the quantize, a per-channel dequantize, a pooled value with another user.
// CHECK-LABEL: func.func @average_pools_that_stay_float
// CHECK-NOT: kiln.qavg_pool2d
// CHECK: return
func.func @average_pools_that_stay_float(%xq: tensor<1x2x7x7xui8>, %s: tensor<f32>, %z: tensor<i32>, %cs: tensor<2xf32>, %cz: tensor<2xi32>) -> (tensor<1x2x3x3xui8>, tensor<1x2x1x1xui8>, tensor<1x2x1x1xui8>, tensor<1x2x1x1xui8>, tensor<1x2x1x1xf32>) {
  %x = kiln.dequantize %xq, %s, %z {axis = 1 : i64} : (tensor<1x2x7x7xui8>, tensor<f32>, tensor<i32>) -> tensor<1x2x7x7xf32>
  %a = kiln.adaptive_avg_pool2d %x {output_size = array<i64: 3, 3>} : (tensor<1x2x7x7xf32>) -> tensor<1x2x3x3xf32>
  %qa = kiln.quantize %a, %s, %z {axis = 1 : i64, dtype = 5 : i64} : (tensor<1x2x3x3xf32>, tensor<f32>, tensor<i32>) -> tensor<1x2x3x3xui8>
  %g = kiln.adaptive_avg_pool2d %x {output_size = array<i64: 1, 1>} : (tensor<1x2x7x7xf32>) -> tensor<1x2x1x1xf32>
  %r = kiln.relu %g : tensor<1x2x1x1xf32> -> tensor<1x2x1x1xf32>
  %qr = kiln.quantize %r, %s, %z {axis = 1 : i64, dtype = 5 : i64} : (tensor<1x2x1x1xf32>, tensor<f32>, tensor<i32>) -> tensor<1x2x1x1xui8>
  %c = kiln.dequantize %xq, %cs, %cz {axis = 1 : i64} : (tensor<1x2x7x7xui8>, tensor<2xf32>, tensor<2xi32>) -> tensor<1x2x7x7xf32>
  %gc = kiln.adaptive_avg_pool2d %c {output_size = array<i64: 1, 1>} : (tensor<1x2x7x7xf32>) -> tensor<1x2x1x1xf32>
  %qc = kiln.quantize %gc, %s, %z {axis = 1 : i64, dtype = 5 : i64} : (tensor<1x2x1x1xf32>, tensor<f32>, tensor<i32>) -> tensor<1x2x1x1xui8>
  %g2 = kiln.adaptive_avg_pool2d %x {output_size = array<i64: 1, 1>} : (tensor<1x2x7x7xf32>) -> tensor<1x2x1x1xf32>
  %q2 = kiln.quantize %g2, %s, %z {axis = 1 : i64, dtype = 5 : i64} : (tensor<1x2x1x1xf32>, tensor<f32>, tensor<i32>) -> tensor<1x2x1x1xui8>
  return %qa, %qr, %qc, %q2, %g2 : tensor<1x2x3x3xui8>, tensor<1x2x1x1xui8>, tensor<1x2x1x1xui8>, tensor<1x2x1x1xui8>, tensor<1x2x1x1xf32>
}

// A cat of dequantizes with one set of constant parameters concatenates the bytes; the quantize
// after it with those parameters then gives the bytes back. Different parameters stay float.
// CHECK-LABEL: func.func @cat_on_bytes
// CHECK: %[[C:.*]] = kiln.cat %arg0, %arg1 {dim = 1 : i64} : (tensor<1x2x3x3xui8>, tensor<1x4x3x3xui8>) -> tensor<1x6x3x3xui8>
// CHECK-NOT: kiln.quantize
// CHECK: return %[[C]] :
func.func @cat_on_bytes(%aq: tensor<1x2x3x3xui8>, %bq: tensor<1x4x3x3xui8>) -> tensor<1x6x3x3xui8> {
  %s = kiln.constant dense<0.05> : tensor<f32> : tensor<f32>
  %z = kiln.constant dense<3> : tensor<i32> : tensor<i32>
  %s2 = kiln.constant dense<0.05> : tensor<f32> : tensor<f32>
  %z2 = kiln.constant dense<3> : tensor<i32> : tensor<i32>
  %a = kiln.dequantize %aq, %s, %z {axis = 1 : i64} : (tensor<1x2x3x3xui8>, tensor<f32>, tensor<i32>) -> tensor<1x2x3x3xf32>
  %b = kiln.dequantize %bq, %s2, %z2 {axis = 1 : i64} : (tensor<1x4x3x3xui8>, tensor<f32>, tensor<i32>) -> tensor<1x4x3x3xf32>
  %c = kiln.cat %a, %b {dim = 1 : i64} : (tensor<1x2x3x3xf32>, tensor<1x4x3x3xf32>) -> tensor<1x6x3x3xf32>
  %q = kiln.quantize %c, %s, %z {axis = 1 : i64, dtype = 5 : i64} : (tensor<1x6x3x3xf32>, tensor<f32>, tensor<i32>) -> tensor<1x6x3x3xui8>
  return %q : tensor<1x6x3x3xui8>
}

// CHECK-LABEL: func.func @cat_that_stays_float
// CHECK: kiln.cat %{{.*}}, %{{.*}} {dim = 1 : i64} : (tensor<1x2x3x3xf32>, tensor<1x4x3x3xf32>)
func.func @cat_that_stays_float(%aq: tensor<1x2x3x3xui8>, %bq: tensor<1x4x3x3xui8>) -> tensor<1x6x3x3xui8> {
  %s = kiln.constant dense<0.05> : tensor<f32> : tensor<f32>
  %z = kiln.constant dense<3> : tensor<i32> : tensor<i32>
  %s2 = kiln.constant dense<0.07> : tensor<f32> : tensor<f32>
  %a = kiln.dequantize %aq, %s, %z {axis = 1 : i64} : (tensor<1x2x3x3xui8>, tensor<f32>, tensor<i32>) -> tensor<1x2x3x3xf32>
  %b = kiln.dequantize %bq, %s2, %z {axis = 1 : i64} : (tensor<1x4x3x3xui8>, tensor<f32>, tensor<i32>) -> tensor<1x4x3x3xf32>
  %c = kiln.cat %a, %b {dim = 1 : i64} : (tensor<1x2x3x3xf32>, tensor<1x4x3x3xf32>) -> tensor<1x6x3x3xf32>
  %q = kiln.quantize %c, %s, %z {axis = 1 : i64, dtype = 5 : i64} : (tensor<1x6x3x3xf32>, tensor<f32>, tensor<i32>) -> tensor<1x6x3x3xui8>
  return %q : tensor<1x6x3x3xui8>
}
