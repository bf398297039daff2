// Every op verifies the result its kernel would compute: the shape rules of ir/ops.toml
// (ir/lib/ShapeRules.cpp). Each case contradicts one rule and names the expected value.
// RUN: kiln-opt %s -split-input-file -verify-diagnostics

func.func @sum_keepdim(%x: tensor<2x3x4xf32>) {
  // expected-error @+1 {{'kiln.sum' op result must be [2, 1, 4], got 'tensor<2x4xf32>'}}
  %0 = kiln.sum %x {dims = array<i64: 1>, keepdim = true} : (tensor<2x3x4xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @mean_bad_dim(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{'kiln.mean' op dim 2 is out of range for a tensor of rank 2}}
  %0 = kiln.mean %x {dims = array<i64: 2>, keepdim = false} : (tensor<2x3xf32>) -> tensor<2xf32>
  return
}

// -----

func.func @max_indices(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{'kiln.max' op indices must be [2], got 'tensor<3xi64>'}}
  %0:2 = kiln.max %x {dim = -1 : i64, keepdim = false} : (tensor<2x3xf32>) -> (tensor<2xf32>, tensor<3xi64>)
  return
}

// -----

func.func @argmax_indices_are_i64(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{'kiln.argmax' op result #0 must be ranked tensor of 64-bit signless integer values}}
  %0 = kiln.argmax %x {dim = 1 : i64, keepdim = false} : (tensor<2x3xf32>) -> tensor<2xf32>
  return
}

// -----

func.func @transpose(%x: tensor<2x3x4xf32>) {
  // expected-error @+1 {{'kiln.transpose' op result must be [4, 3, 2], got 'tensor<2x3x4xf32>'}}
  %0 = kiln.transpose %x {dim0 = 0 : i64, dim1 = -1 : i64} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  return
}

// -----

func.func @permute_twice(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{'kiln.permute' op dims [0, 0] must name each of the 2 dims once}}
  %0 = kiln.permute %x {dims = array<i64: 0, 0>} : (tensor<2x3xf32>) -> tensor<2x2xf32>
  return
}

// -----

func.func @slice_step(%x: tensor<10xf32>) {
  // expected-error @+1 {{'kiln.slice' op result must be [3], got 'tensor<5xf32>'}}
  %0 = kiln.slice %x {dim = 0 : i64, start = 1 : i64, end = 100 : i64, step = 3 : i64} : (tensor<10xf32>) -> tensor<5xf32>
  return
}

// -----

func.func @view_elements(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{'kiln.view' op shape [4, 2] does not hold the input's 6 elements}}
  %0 = kiln.view %x {shape = array<i64: 4, 2>} : (tensor<2x3xf32>) -> tensor<4x2xf32>
  return
}

// -----

func.func @cat_mismatch(%a: tensor<2x3xf32>, %b: tensor<2x4xf32>) {
  // expected-error @+1 {{'kiln.cat' op inputs differ outside the joined dim}}
  %0 = kiln.cat %a, %b {dim = 0 : i64} : (tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<4x3xf32>
  return
}

// -----

func.func @stack_result(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) {
  // expected-error @+1 {{'kiln.stack' op result must be [2, 2, 3], got 'tensor<4x3xf32>'}}
  %0 = kiln.stack %a, %b {dim = 0 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
  return
}

// -----

func.func @linear_features(%x: tensor<4x8xf32>, %w: tensor<16x7xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{'kiln.linear' op input features 8 differ from the weight's 7}}
  %0 = kiln.linear %x, %w, %b : (tensor<4x8xf32>, tensor<16x7xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  return
}

// -----

func.func @conv_transpose2d_size(%x: tensor<1x4x5x5xf32>, %w: tensor<4x2x3x3xf32>) {
  %n = kiln.none
  // expected-error @+1 {{'kiln.conv_transpose2d' op result must be [1, 2, 10, 10], got 'tensor<1x2x9x9xf32>'}}
  %0 = kiln.conv_transpose2d %x, %w, %n {stride = array<i64: 2, 2>, padding = array<i64: 1, 1>, output_padding = array<i64: 1, 1>, groups = 1 : i64, dilation = array<i64: 1, 1>} : (tensor<1x4x5x5xf32>, tensor<4x2x3x3xf32>, none) -> tensor<1x2x9x9xf32>
  return
}

// -----

func.func @max_pool_ceil(%x: tensor<1x1x5x5xf32>) {
  // expected-error @+1 {{'kiln.max_pool2d' op result must be [1, 1, 3, 3], got 'tensor<1x1x2x2xf32>'}}
  %0:2 = kiln.max_pool2d %x {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, ceil_mode = true} : (tensor<1x1x5x5xf32>) -> (tensor<1x1x2x2xf32>, tensor<1x1x2x2xi64>)
  return
}

// -----

func.func @embedding(%w: tensor<10x4xf32>, %i: tensor<2x3xi64>) {
  // expected-error @+1 {{'kiln.embedding' op result must be [2, 3, 4], got 'tensor<2x3xf32>'}}
  %0 = kiln.embedding %w, %i {padding_idx = -1 : i64} : (tensor<10x4xf32>, tensor<2x3xi64>) -> tensor<2x3xf32>
  return
}

// -----

func.func @gather_float_index(%x: tensor<2x3xf32>, %i: tensor<2x3xf32>) {
  // expected-error @+1 {{'kiln.gather' op operand #1 must be ranked tensor of integer values}}
  %0 = kiln.gather %x, %i {dim = 1 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @topk_k(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{'kiln.topk' op k must be in [0, 3], got 4}}
  %0:2 = kiln.topk %x {k = 4 : i64, dim = 1 : i64, largest = true, sorted = true} : (tensor<2x3xf32>) -> (tensor<2x4xf32>, tensor<2x4xi64>)
  return
}

// -----

func.func @loss_reduction(%x: tensor<4x3xf32>, %t: tensor<4xi64>) {
  %n = kiln.none
  // expected-error @+1 {{'kiln.cross_entropy' op reduction must be one of Reduction's values none (0), mean (1), sum (2); got 3}}
  %0 = kiln.cross_entropy %x, %t, %n {ignore_index = -100 : i64, reduction = 3 : i64, label_smoothing = 0.0 : f64} : (tensor<4x3xf32>, tensor<4xi64>, none) -> tensor<f32>
  return
}

// -----

func.func @loss_none(%x: tensor<4x3xf32>, %t: tensor<4xi64>) {
  %n = kiln.none
  // expected-error @+1 {{'kiln.nll_loss' op result must be [4], got 'tensor<f32>'}}
  %0 = kiln.nll_loss %x, %t, %n {ignore_index = -100 : i64, reduction = 0 : i64} : (tensor<4x3xf32>, tensor<4xi64>, none) -> tensor<f32>
  return
}

// -----

func.func @random_state(%s: tensor<3xi64>) {
  // expected-error @+1 {{'kiln.uniform' op expects a Philox state tensor<2xi64> (seed, offset), got 'tensor<3xi64>'}}
  %0:2 = kiln.uniform %s {low = 0.0 : f64, high = 1.0 : f64, size = array<i64: 4>, dtype = 0 : i64} : (tensor<3xi64>) -> (tensor<4xf32>, tensor<3xi64>)
  return
}

// -----

func.func @random_size(%s: tensor<2xi64>) {
  // expected-error @+1 {{'kiln.normal' op result must be [4, 3], got 'tensor<4x2xf32>'}}
  %0:2 = kiln.normal %s {mean = 0.0 : f64, std = 1.0 : f64, size = array<i64: 4, 3>, dtype = 0 : i64} : (tensor<2xi64>) -> (tensor<4x2xf32>, tensor<2xi64>)
  return
}

// -----

func.func @random_dtype(%s: tensor<2xi64>) {
  // expected-error @+1 {{'kiln.randint' op result element type must be int32 (dtype 6), got 'tensor<4xi64>'}}
  %0:2 = kiln.randint %s {low = 0 : i64, high = 9 : i64, size = array<i64: 4>, dtype = 6 : i64} : (tensor<2xi64>) -> (tensor<4xi64>, tensor<2xi64>)
  return
}

// -----

func.func @dropout_mask_negative_size(%s: tensor<2xi64>) {
  // expected-error @+1 {{'kiln.dropout_mask' op size must hold sizes >= 0, got [-1]}}
  %0:2 = kiln.dropout_mask %s {p = 0.5 : f64, size = array<i64: -1>} : (tensor<2xi64>) -> (tensor<?xi1>, tensor<2xi64>)
  return
}

// -----

func.func @interpolate_output_size(%x: tensor<1x3x4x4xf32>) {
  // expected-error @+1 {{'kiln.interpolate' op result must be [1, 3, 8, 6], got 'tensor<1x3x8x8xf32>'}}
  %0 = kiln.interpolate %x {mode = 1 : i64, align_corners = false, scale_h = 0.0 : f64, scale_w = 0.0 : f64, output_size = array<i64: 8, 6>} : (tensor<1x3x4x4xf32>) -> tensor<1x3x8x8xf32>
  return
}

// -----

func.func @max_pool2d_backward_input_size(%g: tensor<1x3x2x2xf32>, %i: tensor<1x3x2x2xi64>) {
  // expected-error @+1 {{'kiln.max_pool2d_backward' op expects a spatial size of 2 dims >= 0, got [4]}}
  %0 = kiln.max_pool2d_backward %g, %i {input_size = array<i64: 4>} : (tensor<1x3x2x2xf32>, tensor<1x3x2x2xi64>) -> tensor<1x3x4x4xf32>
  return
}

// -----

func.func @avg_pool2d_backward_grad_of_another_pooling(%g: tensor<1x3x3x3xf32>) {
  // expected-error @+1 {{'kiln.avg_pool2d_backward' op operand must be [1, 3, 2, 2], got 'tensor<1x3x3x3xf32>'}}
  %0 = kiln.avg_pool2d_backward %g {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>, ceil_mode = false, count_include_pad = true, input_size = array<i64: 4, 4>} : (tensor<1x3x3x3xf32>) -> tensor<1x3x4x4xf32>
  return
}

// -----

func.func @to_dtype(%x: tensor<2xf32>) {
  // expected-error @+1 {{'kiln.to' op result element type must be int32 (dtype 6), got 'tensor<2xi64>'}}
  %0 = kiln.to %x {dtype = 6 : i64} : (tensor<2xf32>) -> tensor<2xi64>
  return
}

// -----

func.func @pad(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{'kiln.pad' op result must be [2, 6], got 'tensor<2x3xf32>'}}
  %0 = kiln.pad %x {pad = array<i64: 1, 2>, mode = 0 : i64, value = 0.0 : f64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @pad_mode(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{'kiln.pad' op mode must be one of PadMode's values constant (0), reflect (1), replicate (2); got 7}}
  %0 = kiln.pad %x {pad = array<i64: 1, 2>, mode = 7 : i64, value = 0.0 : f64} : (tensor<2x3xf32>) -> tensor<2x6xf32>
  return
}

// -----

func.func @unary_shape(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{'kiln.log1p' op expects equal shapes, got 'tensor<2x3xf32>' and 'tensor<3x2xf32>'}}
  %0 = kiln.log1p %x : tensor<2x3xf32> -> tensor<3x2xf32>
  return
}

// -----

func.func @constant_type() {
  // expected-error @+1 {{'kiln.constant' op value type 'tensor<2xf32>' differs from the result type 'tensor<3xf32>'}}
  %0 = kiln.constant dense<[1.0, 2.0]> : tensor<2xf32> : tensor<3xf32>
  return
}

// -----

// Dynamic dims match anything: the rules check what is known.
func.func @dynamic_ok(%x: tensor<?x3xf32>, %w: tensor<5x3xf32>) -> (tensor<?x5xf32>, tensor<?xf32>) {
  %n = kiln.none
  %0 = kiln.linear %x, %w, %n : (tensor<?x3xf32>, tensor<5x3xf32>, none) -> tensor<?x5xf32>
  %1 = kiln.sum %0 {dims = array<i64: 1>, keepdim = false} : (tensor<?x5xf32>) -> tensor<?xf32>
  return %0, %1 : tensor<?x5xf32>, tensor<?xf32>
}

// -----

// cat skips 1-d empty inputs whatever the others' rank (PyTorch's legacy rule, as the runtime).
func.func @cat_skips_empty(%e: tensor<0xf32>, %x: tensor<2x3xf32>) -> tensor<4x3xf32> {
  %0 = kiln.cat %e, %x, %x {dim = 0 : i64} : (tensor<0xf32>, tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

func.func @pool_one_value(%x: tensor<1x1x4x4xf32>) {
  // expected-error @+1 {{expects kernel, stride, padding and dilation of 2 values}}
  %0 = kiln.avg_pool2d %x {kernel = array<i64: 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>, ceil_mode = false, count_include_pad = true} : (tensor<1x1x4x4xf32>) -> tensor<1x1x2x2xf32>
  return
}

// -----

func.func @one_hot_classes(%i: tensor<3xi64>) {
  // expected-error @+1 {{'kiln.one_hot' op num_classes must be -1 (from the data) or >= 0, got -2}}
  %0 = kiln.one_hot %i {num_classes = -2 : i64} : (tensor<3xi64>) -> tensor<3x4xi64>
  return
}

// -----

// max has no flat form (argmax does): INT64_MIN is an out-of-range dim.
func.func @max_flat(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{'kiln.max' op dim -9223372036854775808 is out of range for a tensor of rank 2}}
  %0:2 = kiln.max %x {dim = -9223372036854775808 : i64, keepdim = false} : (tensor<2x3xf32>) -> (tensor<f32>, tensor<i64>)
  return
}

// -----

// Dynamic sizes stay dynamic through derived sizes (no arithmetic on them).
func.func @conv_transpose_dynamic(%x: tensor<1x4x?x5xf32>, %w: tensor<4x2x3x3xf32>) -> tensor<1x4x?x10xf32> {
  %n = kiln.none
  %0 = kiln.conv_transpose2d %x, %w, %n {stride = array<i64: 2, 2>, padding = array<i64: 1, 1>, output_padding = array<i64: 1, 1>, groups = 2 : i64, dilation = array<i64: 1, 1>} : (tensor<1x4x?x5xf32>, tensor<4x2x3x3xf32>, none) -> tensor<1x4x?x10xf32>
  return %0 : tensor<1x4x?x10xf32>
}

// -----

func.func @class_weights(%x: tensor<4x3xf32>, %t: tensor<4xi64>, %w: tensor<4xf32>) {
  // expected-error @+1 {{'kiln.cross_entropy' op class weights must be [3] (one per class), got 'tensor<4xf32>'}}
  %0 = kiln.cross_entropy %x, %t, %w {ignore_index = -100 : i64, reduction = 1 : i64, label_smoothing = 0.0 : f64} : (tensor<4x3xf32>, tensor<4xi64>, tensor<4xf32>) -> tensor<f32>
  return
}

// -----

// Hostile attributes: sizes computed in 128 bits, an overflow named as such.
func.func @pool_overflow(%x: tensor<1x1x4x4xf32>) {
  // expected-error @+1 {{'kiln.max_pool2d' op its attributes make a result size overflow int64}}
  %0:2 = kiln.max_pool2d %x {kernel = array<i64: 9223372036854775807, 2>, stride = array<i64: 1, 1>, padding = array<i64: 9223372036854775807, 0>, dilation = array<i64: 9223372036854775807, 1>, ceil_mode = true} : (tensor<1x1x4x4xf32>) -> (tensor<1x1x2x2xf32>, tensor<1x1x2x2xi64>)
  return
}

// -----

// Element types are inferred too: relu keeps its input's.
func.func @inferred_element_type(%x: tensor<4xf32>) -> tensor<4xf64> {
  // expected-error @+2 {{'kiln.relu' op inferred type(s) 'tensor<4xf32>' are incompatible with return type(s) of operation 'tensor<4xf64>'}}
  // expected-error @+1 {{'kiln.relu' op failed to infer returned types}}
  %0 = kiln.relu %x : tensor<4xf32> -> tensor<4xf64>
  return %0 : tensor<4xf64>
}

// -----

// The sum of integers is int64 (PyTorch's rule, the runtime's sum_result_dtype).
func.func @sum_of_integers(%x: tensor<4x3xi32>) -> tensor<4xi32> {
  // expected-error @+1 {{'kiln.sum' op result element type must be 'i64', got 'tensor<4xi32>'}}
  %0 = kiln.sum %x {dims = array<i64: 1>, keepdim = false} : (tensor<4x3xi32>) -> tensor<4xi32>
  return %0 : tensor<4xi32>
}

// -----

func.func @quantize_scales_per_axis(%x: tensor<2x3xf32>, %s: tensor<2xf32>, %z: tensor<2xi64>) {
  // expected-error @+1 {{'kiln.quantize' op expects one scale per index of axis 1 (3), got 2}}
  %0 = kiln.quantize %x, %s, %z {axis = 1 : i64, dtype = 4 : i64} : (tensor<2x3xf32>, tensor<2xf32>, tensor<2xi64>) -> tensor<2x3xi8>
  return
}

// -----

func.func @quantize_axis_in_range(%x: tensor<2x3xf32>, %s: tensor<2xf32>, %z: tensor<2xi64>) {
  // expected-error @+1 {{'kiln.quantize' op expects axis in [-2, 2), got 2}}
  %0 = kiln.quantize %x, %s, %z {axis = 2 : i64, dtype = 4 : i64} : (tensor<2x3xf32>, tensor<2xf32>, tensor<2xi64>) -> tensor<2x3xi8>
  return
}

// -----

func.func @quantize_zero_point_shape(%x: tensor<2x3xf32>, %s: tensor<f32>, %z: tensor<3xi64>) {
  // expected-error @+1 {{'kiln.quantize' op expects zero_point of scale's shape, got 'tensor<3xi64>' and scale 'tensor<f32>'}}
  %0 = kiln.quantize %x, %s, %z {axis = 1 : i64, dtype = 4 : i64} : (tensor<2x3xf32>, tensor<f32>, tensor<3xi64>) -> tensor<2x3xi8>
  return
}

// -----

func.func @quantize_result_type(%x: tensor<2x3xf32>, %s: tensor<f32>, %z: tensor<i64>) {
  // expected-error @+1 {{'kiln.quantize' op result element type must be uint8 (dtype 5), got 'tensor<2x3xi8>'}}
  %0 = kiln.quantize %x, %s, %z {axis = 1 : i64, dtype = 5 : i64} : (tensor<2x3xf32>, tensor<f32>, tensor<i64>) -> tensor<2x3xi8>
  return
}

// -----

func.func @dequantize_scale_rank(%q: tensor<2x3xi8>, %s: tensor<2x3xf32>, %z: tensor<2x3xi64>) {
  // expected-error @+1 {{'kiln.dequantize' op expects scale of 0 dims (per tensor) or 1 (per channel), got 'tensor<2x3xf32>'}}
  %0 = kiln.dequantize %q, %s, %z {axis = 1 : i64} : (tensor<2x3xi8>, tensor<2x3xf32>, tensor<2x3xi64>) -> tensor<2x3xf32>
  return
}

// -----

func.func @qlinear_input_scale_per_tensor(%x: tensor<2x8xui8>, %xs: tensor<2xf32>, %xz: tensor<2xi32>, %w: tensor<4x8xi8>, %ws: tensor<4xf32>, %wz: tensor<4xi32>, %ys: tensor<f32>, %yz: tensor<i32>) {
  %none = kiln.none
  // expected-error @+1 {{'kiln.qlinear' op expects a 0-dim (per tensor) scale and zero point, got 'tensor<2xf32>' and 'tensor<2xi32>'}}
  %0 = kiln.qlinear %x, %xs, %xz, %w, %ws, %wz, %none, %ys, %yz {dtype = 5 : i64, relu = false} : (tensor<2x8xui8>, tensor<2xf32>, tensor<2xi32>, tensor<4x8xi8>, tensor<4xf32>, tensor<4xi32>, none, tensor<f32>, tensor<i32>) -> tensor<2x4xui8>
  return
}

// -----

func.func @qlinear_weight_scales_per_output_channel(%x: tensor<2x8xui8>, %xs: tensor<f32>, %xz: tensor<i32>, %w: tensor<4x8xi8>, %ws: tensor<8xf32>, %wz: tensor<8xi32>, %ys: tensor<f32>, %yz: tensor<i32>) {
  %none = kiln.none
  // expected-error @+1 {{'kiln.qlinear' op expects one scale per index of axis 0 (4), got 8}}
  %0 = kiln.qlinear %x, %xs, %xz, %w, %ws, %wz, %none, %ys, %yz {dtype = 5 : i64, relu = false} : (tensor<2x8xui8>, tensor<f32>, tensor<i32>, tensor<4x8xi8>, tensor<8xf32>, tensor<8xi32>, none, tensor<f32>, tensor<i32>) -> tensor<2x4xui8>
  return
}

// -----

func.func @qconv2d_result_shape(%x: tensor<1x3x8x8xui8>, %xs: tensor<f32>, %xz: tensor<i32>, %w: tensor<4x3x3x3xi8>, %ws: tensor<4xf32>, %wz: tensor<4xi32>, %b: tensor<4xi32>, %ys: tensor<f32>, %yz: tensor<i32>) {
  // expected-error @+1 {{'kiln.qconv2d' op result must be [1, 4, 6, 6], got 'tensor<1x4x8x8xui8>'}}
  %0 = kiln.qconv2d %x, %xs, %xz, %w, %ws, %wz, %b, %ys, %yz {dilation = array<i64: 1, 1>, dtype = 5 : i64, groups = 1 : i64, padding = array<i64: 0, 0>, relu = true, stride = array<i64: 1, 1>} : (tensor<1x3x8x8xui8>, tensor<f32>, tensor<i32>, tensor<4x3x3x3xi8>, tensor<4xf32>, tensor<4xi32>, tensor<4xi32>, tensor<f32>, tensor<i32>) -> tensor<1x4x8x8xui8>
  return
}

// -----

// Channels-last: input [N, H, W, C], result [N, H_out, W_out, C_out] (here the NCHW shape).
func.func @qconv2d_channels_last_result_shape(%x: tensor<1x8x8x3xui8>, %xs: tensor<f32>, %xz: tensor<i32>, %w: tensor<4x3x3x3xi8>, %ws: tensor<4xf32>, %wz: tensor<4xi32>, %b: tensor<4xi32>, %ys: tensor<f32>, %yz: tensor<i32>) {
  // expected-error @+1 {{'kiln.qconv2d' op result must be [1, 6, 6, 4], got 'tensor<1x4x6x6xui8>'}}
  %0 = kiln.qconv2d %x, %xs, %xz, %w, %ws, %wz, %b, %ys, %yz {channels_last = true, dilation = array<i64: 1, 1>, dtype = 5 : i64, groups = 1 : i64, padding = array<i64: 0, 0>, relu = true, stride = array<i64: 1, 1>} : (tensor<1x8x8x3xui8>, tensor<f32>, tensor<i32>, tensor<4x3x3x3xi8>, tensor<4xf32>, tensor<4xi32>, tensor<4xi32>, tensor<f32>, tensor<i32>) -> tensor<1x4x6x6xui8>
  return
}

// -----

func.func @qconv2d_channels_last_channels(%x: tensor<1x3x8x8xui8>, %xs: tensor<f32>, %xz: tensor<i32>, %w: tensor<4x3x3x3xi8>, %ws: tensor<4xf32>, %wz: tensor<4xi32>, %b: tensor<4xi32>, %ys: tensor<f32>, %yz: tensor<i32>) {
  // expected-error @+1 {{'kiln.qconv2d' op input channels 8 differ from weight channels 3 x groups 1}}
  %0 = kiln.qconv2d %x, %xs, %xz, %w, %ws, %wz, %b, %ys, %yz {channels_last = true, dilation = array<i64: 1, 1>, dtype = 5 : i64, groups = 1 : i64, padding = array<i64: 0, 0>, relu = true, stride = array<i64: 1, 1>} : (tensor<1x3x8x8xui8>, tensor<f32>, tensor<i32>, tensor<4x3x3x3xi8>, tensor<4xf32>, tensor<4xi32>, tensor<4xi32>, tensor<f32>, tensor<i32>) -> tensor<1x1x6x4xui8>
  return
}
