// The verifier names the op and the mismatch.
// RUN: kiln-opt %s -split-input-file -verify-diagnostics

func.func @no_broadcast(%a: tensor<2x3xf32>, %b: tensor<4xf32>) {
  // expected-error @+1 {{kiln.add: shapes do not broadcast at dim 1 (3 vs 4)}}
  %0 = kiln.add %a, %b : tensor<2x3xf32>, tensor<4xf32>
  return
}

// -----

func.func @contraction(%a: tensor<2x3xf32>, %b: tensor<4x5xf32>) {
  // expected-error @+1 {{kiln.matmul: contraction sizes differ}}
  %0 = kiln.matmul %a, %b : tensor<2x3xf32>, tensor<4x5xf32>
  return
}

// -----

func.func @rank(%a: tensor<f32>, %b: tensor<3x5xf32>) {
  // expected-error @+1 {{kiln.matmul: expected operands of rank >= 1}}
  %0 = kiln.matmul %a, %b : tensor<f32>, tensor<3x5xf32>
  return
}

// -----

func.func @vector_contraction(%a: tensor<4xf32>, %b: tensor<3x5xf32>) {
  // expected-error @+1 {{kiln.matmul: contraction sizes differ}}
  %0 = kiln.matmul %a, %b : tensor<4xf32>, tensor<3x5xf32>
  return
}

// -----

func.func @interpolate_changes_channels(%x: tensor<1x3x4x4xf32>) {
  // expected-error @+1 {{'kiln.interpolate' op expects the same element type, N and C on both sides}}
  %0 = kiln.interpolate %x {mode = 1 : i64, align_corners = false, scale_h = 0.0 : f64, scale_w = 0.0 : f64, output_size = array<i64: 8, 8>} : (tensor<1x3x4x4xf32>) -> tensor<1x4x8x8xf32>
  return
}

// -----

func.func @interpolate_nearest_align_corners(%x: tensor<1x3x4x4xf32>) {
  // expected-error @+1 {{'kiln.interpolate' op align_corners can only be set with mode 1 (bilinear)}}
  %0 = kiln.interpolate %x {mode = 0 : i64, align_corners = true, scale_h = 0.0 : f64, scale_w = 0.0 : f64, output_size = array<i64: 8, 8>} : (tensor<1x3x4x4xf32>) -> tensor<1x3x8x8xf32>
  return
}

// -----

func.func @interpolate_backward_one_scale(%g: tensor<1x3x8x8xf32>) {
  // expected-error @+1 {{'kiln.interpolate_backward' op scale factors must be both set or both 0, got (2.000000e+00, 0.000000e+00)}}
  %0 = kiln.interpolate_backward %g {mode = 1 : i64, align_corners = false, scale_h = 2.0 : f64, scale_w = 0.0 : f64, input_size = array<i64: 4, 4>} : (tensor<1x3x8x8xf32>) -> tensor<1x3x4x4xf32>
  return
}

// -----

func.func @conv2d_impossible_result(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) {
  %none = kiln.none
  // expected-error @+1 {{'kiln.conv2d' op result must be [1, 4, 6, 6], got 'tensor<1x4x8x8xf32>'}}
  %0 = kiln.conv2d %x, %w, %none {stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>, none) -> tensor<1x4x8x8xf32>
  return
}

// -----

func.func @conv2d_channels(%x: tensor<1x3x8x8xf32>, %w: tensor<4x2x3x3xf32>) {
  %none = kiln.none
  // expected-error @+1 {{'kiln.conv2d' op input channels 3 differ from weight channels 2 x groups 1}}
  %0 = kiln.conv2d %x, %w, %none {stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x3x8x8xf32>, tensor<4x2x3x3xf32>, none) -> tensor<1x4x8x8xf32>
  return
}

// -----

func.func @guard_of_many_elements(%x: tensor<2xf32>) {
  // expected-error @+1 {{'kiln.guard' op expects a tensor of one element, got 'tensor<2xf32>'}}
  kiln.guard %x {value = 1.0 : f64, where = "a.cpp:1"} : (tensor<2xf32>) -> ()
  return
}
