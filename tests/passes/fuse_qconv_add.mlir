// RUN: kiln-opt %s --kiln-fuse-qconv-add | FileCheck %s

// A residual block's int8 convolution and add: one kiln.qconv2d_add carrying the convolution's
// operands, then the add's other operand and output parameters; the convolution's dtype and
// relu become conv_dtype and relu, the add's dtype and relu dtype and add_relu.
// CHECK-LABEL: func.func @block
// CHECK-NOT: kiln.qconv2d {
// CHECK-NOT: kiln.qadd
// CHECK: %[[Y:.*]] = kiln.qconv2d_add %arg0, %[[XS:.*]], %[[XZ:.*]], %[[W:.*]], %[[WS:.*]], %[[WZ:.*]], %[[B:.*]], %[[CS:.*]], %[[CZ:.*]], %arg1, %[[RS:.*]], %[[RZ:.*]], %[[YS:.*]], %[[YZ:.*]] {add_relu = true, conv_dtype = 5 : i64, dilation = array<i64: 1, 1>, dtype = 4 : i64, groups = 1 : i64, padding = array<i64: 1, 1>, relu = false, stride = array<i64: 1, 1>}
// CHECK: return %[[Y]]
func.func @block(%x: tensor<1x4x5x5xui8>, %res: tensor<1x6x5x5xui8>) -> tensor<1x6x5x5xi8> {
  %xs = kiln.constant dense<0.1> : tensor<f32> : tensor<f32>
  %xz = kiln.constant dense<3> : tensor<i32> : tensor<i32>
  %w = kiln.constant dense<2> : tensor<6x4x3x3xi8> : tensor<6x4x3x3xi8>
  %ws = kiln.constant dense<0.05> : tensor<6xf32> : tensor<6xf32>
  %wz = kiln.constant dense<0> : tensor<6xi32> : tensor<6xi32>
  %b = kiln.constant dense<7> : tensor<6xi32> : tensor<6xi32>
  %cs = kiln.constant dense<0.2> : tensor<f32> : tensor<f32>
  %cz = kiln.constant dense<100> : tensor<i32> : tensor<i32>
  %rs = kiln.constant dense<0.3> : tensor<f32> : tensor<f32>
  %rz = kiln.constant dense<128> : tensor<i32> : tensor<i32>
  %ys = kiln.constant dense<0.4> : tensor<f32> : tensor<f32>
  %yz = kiln.constant dense<-5> : tensor<i32> : tensor<i32>
  %c = kiln.qconv2d %x, %xs, %xz, %w, %ws, %wz, %b, %cs, %cz {dilation = array<i64: 1, 1>, dtype = 5 : i64, groups = 1 : i64, padding = array<i64: 1, 1>, relu = false, stride = array<i64: 1, 1>} : (tensor<1x4x5x5xui8>, tensor<f32>, tensor<i32>, tensor<6x4x3x3xi8>, tensor<6xf32>, tensor<6xi32>, tensor<6xi32>, tensor<f32>, tensor<i32>) -> tensor<1x6x5x5xui8>
  %y = kiln.qadd %c, %cs, %cz, %res, %rs, %rz, %ys, %yz {dtype = 4 : i64, relu = true} : (tensor<1x6x5x5xui8>, tensor<f32>, tensor<i32>, tensor<1x6x5x5xui8>, tensor<f32>, tensor<i32>, tensor<f32>, tensor<i32>) -> tensor<1x6x5x5xi8>
  return %y : tensor<1x6x5x5xi8>
}

// The convolution as the add's second operand (its parameters equal constants, not the same
// values); the residual becomes the fused op's other.
// CHECK-LABEL: func.func @conv_second
// CHECK-NOT: kiln.qadd
// CHECK: kiln.qconv2d_add %arg0, {{.*}}, %arg1, %[[RS:[^,]*]], %[[RZ:[^,]*]], {{[^,]*}}, {{[^ ]*}} {add_relu = false, conv_dtype = 5 : i64
func.func @conv_second(%x: tensor<1x4x5x5xui8>, %res: tensor<1x6x5x5xi8>) -> tensor<1x6x5x5xui8> {
  %xs = kiln.constant dense<0.1> : tensor<f32> : tensor<f32>
  %xz = kiln.constant dense<3> : tensor<i32> : tensor<i32>
  %w = kiln.constant dense<2> : tensor<6x4x1x1xi8> : tensor<6x4x1x1xi8>
  %ws = kiln.constant dense<0.05> : tensor<f32> : tensor<f32>
  %wz = kiln.constant dense<0> : tensor<i32> : tensor<i32>
  %none = kiln.none
  %cs = kiln.constant dense<0.2> : tensor<f32> : tensor<f32>
  %cz = kiln.constant dense<100> : tensor<i32> : tensor<i32>
  %cs2 = kiln.constant dense<0.2> : tensor<f32> : tensor<f32>
  %cz2 = kiln.constant dense<100> : tensor<i32> : tensor<i32>
  %rs = kiln.constant dense<0.3> : tensor<f32> : tensor<f32>
  %rz = kiln.constant dense<1> : tensor<i32> : tensor<i32>
  %c = kiln.qconv2d %x, %xs, %xz, %w, %ws, %wz, %none, %cs, %cz {dilation = array<i64: 1, 1>, dtype = 5 : i64, groups = 1 : i64, padding = array<i64: 0, 0>, relu = true, stride = array<i64: 1, 1>} : (tensor<1x4x5x5xui8>, tensor<f32>, tensor<i32>, tensor<6x4x1x1xi8>, tensor<f32>, tensor<i32>, none, tensor<f32>, tensor<i32>) -> tensor<1x6x5x5xui8>
  %y = kiln.qadd %res, %rs, %rz, %c, %cs2, %cz2, %cs, %cz {dtype = 5 : i64, relu = false} : (tensor<1x6x5x5xi8>, tensor<f32>, tensor<i32>, tensor<1x6x5x5xui8>, tensor<f32>, tensor<i32>, tensor<f32>, tensor<i32>) -> tensor<1x6x5x5xui8>
  return %y : tensor<1x6x5x5xui8>
}

// Left alone: the convolution's result has another user; the add reads it at another scale.
// CHECK-LABEL: func.func @near_misses
// CHECK-NOT: kiln.qconv2d_add
// CHECK: kiln.qconv2d
// CHECK: kiln.qadd
// CHECK: kiln.qconv2d
// CHECK: kiln.qadd
func.func @near_misses(%x: tensor<1x4x5x5xui8>, %res: tensor<1x6x5x5xui8>) -> (tensor<1x6x5x5xui8>, tensor<1x6x5x5xui8>, tensor<1x6x5x5xui8>) {
  %xs = kiln.constant dense<0.1> : tensor<f32> : tensor<f32>
  %xz = kiln.constant dense<3> : tensor<i32> : tensor<i32>
  %w = kiln.constant dense<2> : tensor<6x4x1x1xi8> : tensor<6x4x1x1xi8>
  %ws = kiln.constant dense<0.05> : tensor<f32> : tensor<f32>
  %wz = kiln.constant dense<0> : tensor<i32> : tensor<i32>
  %none = kiln.none
  %cs = kiln.constant dense<0.2> : tensor<f32> : tensor<f32>
  %cz = kiln.constant dense<100> : tensor<i32> : tensor<i32>
  %other_scale = kiln.constant dense<0.25> : tensor<f32> : tensor<f32>
  %c = kiln.qconv2d %x, %xs, %xz, %w, %ws, %wz, %none, %cs, %cz {dilation = array<i64: 1, 1>, dtype = 5 : i64, groups = 1 : i64, padding = array<i64: 0, 0>, relu = false, stride = array<i64: 1, 1>} : (tensor<1x4x5x5xui8>, tensor<f32>, tensor<i32>, tensor<6x4x1x1xi8>, tensor<f32>, tensor<i32>, none, tensor<f32>, tensor<i32>) -> tensor<1x6x5x5xui8>
  %y = kiln.qadd %c, %cs, %cz, %res, %cs, %cz, %cs, %cz {dtype = 5 : i64, relu = false} : (tensor<1x6x5x5xui8>, tensor<f32>, tensor<i32>, tensor<1x6x5x5xui8>, tensor<f32>, tensor<i32>, tensor<f32>, tensor<i32>) -> tensor<1x6x5x5xui8>
  %d = kiln.qconv2d %x, %xs, %xz, %w, %ws, %wz, %none, %cs, %cz {dilation = array<i64: 1, 1>, dtype = 5 : i64, groups = 1 : i64, padding = array<i64: 0, 0>, relu = false, stride = array<i64: 1, 1>} : (tensor<1x4x5x5xui8>, tensor<f32>, tensor<i32>, tensor<6x4x1x1xi8>, tensor<f32>, tensor<i32>, none, tensor<f32>, tensor<i32>) -> tensor<1x6x5x5xui8>
  %z = kiln.qadd %d, %other_scale, %cz, %res, %cs, %cz, %cs, %cz {dtype = 5 : i64, relu = false} : (tensor<1x6x5x5xui8>, tensor<f32>, tensor<i32>, tensor<1x6x5x5xui8>, tensor<f32>, tensor<i32>, tensor<f32>, tensor<i32>) -> tensor<1x6x5x5xui8>
  return %y, %c, %z : tensor<1x6x5x5xui8>, tensor<1x6x5x5xui8>, tensor<1x6x5x5xui8>
}

// A dead dequantize of the convolution's bytes (what --kiln-fold-qdq leaves when it folds the
// ops that read it) is no other user: it goes, and the pair fuses.
// CHECK-LABEL: func.func @dead_dequantize
// CHECK-NOT: kiln.dequantize
// CHECK: kiln.qconv2d_add
func.func @dead_dequantize(%x: tensor<1x4x5x5xui8>, %res: tensor<1x6x5x5xui8>) -> tensor<1x6x5x5xui8> {
  %xs = kiln.constant dense<0.1> : tensor<f32> : tensor<f32>
  %xz = kiln.constant dense<3> : tensor<i32> : tensor<i32>
  %w = kiln.constant dense<2> : tensor<6x4x1x1xi8> : tensor<6x4x1x1xi8>
  %ws = kiln.constant dense<0.05> : tensor<f32> : tensor<f32>
  %wz = kiln.constant dense<0> : tensor<i32> : tensor<i32>
  %none = kiln.none
  %cs = kiln.constant dense<0.2> : tensor<f32> : tensor<f32>
  %cz = kiln.constant dense<100> : tensor<i32> : tensor<i32>
  %c = kiln.qconv2d %x, %xs, %xz, %w, %ws, %wz, %none, %cs, %cz {dilation = array<i64: 1, 1>, dtype = 5 : i64, groups = 1 : i64, padding = array<i64: 0, 0>, relu = false, stride = array<i64: 1, 1>} : (tensor<1x4x5x5xui8>, tensor<f32>, tensor<i32>, tensor<6x4x1x1xi8>, tensor<f32>, tensor<i32>, none, tensor<f32>, tensor<i32>) -> tensor<1x6x5x5xui8>
  %dead = kiln.dequantize %c, %cs, %cz {axis = 1 : i64} : (tensor<1x6x5x5xui8>, tensor<f32>, tensor<i32>) -> tensor<1x6x5x5xf32>
  %y = kiln.qadd %c, %cs, %cz, %res, %cs, %cz, %cs, %cz {dtype = 5 : i64, relu = false} : (tensor<1x6x5x5xui8>, tensor<f32>, tensor<i32>, tensor<1x6x5x5xui8>, tensor<f32>, tensor<i32>, tensor<f32>, tensor<i32>) -> tensor<1x6x5x5xui8>
  return %y : tensor<1x6x5x5xui8>
}
