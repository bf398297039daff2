// The ops the passes create verify their structure; errors name the op and the mismatch.
// RUN: kiln-opt %s -split-input-file -verify-diagnostics

func.func @fused_arg_type(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'kiln.fused' op body argument type 'tensor<4xf64>' differs from operand type 'tensor<4xf32>'}}
  %0 = kiln.fused(%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf64>):
    %1 = kiln.to %a {dtype = 0 : i64} : (tensor<4xf64>) -> tensor<4xf32>
    kiln.yield %1 : tensor<4xf32>
  }
  return %0 : tensor<4xf32>
}

// -----

func.func @fused_yield(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'kiln.fused' op yields 'tensor<2x2xf32>', the op returns 'tensor<4xf32>'}}
  %0 = kiln.fused(%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %1 = kiln.reshape %a {shape = array<i64: 2, 2>} : (tensor<4xf32>) -> tensor<2x2xf32>
    kiln.yield %1 : tensor<2x2xf32>
  }
  return %0 : tensor<4xf32>
}

// -----

func.func @fused_foreign_op(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'kiln.fused' op body may hold only kiln ops without regions, found arith.constant}}
  %0 = kiln.fused(%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %c = arith.constant dense<1.0> : tensor<4xf32>
    kiln.yield %c : tensor<4xf32>
  }
  return %0 : tensor<4xf32>
}

// -----

func.func @conv_activation(%x: tensor<1x1x4x4xf32>, %w: tensor<1x1x1x1xf32>) -> tensor<1x1x4x4xf32> {
  %n = kiln.none
  // expected-error @+1 {{'kiln.conv2d_fused' op activation must be one of Activation's values none (0), relu (1), relu6 (2), clamp (3), gelu (4), gelu_tanh (5), silu (6), sigmoid (7), tanh (8); got 9}}
  %0 = kiln.conv2d_fused %x, %w, %n, %n {activation = 9 : i64, clamp_max = 0.0 : f64, clamp_min = 0.0 : f64, dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (tensor<1x1x4x4xf32>, tensor<1x1x1x1xf32>, none, none) -> tensor<1x1x4x4xf32>
  return %0 : tensor<1x1x4x4xf32>
}

// -----

func.func @linear_residual(%x: tensor<2x3xf32>, %w: tensor<4x3xf32>, %r: tensor<4xf32>) -> tensor<2x4xf32> {
  %n = kiln.none
  // expected-error @+1 {{'kiln.linear_fused' op residual type 'tensor<4xf32>' differs from the result type 'tensor<2x4xf32>'}}
  %0 = kiln.linear_fused %x, %w, %n, %r {activation = 0 : i64, clamp_max = 0.0 : f64, clamp_min = 0.0 : f64} : (tensor<2x3xf32>, tensor<4x3xf32>, none, tensor<4xf32>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

func.func @clamp_bounds(%x: tensor<2x3xf32>, %w: tensor<4x3xf32>) -> tensor<2x4xf32> {
  %n = kiln.none
  // expected-error @+1 {{'kiln.linear_fused' op clamp bounds are not ordered: min 1.000000e+00 > max -1.000000e+00}}
  %0 = kiln.linear_fused %x, %w, %n, %n {activation = 3 : i64, clamp_max = -1.0 : f64, clamp_min = 1.0 : f64} : (tensor<2x3xf32>, tensor<4x3xf32>, none, none) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}


// -----

func.func @mbconv_project_weight(%x: tensor<1x4x8x8xf32>, %we: tensor<12x4x1x1xf32>, %wd: tensor<12x1x3x3xf32>, %wp: tensor<4x10x1x1xf32>) -> tensor<1x4x8x8xf32> {
  %n = kiln.none
  // expected-error @+1 {{'kiln.mbconv' op project_weight must be [P, 12, 1, 1]}}
  %0 = kiln.mbconv %x, %we, %n, %wd, %n, %wp, %n, %n {dw_activation = 2 : i64, dw_clamp_max = 6.0 : f64, dw_clamp_min = 0.0 : f64, expand_activation = 2 : i64, expand_clamp_max = 6.0 : f64, expand_clamp_min = 0.0 : f64, padding = array<i64: 1, 1>, project_activation = 0 : i64, project_clamp_max = 0.0 : f64, project_clamp_min = 0.0 : f64, strategy = 0 : i64, stride = array<i64: 1, 1>} : (tensor<1x4x8x8xf32>, tensor<12x4x1x1xf32>, none, tensor<12x1x3x3xf32>, none, tensor<4x10x1x1xf32>, none, none) -> tensor<1x4x8x8xf32>
  return %0 : tensor<1x4x8x8xf32>
}

// -----

func.func @mbconv_result(%x: tensor<1x4x8x8xf32>, %we: tensor<12x4x1x1xf32>, %wd: tensor<12x1x3x3xf32>, %wp: tensor<4x12x1x1xf32>) -> tensor<1x4x8x8xf32> {
  %n = kiln.none
  // expected-error @+1 {{'kiln.mbconv' op result must be [1, 4, 4, 4]}}
  %0 = kiln.mbconv %x, %we, %n, %wd, %n, %wp, %n, %n {dw_activation = 2 : i64, dw_clamp_max = 6.0 : f64, dw_clamp_min = 0.0 : f64, expand_activation = 2 : i64, expand_clamp_max = 6.0 : f64, expand_clamp_min = 0.0 : f64, padding = array<i64: 1, 1>, project_activation = 0 : i64, project_clamp_max = 0.0 : f64, project_clamp_min = 0.0 : f64, strategy = 1 : i64, stride = array<i64: 2, 2>} : (tensor<1x4x8x8xf32>, tensor<12x4x1x1xf32>, none, tensor<12x1x3x3xf32>, none, tensor<4x12x1x1xf32>, none, none) -> tensor<1x4x8x8xf32>
  return %0 : tensor<1x4x8x8xf32>
}

// -----

func.func @mbconv_activation(%x: tensor<1x12x8x8xf32>, %wd: tensor<12x1x3x3xf32>, %wp: tensor<4x12x1x1xf32>) -> tensor<1x4x8x8xf32> {
  %n = kiln.none
  // expected-error @+1 {{'kiln.mbconv' op dw_activation must be one of Activation's values none (0), relu (1), relu6 (2), clamp (3), gelu (4), gelu_tanh (5), silu (6), sigmoid (7), tanh (8); got 11}}
  %0 = kiln.mbconv %x, %n, %n, %wd, %n, %wp, %n, %n {dw_activation = 11 : i64, dw_clamp_max = 6.0 : f64, dw_clamp_min = 0.0 : f64, expand_activation = 0 : i64, expand_clamp_max = 0.0 : f64, expand_clamp_min = 0.0 : f64, padding = array<i64: 1, 1>, project_activation = 0 : i64, project_clamp_max = 0.0 : f64, project_clamp_min = 0.0 : f64, strategy = 0 : i64, stride = array<i64: 1, 1>} : (tensor<1x12x8x8xf32>, none, none, tensor<12x1x3x3xf32>, none, tensor<4x12x1x1xf32>, none, none) -> tensor<1x4x8x8xf32>
  return %0 : tensor<1x4x8x8xf32>
}

// -----

func.func @mbconv_strategy(%x: tensor<1x12x8x8xf32>, %wd: tensor<12x1x3x3xf32>, %wp: tensor<4x12x1x1xf32>) -> tensor<1x4x8x8xf32> {
  %n = kiln.none
  // expected-error @+1 {{'kiln.mbconv' op strategy must be one of MBConvStrategy's values banded (0), channels_last (1); got 2}}
  %0 = kiln.mbconv %x, %n, %n, %wd, %n, %wp, %n, %n {dw_activation = 0 : i64, dw_clamp_max = 0.0 : f64, dw_clamp_min = 0.0 : f64, expand_activation = 0 : i64, expand_clamp_max = 0.0 : f64, expand_clamp_min = 0.0 : f64, padding = array<i64: 1, 1>, project_activation = 0 : i64, project_clamp_max = 0.0 : f64, project_clamp_min = 0.0 : f64, strategy = 2 : i64, stride = array<i64: 1, 1>} : (tensor<1x12x8x8xf32>, none, none, tensor<12x1x3x3xf32>, none, tensor<4x12x1x1xf32>, none, none) -> tensor<1x4x8x8xf32>
  return %0 : tensor<1x4x8x8xf32>
}

// -----

func.func @conv2d_avgpool_result(%x: tensor<2x8x7x7xf32>, %w: tensor<16x8x1x1xf32>) -> tensor<2x16x7x7xf32> {
  %n = kiln.none
  // expected-error @+1 {{'kiln.conv2d_avgpool' op result must be [2, 16, 1, 1], got 'tensor<2x16x7x7xf32>'}}
  %0 = kiln.conv2d_avgpool %x, %w, %n {activation = 0 : i64, clamp_max = 0.0 : f64, clamp_min = 0.0 : f64, dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (tensor<2x8x7x7xf32>, tensor<16x8x1x1xf32>, none) -> tensor<2x16x7x7xf32>
  return %0 : tensor<2x16x7x7xf32>
}

// -----

func.func @conv2d_avgpool_activation(%x: tensor<2x8x7x7xf32>, %w: tensor<16x8x1x1xf32>) -> tensor<2x16x1x1xf32> {
  %n = kiln.none
  // expected-error @+1 {{'kiln.conv2d_avgpool' op clamp bounds are not ordered: min 1.000000e+00 > max 0.000000e+00}}
  %0 = kiln.conv2d_avgpool %x, %w, %n {activation = 3 : i64, clamp_max = 0.0 : f64, clamp_min = 1.0 : f64, dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (tensor<2x8x7x7xf32>, tensor<16x8x1x1xf32>, none) -> tensor<2x16x1x1xf32>
  return %0 : tensor<2x16x1x1xf32>
}

// -----

func.func @attention_key_features(%q: tensor<2x4x8xf32>, %k: tensor<2x5x7xf32>, %v: tensor<2x5x3xf32>) -> tensor<2x4x3xf32> {
  %n = kiln.none
  // expected-error @+1 {{'kiln.attention' op key features 7 differ from the query's 8}}
  %0 = kiln.attention %q, %k, %v, %n {scale = 1.0 : f64, seq_first = false} : (tensor<2x4x8xf32>, tensor<2x5x7xf32>, tensor<2x5x3xf32>, none) -> tensor<2x4x3xf32>
  return %0 : tensor<2x4x3xf32>
}

// -----

func.func @attention_value_rows(%q: tensor<4x2x8xf32>, %k: tensor<5x2x8xf32>, %v: tensor<6x2x3xf32>) -> tensor<4x2x3xf32> {
  %n = kiln.none
  // expected-error @+1 {{'kiln.attention' op value rows 6 differ from the key's 5}}
  %0 = kiln.attention %q, %k, %v, %n {scale = 1.0 : f64, seq_first = true} : (tensor<4x2x8xf32>, tensor<5x2x8xf32>, tensor<6x2x3xf32>, none) -> tensor<4x2x3xf32>
  return %0 : tensor<4x2x3xf32>
}

// -----

func.func @attention_mask(%q: tensor<2x4x8xf32>, %k: tensor<2x5x8xf32>, %v: tensor<2x5x3xf32>, %m: tensor<4x4xf32>) -> tensor<2x4x3xf32> {
  // expected-error @+1 {{'kiln.attention' op mask [4, 4] does not broadcast to the scores [2, 4, 5]}}
  %0 = kiln.attention %q, %k, %v, %m {scale = 1.0 : f64, seq_first = false} : (tensor<2x4x8xf32>, tensor<2x5x8xf32>, tensor<2x5x3xf32>, tensor<4x4xf32>) -> tensor<2x4x3xf32>
  return %0 : tensor<2x4x3xf32>
}

// -----

func.func @attention_result(%q: tensor<4x2x8xf32>, %k: tensor<5x2x8xf32>, %v: tensor<5x2x3xf32>) -> tensor<2x4x3xf32> {
  %n = kiln.none
  // expected-error @+1 {{'kiln.attention' op result must be [4, 2, 3], got 'tensor<2x4x3xf32>'}}
  %0 = kiln.attention %q, %k, %v, %n {scale = 1.0 : f64, seq_first = true} : (tensor<4x2x8xf32>, tensor<5x2x8xf32>, tensor<5x2x3xf32>, none) -> tensor<2x4x3xf32>
  return %0 : tensor<2x4x3xf32>
}

// -----

func.func @attention_dtype(%q: tensor<2x4x8xf64>, %k: tensor<2x5x8xf64>, %v: tensor<2x5x3xf64>) -> tensor<2x4x3xf64> {
  %n = kiln.none
  // expected-error @+1 {{'kiln.attention' op expects float32 operands, got 'tensor<2x4x8xf64>'}}
  %0 = kiln.attention %q, %k, %v, %n {scale = 1.0 : f64, seq_first = false} : (tensor<2x4x8xf64>, tensor<2x5x8xf64>, tensor<2x5x3xf64>, none) -> tensor<2x4x3xf64>
  return %0 : tensor<2x4x3xf64>
}
