// RUN: kiln-opt %s --kiln-choose-layout --kiln-cleanup | FileCheck %s

// An inverted-residual chain: a dense 3x3 stem keeps NCHW (the runtime has a channels-last kernel
// for it only with a direct tile); the depthwise and the 1x1 convolutions after it go
// channels-last, with one permute after the stem and one before the pooling: the pairs between
// the channels-last layers cancel. The residual add's other operand is channels-last too.
// CHECK-LABEL: func.func @chain
// CHECK: %[[STEM:.*]] = kiln.qconv2d %arg0, {{.*}} {dilation = array<i64: 1, 1>, dtype = 5 : i64, groups = 1 : i64, padding = array<i64: 1, 1>, relu = true, stride = array<i64: 2, 2>} : {{.*}} -> tensor<1x8x5x5xui8>
// CHECK-NEXT: %[[IN:.*]] = kiln.permute %[[STEM]] {dims = array<i64: 0, 2, 3, 1>} : (tensor<1x8x5x5xui8>) -> tensor<1x5x5x8xui8>
// CHECK-NEXT: %[[DW:.*]] = kiln.qconv2d %[[IN]], {{.*}} {channels_last = true, {{.*}}groups = 8 : i64{{.*}}} : {{.*}} -> tensor<1x5x5x8xui8>
// CHECK-NEXT: %[[PW:.*]] = kiln.qconv2d_add %[[DW]], {{.*}}, %[[IN]], {{.*}} {add_relu = false, channels_last = true, {{.*}}} : {{.*}} -> tensor<1x5x5x8xui8>
// CHECK-NEXT: %[[OUT:.*]] = kiln.permute %[[PW]] {dims = array<i64: 0, 3, 1, 2>} : (tensor<1x5x5x8xui8>) -> tensor<1x8x5x5xui8>
// CHECK-NEXT: kiln.qavg_pool2d %[[OUT]]
func.func @chain(%x: tensor<1x3x9x9xui8>) -> tensor<1x8x1x1xui8> {
  %s = kiln.constant dense<0.1> : tensor<f32> : tensor<f32>
  %z = kiln.constant dense<3> : tensor<i32> : tensor<i32>
  %ws = kiln.constant dense<0.05> : tensor<8xf32> : tensor<8xf32>
  %wz = kiln.constant dense<0> : tensor<8xi32> : tensor<8xi32>
  %b = kiln.constant dense<7> : tensor<8xi32> : tensor<8xi32>
  %w0 = kiln.constant dense<2> : tensor<8x3x3x3xi8> : tensor<8x3x3x3xi8>
  %w1 = kiln.constant dense<1> : tensor<8x1x3x3xi8> : tensor<8x1x3x3xi8>
  %w2 = kiln.constant dense<-1> : tensor<8x8x1x1xi8> : tensor<8x8x1x1xi8>
  %0 = kiln.qconv2d %x, %s, %z, %w0, %ws, %wz, %b, %s, %z {dilation = array<i64: 1, 1>, dtype = 5 : i64, groups = 1 : i64, padding = array<i64: 1, 1>, relu = true, stride = array<i64: 2, 2>} : (tensor<1x3x9x9xui8>, tensor<f32>, tensor<i32>, tensor<8x3x3x3xi8>, tensor<8xf32>, tensor<8xi32>, tensor<8xi32>, tensor<f32>, tensor<i32>) -> tensor<1x8x5x5xui8>
  %1 = kiln.qconv2d %0, %s, %z, %w1, %ws, %wz, %b, %s, %z {dilation = array<i64: 1, 1>, dtype = 5 : i64, groups = 8 : i64, padding = array<i64: 1, 1>, relu = true, stride = array<i64: 1, 1>} : (tensor<1x8x5x5xui8>, tensor<f32>, tensor<i32>, tensor<8x1x3x3xi8>, tensor<8xf32>, tensor<8xi32>, tensor<8xi32>, tensor<f32>, tensor<i32>) -> tensor<1x8x5x5xui8>
  %2 = kiln.qconv2d_add %1, %s, %z, %w2, %ws, %wz, %b, %s, %z, %0, %s, %z, %s, %z {add_relu = false, conv_dtype = 5 : i64, dilation = array<i64: 1, 1>, dtype = 5 : i64, groups = 1 : i64, padding = array<i64: 0, 0>, relu = false, stride = array<i64: 1, 1>} : (tensor<1x8x5x5xui8>, tensor<f32>, tensor<i32>, tensor<8x8x1x1xi8>, tensor<8xf32>, tensor<8xi32>, tensor<8xi32>, tensor<f32>, tensor<i32>, tensor<1x8x5x5xui8>, tensor<f32>, tensor<i32>, tensor<f32>, tensor<i32>) -> tensor<1x8x5x5xui8>
  %3 = kiln.qavg_pool2d %2, %s, %z, %s, %z {ceil_mode = false, count_include_pad = true, dtype = 5 : i64, kernel = array<i64: 5, 5>, padding = array<i64: 0, 0>, stride = array<i64: 5, 5>} : (tensor<1x8x5x5xui8>, tensor<f32>, tensor<i32>, tensor<f32>, tensor<i32>) -> tensor<1x8x1x1xui8>
  return %3 : tensor<1x8x1x1xui8>
}

// One convolution alone keeps NCHW (it would need a conversion on each side).
// CHECK-LABEL: func.func @single
// CHECK-NOT: kiln.permute
// CHECK-NOT: channels_last
func.func @single(%x: tensor<1x8x5x5xui8>) -> tensor<1x8x5x5xui8> {
  %s = kiln.constant dense<0.1> : tensor<f32> : tensor<f32>
  %z = kiln.constant dense<3> : tensor<i32> : tensor<i32>
  %ws = kiln.constant dense<0.05> : tensor<f32> : tensor<f32>
  %wz = kiln.constant dense<0> : tensor<i32> : tensor<i32>
  %none = kiln.none
  %w = kiln.constant dense<1> : tensor<8x1x3x3xi8> : tensor<8x1x3x3xi8>
  %0 = kiln.qconv2d %x, %s, %z, %w, %ws, %wz, %none, %s, %z {dilation = array<i64: 1, 1>, dtype = 5 : i64, groups = 8 : i64, padding = array<i64: 1, 1>, relu = false, stride = array<i64: 1, 1>} : (tensor<1x8x5x5xui8>, tensor<f32>, tensor<i32>, tensor<8x1x3x3xi8>, tensor<f32>, tensor<i32>, none, tensor<f32>, tensor<i32>) -> tensor<1x8x5x5xui8>
  return %0 : tensor<1x8x5x5xui8>
}
