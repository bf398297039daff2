// RUN: kiln-opt %s --kiln-mbconv-channels-last | FileCheck %s

// A chain of channels-last blocks (MobileNetV2's 28x28 to 7x7 stages): the first hands its output
// over channels-last, the middle one (residual = its input) reads and writes channels-last, the
// last reads channels-last and writes NCHW (its result is returned).
// CHECK-LABEL: func.func @chain
// Attributes print sorted: channels_last_in would come first.
// CHECK: %[[A:.*]] = kiln.mbconv %arg0,{{.*}} {channels_last_out = true, dw_activation
// CHECK: %[[B:.*]] = kiln.mbconv %[[A]],{{.*}}, %[[A]] {channels_last_in = true, channels_last_out = true,
// CHECK: kiln.mbconv %[[B]],{{.*}} {channels_last_in = true, dw_activation
// CHECK: return
func.func @chain(%x: tensor<1x8x8x8xf32>, %we: tensor<24x8x1x1xf32>, %wd: tensor<24x1x3x3xf32>, %wp: tensor<8x24x1x1xf32>) -> tensor<1x8x8x8xf32> {
  %n = kiln.none
  %a = kiln.mbconv %x, %we, %n, %wd, %n, %wp, %n, %n {dw_activation = 2 : i64, dw_clamp_max = 6.0 : f64, dw_clamp_min = 0.0 : f64, expand_activation = 2 : i64, expand_clamp_max = 6.0 : f64, expand_clamp_min = 0.0 : f64, padding = array<i64: 1, 1>, project_activation = 0 : i64, project_clamp_max = 0.0 : f64, project_clamp_min = 0.0 : f64, strategy = 1 : i64, stride = array<i64: 1, 1>} : (tensor<1x8x8x8xf32>, tensor<24x8x1x1xf32>, none, tensor<24x1x3x3xf32>, none, tensor<8x24x1x1xf32>, none, none) -> tensor<1x8x8x8xf32>
  %b = kiln.mbconv %a, %we, %n, %wd, %n, %wp, %n, %a {dw_activation = 2 : i64, dw_clamp_max = 6.0 : f64, dw_clamp_min = 0.0 : f64, expand_activation = 2 : i64, expand_clamp_max = 6.0 : f64, expand_clamp_min = 0.0 : f64, padding = array<i64: 1, 1>, project_activation = 0 : i64, project_clamp_max = 0.0 : f64, project_clamp_min = 0.0 : f64, strategy = 1 : i64, stride = array<i64: 1, 1>} : (tensor<1x8x8x8xf32>, tensor<24x8x1x1xf32>, none, tensor<24x1x3x3xf32>, none, tensor<8x24x1x1xf32>, none, tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32>
  %c = kiln.mbconv %b, %we, %n, %wd, %n, %wp, %n, %n {dw_activation = 2 : i64, dw_clamp_max = 6.0 : f64, dw_clamp_min = 0.0 : f64, expand_activation = 2 : i64, expand_clamp_max = 6.0 : f64, expand_clamp_min = 0.0 : f64, padding = array<i64: 1, 1>, project_activation = 0 : i64, project_clamp_max = 0.0 : f64, project_clamp_min = 0.0 : f64, strategy = 1 : i64, stride = array<i64: 1, 1>} : (tensor<1x8x8x8xf32>, tensor<24x8x1x1xf32>, none, tensor<24x1x3x3xf32>, none, tensor<8x24x1x1xf32>, none, none) -> tensor<1x8x8x8xf32>
  return %c : tensor<1x8x8x8xf32>
}

// Left NCHW: a result that is also returned; a residual that is not the block's input; a block
// whose own residual arrives NCHW; a result nothing reads.
// CHECK-LABEL: func.func @not_channels_last
// CHECK-NOT: channels_last
// CHECK: return
func.func @not_channels_last(%x: tensor<1x8x8x8xf32>, %r: tensor<1x8x8x8xf32>, %we: tensor<24x8x1x1xf32>, %wd: tensor<24x1x3x3xf32>, %wp: tensor<8x24x1x1xf32>) -> (tensor<1x8x8x8xf32>, tensor<1x8x8x8xf32>, tensor<1x8x8x8xf32>) {
  %n = kiln.none
  %a = kiln.mbconv %x, %we, %n, %wd, %n, %wp, %n, %n {dw_activation = 2 : i64, dw_clamp_max = 6.0 : f64, dw_clamp_min = 0.0 : f64, expand_activation = 2 : i64, expand_clamp_max = 6.0 : f64, expand_clamp_min = 0.0 : f64, padding = array<i64: 1, 1>, project_activation = 0 : i64, project_clamp_max = 0.0 : f64, project_clamp_min = 0.0 : f64, strategy = 1 : i64, stride = array<i64: 1, 1>} : (tensor<1x8x8x8xf32>, tensor<24x8x1x1xf32>, none, tensor<24x1x3x3xf32>, none, tensor<8x24x1x1xf32>, none, none) -> tensor<1x8x8x8xf32>
  %b = kiln.mbconv %a, %we, %n, %wd, %n, %wp, %n, %n {dw_activation = 2 : i64, dw_clamp_max = 6.0 : f64, dw_clamp_min = 0.0 : f64, expand_activation = 2 : i64, expand_clamp_max = 6.0 : f64, expand_clamp_min = 0.0 : f64, padding = array<i64: 1, 1>, project_activation = 0 : i64, project_clamp_max = 0.0 : f64, project_clamp_min = 0.0 : f64, strategy = 1 : i64, stride = array<i64: 1, 1>} : (tensor<1x8x8x8xf32>, tensor<24x8x1x1xf32>, none, tensor<24x1x3x3xf32>, none, tensor<8x24x1x1xf32>, none, none) -> tensor<1x8x8x8xf32>
  %c = kiln.mbconv %x, %we, %n, %wd, %n, %wp, %n, %r {dw_activation = 2 : i64, dw_clamp_max = 6.0 : f64, dw_clamp_min = 0.0 : f64, expand_activation = 2 : i64, expand_clamp_max = 6.0 : f64, expand_clamp_min = 0.0 : f64, padding = array<i64: 1, 1>, project_activation = 0 : i64, project_clamp_max = 0.0 : f64, project_clamp_min = 0.0 : f64, strategy = 1 : i64, stride = array<i64: 1, 1>} : (tensor<1x8x8x8xf32>, tensor<24x8x1x1xf32>, none, tensor<24x1x3x3xf32>, none, tensor<8x24x1x1xf32>, none, tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32>
  %d = kiln.mbconv %c, %we, %n, %wd, %n, %wp, %n, %r {dw_activation = 2 : i64, dw_clamp_max = 6.0 : f64, dw_clamp_min = 0.0 : f64, expand_activation = 2 : i64, expand_clamp_max = 6.0 : f64, expand_clamp_min = 0.0 : f64, padding = array<i64: 1, 1>, project_activation = 0 : i64, project_clamp_max = 0.0 : f64, project_clamp_min = 0.0 : f64, strategy = 1 : i64, stride = array<i64: 1, 1>} : (tensor<1x8x8x8xf32>, tensor<24x8x1x1xf32>, none, tensor<24x1x3x3xf32>, none, tensor<8x24x1x1xf32>, none, tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32>
  %e = kiln.mbconv %x, %we, %n, %wd, %n, %wp, %n, %x {dw_activation = 2 : i64, dw_clamp_max = 6.0 : f64, dw_clamp_min = 0.0 : f64, expand_activation = 2 : i64, expand_clamp_max = 6.0 : f64, expand_clamp_min = 0.0 : f64, padding = array<i64: 1, 1>, project_activation = 0 : i64, project_clamp_max = 0.0 : f64, project_clamp_min = 0.0 : f64, strategy = 1 : i64, stride = array<i64: 1, 1>} : (tensor<1x8x8x8xf32>, tensor<24x8x1x1xf32>, none, tensor<24x1x3x3xf32>, none, tensor<8x24x1x1xf32>, none, tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32>
  %f = kiln.mbconv %e, %we, %n, %wd, %n, %wp, %n, %n {dw_activation = 2 : i64, dw_clamp_max = 6.0 : f64, dw_clamp_min = 0.0 : f64, expand_activation = 2 : i64, expand_clamp_max = 6.0 : f64, expand_clamp_min = 0.0 : f64, padding = array<i64: 1, 1>, project_activation = 0 : i64, project_clamp_max = 0.0 : f64, project_clamp_min = 0.0 : f64, strategy = 1 : i64, stride = array<i64: 1, 1>} : (tensor<1x8x8x8xf32>, tensor<24x8x1x1xf32>, none, tensor<24x1x3x3xf32>, none, tensor<8x24x1x1xf32>, none, none) -> tensor<1x8x8x8xf32>
  return %a, %b, %d : tensor<1x8x8x8xf32>, tensor<1x8x8x8xf32>, tensor<1x8x8x8xf32>
}

// The fixed point: b's result is returned, so b writes NCHW; its residual is its input a, added in
// b's output layout, so a must stay NCHW too, although b is a's only user.
// CHECK-LABEL: func.func @dropped_by_consumer
// CHECK-NOT: channels_last
// CHECK: return
func.func @dropped_by_consumer(%x: tensor<1x8x8x8xf32>, %we: tensor<24x8x1x1xf32>, %wd: tensor<24x1x3x3xf32>, %wp: tensor<8x24x1x1xf32>) -> tensor<1x8x8x8xf32> {
  %n = kiln.none
  %a = kiln.mbconv %x, %we, %n, %wd, %n, %wp, %n, %n {dw_activation = 2 : i64, dw_clamp_max = 6.0 : f64, dw_clamp_min = 0.0 : f64, expand_activation = 2 : i64, expand_clamp_max = 6.0 : f64, expand_clamp_min = 0.0 : f64, padding = array<i64: 1, 1>, project_activation = 0 : i64, project_clamp_max = 0.0 : f64, project_clamp_min = 0.0 : f64, strategy = 1 : i64, stride = array<i64: 1, 1>} : (tensor<1x8x8x8xf32>, tensor<24x8x1x1xf32>, none, tensor<24x1x3x3xf32>, none, tensor<8x24x1x1xf32>, none, none) -> tensor<1x8x8x8xf32>
  %b = kiln.mbconv %a, %we, %n, %wd, %n, %wp, %n, %a {dw_activation = 2 : i64, dw_clamp_max = 6.0 : f64, dw_clamp_min = 0.0 : f64, expand_activation = 2 : i64, expand_clamp_max = 6.0 : f64, expand_clamp_min = 0.0 : f64, padding = array<i64: 1, 1>, project_activation = 0 : i64, project_clamp_max = 0.0 : f64, project_clamp_min = 0.0 : f64, strategy = 1 : i64, stride = array<i64: 1, 1>} : (tensor<1x8x8x8xf32>, tensor<24x8x1x1xf32>, none, tensor<24x1x3x3xf32>, none, tensor<8x24x1x1xf32>, none, tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32>
  return %b : tensor<1x8x8x8xf32>
}

// Only blocks whose recorded strategy is channels_last take part: b runs in bands (--kiln-fuse-mbconv
// chose so), so neither a's output nor b's input goes channels-last, whatever their sizes.
// CHECK-LABEL: func.func @banded_between
// CHECK-NOT: channels_last_
// CHECK: return
func.func @banded_between(%x: tensor<1x8x8x8xf32>, %we: tensor<24x8x1x1xf32>, %wd: tensor<24x1x3x3xf32>, %wp: tensor<8x24x1x1xf32>) -> tensor<1x8x8x8xf32> {
  %n = kiln.none
  %a = kiln.mbconv %x, %we, %n, %wd, %n, %wp, %n, %n {dw_activation = 2 : i64, dw_clamp_max = 6.0 : f64, dw_clamp_min = 0.0 : f64, expand_activation = 2 : i64, expand_clamp_max = 6.0 : f64, expand_clamp_min = 0.0 : f64, padding = array<i64: 1, 1>, project_activation = 0 : i64, project_clamp_max = 0.0 : f64, project_clamp_min = 0.0 : f64, strategy = 1 : i64, stride = array<i64: 1, 1>} : (tensor<1x8x8x8xf32>, tensor<24x8x1x1xf32>, none, tensor<24x1x3x3xf32>, none, tensor<8x24x1x1xf32>, none, none) -> tensor<1x8x8x8xf32>
  %b = kiln.mbconv %a, %we, %n, %wd, %n, %wp, %n, %n {dw_activation = 2 : i64, dw_clamp_max = 6.0 : f64, dw_clamp_min = 0.0 : f64, expand_activation = 2 : i64, expand_clamp_max = 6.0 : f64, expand_clamp_min = 0.0 : f64, padding = array<i64: 1, 1>, project_activation = 0 : i64, project_clamp_max = 0.0 : f64, project_clamp_min = 0.0 : f64, strategy = 0 : i64, stride = array<i64: 1, 1>} : (tensor<1x8x8x8xf32>, tensor<24x8x1x1xf32>, none, tensor<24x1x3x3xf32>, none, tensor<8x24x1x1xf32>, none, none) -> tensor<1x8x8x8xf32>
  %c = kiln.mbconv %b, %we, %n, %wd, %n, %wp, %n, %n {dw_activation = 2 : i64, dw_clamp_max = 6.0 : f64, dw_clamp_min = 0.0 : f64, expand_activation = 2 : i64, expand_clamp_max = 6.0 : f64, expand_clamp_min = 0.0 : f64, padding = array<i64: 1, 1>, project_activation = 0 : i64, project_clamp_max = 0.0 : f64, project_clamp_min = 0.0 : f64, strategy = 1 : i64, stride = array<i64: 1, 1>} : (tensor<1x8x8x8xf32>, tensor<24x8x1x1xf32>, none, tensor<24x1x3x3xf32>, none, tensor<8x24x1x1xf32>, none, none) -> tensor<1x8x8x8xf32>
  return %c : tensor<1x8x8x8xf32>
}
