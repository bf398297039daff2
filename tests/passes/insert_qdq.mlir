// RUN: kiln-opt %s --kiln-insert-qdq | FileCheck %s
// RUN: kiln-opt %s --kiln-insert-qdq --kiln-fold-qdq --kiln-cleanup | FileCheck %s --check-prefix=FOLD

// A quantization plan on a conv -> relu -> linear chain: the input argument, the relu and the
// linear result carry activation parameters, the two layers int8 weights. The pass writes a
// quantize/dequantize pair after each value and a dequantize of the int8 constant in place of
// each float weight; fold-qdq then moves the flatten above the relu's dequantize and makes the
// two integer layers.
// CHECK-LABEL: func.func @plan
// CHECK-NOT: kiln.qparams
// CHECK-NOT: kiln.qweight
// CHECK: %[[XQ:.*]] = kiln.quantize %arg0, %[[XS:.*]], %[[XZ:.*]] {axis = 1 : i64, dtype = 5 : i64}
// CHECK: %[[X:.*]] = kiln.dequantize %[[XQ]], %[[XS]], %[[XZ]]
// CHECK: %[[WQ:.*]] = kiln.constant dense<{{\[}}{{\[}}{{\[}}[1, -2]
// CHECK: %[[WS:.*]] = kiln.constant dense<[5.000000e-01, 2.500000e-01]>
// CHECK: %[[W:.*]] = kiln.dequantize %[[WQ]], %[[WS]], %{{.*}} {axis = 0 : i64}
// CHECK: %[[Y:.*]] = kiln.conv2d %[[X]], %[[W]], %{{.*}}
// CHECK: %[[R:.*]] = kiln.relu %[[Y]]
// CHECK: %[[RQ:.*]] = kiln.quantize %[[R]], %{{.*}}, %{{.*}} {axis = 1 : i64, dtype = 4 : i64}
// CHECK: %[[RD:.*]] = kiln.dequantize %[[RQ]]
// CHECK: kiln.reshape %[[RD]]
// CHECK: %[[L:.*]] = kiln.linear
// CHECK: %[[LQ:.*]] = kiln.quantize %[[L]]
// CHECK: %[[LD:.*]] = kiln.dequantize %[[LQ]]
// CHECK: return %[[LD]]

// FOLD-LABEL: func.func @plan
// FOLD-NOT: kiln.conv2d
// FOLD: kiln.qconv2d {{.*}}relu = true
// FOLD: %[[F:.*]] = kiln.reshape %{{.*}} {shape = array<i64: 1, 2>} : (tensor<1x2x1x1xi8>) -> tensor<1x2xi8>
// FOLD: %[[LQ:.*]] = kiln.qlinear %[[F]]
// FOLD-NOT: kiln.linear
// FOLD: %[[OUT:.*]] = kiln.dequantize %[[LQ]]
// FOLD: return %[[OUT]]
func.func @plan(%x: tensor<1x1x2x2xf32> {kiln.qparams = {scale = 0.1 : f32, zero_point = 128 : i64, dtype = 5 : i64}}) -> tensor<1x3xf32> {
  %w = kiln.constant dense<[[[[0.5, -1.0], [0.0, 0.25]]], [[[0.25, 0.5], [-0.25, 0.0]]]]> : tensor<2x1x2x2xf32> : tensor<2x1x2x2xf32>
  %b = kiln.constant dense<[0.1, -0.2]> : tensor<2xf32> : tensor<2xf32>
  %y = kiln.conv2d %x, %w, %b {dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>, kiln.qweight = {value = dense<[[[[1, -2], [0, 1]]], [[[1, 2], [-1, 0]]]]> : tensor<2x1x2x2xi8>, scale = dense<[0.5, 0.25]> : tensor<2xf32>, zero_point = dense<0> : tensor<2xi32>}} : (tensor<1x1x2x2xf32>, tensor<2x1x2x2xf32>, tensor<2xf32>) -> tensor<1x2x1x1xf32>
  %r = kiln.relu %y {kiln.qparams = {scale = 0.05 : f32, zero_point = -128 : i64, dtype = 4 : i64}} : tensor<1x2x1x1xf32> -> tensor<1x2x1x1xf32>
  %f = kiln.reshape %r {shape = array<i64: 1, 2>} : (tensor<1x2x1x1xf32>) -> tensor<1x2xf32>
  %lw = kiln.constant dense<[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]> : tensor<3x2xf32> : tensor<3x2xf32>
  %none = kiln.none
  %l = kiln.linear %f, %lw, %none {kiln.qweight = {value = dense<[[127, 0], [0, 127], [127, 127]]> : tensor<3x2xi8>, scale = dense<0.007874> : tensor<f32>, zero_point = dense<0> : tensor<i32>}, kiln.qparams = {scale = 0.02 : f32, zero_point = 0 : i64, dtype = 4 : i64}} : (tensor<1x2xf32>, tensor<3x2xf32>, none) -> tensor<1x3xf32>
  return %l : tensor<1x3xf32>
}

// Dynamic quantization: a linear with int8 weights and kiln.qdynamic becomes
// kiln.qlinear_dynamic on the float input and the float bias (no activation parameters).
// CHECK-LABEL: func.func @dynamic
// CHECK-NOT: kiln.qdynamic
// CHECK-NOT: kiln.quantize
// CHECK: %[[WQ:.*]] = kiln.constant dense<{{\[}}[1, -2, 3], [4, 0, -1]]> : tensor<2x3xi8>
// CHECK: %[[WS:.*]] = kiln.constant dense<[5.000000e-01, 2.500000e-01]>
// CHECK: %[[WZ:.*]] = kiln.constant dense<0> : tensor<2xi32>
// CHECK: %[[Y:.*]] = kiln.qlinear_dynamic %arg0, %[[WQ]], %[[WS]], %[[WZ]], %[[B:.*]] : (tensor<4x3xf32>, tensor<2x3xi8>, tensor<2xf32>, tensor<2xi32>, tensor<2xf32>) -> tensor<4x2xf32>
// CHECK-NOT: kiln.linear
// CHECK: return %[[Y]]
func.func @dynamic(%x: tensor<4x3xf32>) -> tensor<4x2xf32> {
  %w = kiln.constant dense<[[0.5, -1.0, 1.5], [1.0, 0.0, -0.25]]> : tensor<2x3xf32> : tensor<2x3xf32>
  %b = kiln.constant dense<[0.1, -0.2]> : tensor<2xf32> : tensor<2xf32>
  %y = kiln.linear %x, %w, %b {kiln.qdynamic, kiln.qweight = {value = dense<[[1, -2, 3], [4, 0, -1]]> : tensor<2x3xi8>, scale = dense<[0.5, 0.25]> : tensor<2xf32>, zero_point = dense<0> : tensor<2xi32>}} : (tensor<4x3xf32>, tensor<2x3xf32>, tensor<2xf32>) -> tensor<4x2xf32>
  return %y : tensor<4x2xf32>
}
