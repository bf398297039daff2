// A malformed quantization plan is an error naming the op, never a half-rewritten graph.
// RUN: kiln-opt %s -split-input-file --kiln-insert-qdq -verify-diagnostics

func.func @qparams_on_integer(%x: tensor<4xi32>) -> tensor<4xi32> {
  // expected-error @+1 {{kiln.qparams: expected {scale: f32, zero_point: i64, dtype: i64} on a float32 tensor}}
  %0 = kiln.neg %x {kiln.qparams = {scale = 0.1 : f32, zero_point = 0 : i64, dtype = 4 : i64}} : tensor<4xi32> -> tensor<4xi32>
  return %0 : tensor<4xi32>
}

// -----

func.func @float_dtype(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{kiln.qparams: expected dtype int8, uint8 or int32 and a finite scale > 0}}
  %0 = kiln.neg %x {kiln.qparams = {scale = 0.1 : f32, zero_point = 0 : i64, dtype = 0 : i64}} : tensor<4xf32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @scales_per_channel(%x: tensor<1x2xf32>) -> tensor<1x3xf32> {
  %w = kiln.constant dense<1.0> : tensor<3x2xf32> : tensor<3x2xf32>
  %none = kiln.none
  // expected-error @+1 {{kiln.qweight: expected one scale per output channel (3), got 2}}
  %l = kiln.linear %x, %w, %none {kiln.qweight = {value = dense<1> : tensor<3x2xi8>, scale = dense<[0.5, 0.5]> : tensor<2xf32>, zero_point = dense<0> : tensor<2xi32>}} : (tensor<1x2xf32>, tensor<3x2xf32>, none) -> tensor<1x3xf32>
  return %l : tensor<1x3xf32>
}

// -----

func.func @qweight_not_a_layer(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{kiln.qweight: only kiln.conv2d and kiln.linear take int8 weights}}
  %0 = kiln.neg %x {kiln.qweight = {value = dense<1> : tensor<4xi8>, scale = dense<0.5> : tensor<f32>, zero_point = dense<0> : tensor<i32>}} : tensor<4xf32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @dynamic_without_weights(%x: tensor<1x2xf32>, %w: tensor<3x2xf32>) -> tensor<1x3xf32> {
  %none = kiln.none
  // expected-error @+1 {{kiln.qdynamic: expected kiln.qweight beside it}}
  %0 = kiln.linear %x, %w, %none {kiln.qdynamic} : (tensor<1x2xf32>, tensor<3x2xf32>, none) -> tensor<1x3xf32>
  return %0 : tensor<1x3xf32>
}

// -----

func.func @dynamic_conv(%x: tensor<1x1x2x2xf32>) -> tensor<1x1x1x1xf32> {
  %w = kiln.constant dense<0.5> : tensor<1x1x2x2xf32> : tensor<1x1x2x2xf32>
  %none = kiln.none
  // expected-error @+1 {{kiln.qdynamic: only kiln.linear is quantized dynamically}}
  %0 = kiln.conv2d %x, %w, %none {dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>, kiln.qdynamic, kiln.qweight = {value = dense<1> : tensor<1x1x2x2xi8>, scale = dense<0.5> : tensor<f32>, zero_point = dense<0> : tensor<i32>}} : (tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>, none) -> tensor<1x1x1x1xf32>
  return %0 : tensor<1x1x1x1xf32>
}
