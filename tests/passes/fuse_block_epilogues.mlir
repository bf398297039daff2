// RUN: kiln-opt %s --kiln-fuse-block-epilogues | FileCheck %s

// A conv followed by a 4-op chain (the conv's value read twice, a per-channel scale, a residual)
// that no fixed epilogue takes: the chain is marked to run as the conv's block epilogue, and the
// conv moves down to just before it, after the residual's producer.
// CHECK-LABEL: func.func @conv_chain
// CHECK: %[[R:.*]] = kiln.exp %arg3
// CHECK-NEXT: %[[C:.*]] = kiln.conv2d %arg0, %arg1, %arg2
// CHECK-NEXT: %[[F:.*]] = kiln.fused(%[[C]], %arg4, %[[R]]) {kiln.block_epilogue}
// CHECK: return %[[F]]
func.func @conv_chain(%x: tensor<1x2x6x6xf32>, %w: tensor<4x2x3x3xf32>, %b: tensor<4xf32>, %r0: tensor<1x4x6x6xf32>, %s: tensor<4x1x1xf32>) -> tensor<1x4x6x6xf32> {
  %0 = kiln.conv2d %x, %w, %b {dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 1, 1>, stride = array<i64: 1, 1>} : (tensor<1x2x6x6xf32>, tensor<4x2x3x3xf32>, tensor<4xf32>) -> tensor<1x4x6x6xf32>
  %r = kiln.exp %r0 : tensor<1x4x6x6xf32> -> tensor<1x4x6x6xf32>
  %1 = kiln.fused(%0, %s, %r) : (tensor<1x4x6x6xf32>, tensor<4x1x1xf32>, tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32> {
  ^bb0(%y: tensor<1x4x6x6xf32>, %sc: tensor<4x1x1xf32>, %res: tensor<1x4x6x6xf32>):
    %2 = kiln.mul %y, %sc : tensor<1x4x6x6xf32>, tensor<4x1x1xf32>
    %3 = kiln.add %2, %res : tensor<1x4x6x6xf32>, tensor<1x4x6x6xf32>
    %4 = kiln.sigmoid %y : tensor<1x4x6x6xf32> -> tensor<1x4x6x6xf32>
    %5 = kiln.mul %3, %4 : tensor<1x4x6x6xf32>, tensor<1x4x6x6xf32>
    kiln.yield %5 : tensor<1x4x6x6xf32>
  }
  return %1 : tensor<1x4x6x6xf32>
}

// A single elementwise op after a linear becomes a one-op kiln.fused, marked.
// CHECK-LABEL: func.func @linear_single_op
// CHECK: %[[L:.*]] = kiln.linear_fused
// CHECK-NEXT: %[[F:.*]] = kiln.fused(%[[L]]) {kiln.block_epilogue}
// CHECK-NEXT: ^bb0(%[[A:.*]]: tensor<3x8xf32>):
// CHECK-NEXT: kiln.leaky_relu %[[A]]
// CHECK: return %[[F]]
func.func @linear_single_op(%x: tensor<3x5xf32>, %w: tensor<8x5xf32>, %b: tensor<8xf32>) -> tensor<3x8xf32> {
  %n = kiln.none
  %0 = kiln.linear_fused %x, %w, %b, %n {activation = 1 : i64, clamp_min = 0.0 : f64, clamp_max = 0.0 : f64} : (tensor<3x5xf32>, tensor<8x5xf32>, tensor<8xf32>, none) -> tensor<3x8xf32>
  %1 = kiln.leaky_relu %0 {negative_slope = 0.1 : f64} : (tensor<3x8xf32>) -> tensor<3x8xf32>
  return %1 : tensor<3x8xf32>
}

// A batched matmul's chain (soft-capping its scores) is marked the same way.
// CHECK-LABEL: func.func @batched_matmul_chain
// CHECK: %[[M:.*]] = kiln.matmul %arg0, %arg1
// CHECK-NEXT: %[[F:.*]] = kiln.fused(%[[M]], %{{.*}}) {kiln.block_epilogue}
// CHECK: return %[[F]]
func.func @batched_matmul_chain(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32> {
  %c = kiln.constant dense<30.0> : tensor<f32> : tensor<f32>
  %0 = kiln.matmul %q, %k : tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>
  %1 = kiln.fused(%0, %c) : (tensor<2x4x8x8xf32>, tensor<f32>) -> tensor<2x4x8x8xf32> {
  ^bb0(%y: tensor<2x4x8x8xf32>, %s: tensor<f32>):
    %2 = kiln.div %y, %s : tensor<2x4x8x8xf32>, tensor<f32>
    %3 = kiln.tanh %2 : tensor<2x4x8x8xf32> -> tensor<2x4x8x8xf32>
    %4 = kiln.mul %3, %s : tensor<2x4x8x8xf32>, tensor<f32>
    kiln.yield %4 : tensor<2x4x8x8xf32>
  }
  return %1 : tensor<2x4x8x8xf32>
}

// A dot product's chain is left alone: a rank-0 value has no blocks.
// CHECK-LABEL: func.func @dot_chain
// CHECK-NOT: kiln.block_epilogue
// CHECK: return
func.func @dot_chain(%a: tensor<16xf32>, %b: tensor<16xf32>) -> tensor<f32> {
  %0 = kiln.matmul %a, %b : tensor<16xf32>, tensor<16xf32>
  %1 = kiln.exp %0 : tensor<f32> -> tensor<f32>
  return %1 : tensor<f32>
}

// A product whose value is also returned: the chain is still marked (code generation then has it
// write its own buffer from each block, the product's value stored as well).
// CHECK-LABEL: func.func @shared_value
// CHECK: %[[L:.*]] = kiln.linear
// CHECK-NEXT: %[[F:.*]] = kiln.fused(%[[L]]) {kiln.block_epilogue}
// CHECK: return %[[L]], %[[F]]
func.func @shared_value(%x: tensor<3x5xf32>, %w: tensor<8x5xf32>, %b: tensor<8xf32>) -> (tensor<3x8xf32>, tensor<3x8xf32>) {
  %0 = kiln.linear %x, %w, %b : (tensor<3x5xf32>, tensor<8x5xf32>, tensor<8xf32>) -> tensor<3x8xf32>
  %1 = kiln.tanh %0 : tensor<3x8xf32> -> tensor<3x8xf32>
  return %0, %1 : tensor<3x8xf32>, tensor<3x8xf32>
}

// Left alone: a product whose value another op reads before the chain, a shared value whose chain
// only feeds the next linear (that linear's prologue instead), a chain that broadcasts the product
// into a larger shape, a chain of another element type, and float64.
// CHECK-LABEL: func.func @not_taken
// CHECK-NOT: kiln.block_epilogue
// CHECK: return
func.func @not_taken(%x: tensor<3x5xf32>, %w: tensor<8x5xf32>, %b: tensor<8xf32>, %big: tensor<2x3x8xf32>, %xd: tensor<3x5xf64>, %wd: tensor<8x5xf64>, %w8: tensor<8x8xf32>) -> (tensor<3x8xf32>, tensor<3x8xf32>, tensor<2x3x8xf32>, tensor<3x8xi1>, tensor<3x8xf64>, tensor<3x8xf32>, tensor<3x8xf32>, tensor<3x8xf32>) {
  %n = kiln.none
  %0 = kiln.linear %x, %w, %b : (tensor<3x5xf32>, tensor<8x5xf32>, tensor<8xf32>) -> tensor<3x8xf32>
  %r = kiln.linear %0, %w8, %n : (tensor<3x8xf32>, tensor<8x8xf32>, none) -> tensor<3x8xf32>
  %1 = kiln.tanh %0 : tensor<3x8xf32> -> tensor<3x8xf32>
  %p = kiln.linear %x, %w, %n : (tensor<3x5xf32>, tensor<8x5xf32>, none) -> tensor<3x8xf32>
  %q = kiln.sigmoid %p : tensor<3x8xf32> -> tensor<3x8xf32>
  %pq = kiln.linear %q, %w8, %n : (tensor<3x8xf32>, tensor<8x8xf32>, none) -> tensor<3x8xf32>
  %2 = kiln.linear %x, %w, %n : (tensor<3x5xf32>, tensor<8x5xf32>, none) -> tensor<3x8xf32>
  %3 = kiln.add %2, %big : tensor<3x8xf32>, tensor<2x3x8xf32>
  %4 = kiln.linear %x, %w, %n : (tensor<3x5xf32>, tensor<8x5xf32>, none) -> tensor<3x8xf32>
  %5 = kiln.gt %4, %b : tensor<3x8xf32>, tensor<8xf32>
  %6 = kiln.linear %xd, %wd, %n : (tensor<3x5xf64>, tensor<8x5xf64>, none) -> tensor<3x8xf64>
  %7 = kiln.exp %6 : tensor<3x8xf64> -> tensor<3x8xf64>
  return %0, %1, %3, %5, %7, %r, %p, %pq : tensor<3x8xf32>, tensor<3x8xf32>, tensor<2x3x8xf32>, tensor<3x8xi1>, tensor<3x8xf64>, tensor<3x8xf32>, tensor<3x8xf32>, tensor<3x8xf32>
}
