// RUN: kiln-opt %s --kiln-recognize-gelu | FileCheck %s

// PyTorch's ONNX export of nn.GELU (opset < 20): Div by sqrt(2), Erf, Add 1, Mul x, Mul 0.5.
// CHECK-LABEL: func.func @onnx_export
// CHECK-NOT: kiln.erf
// CHECK: %[[G:.*]] = kiln.gelu %arg0 {approximate = false} : (tensor<2x8xf32>) -> tensor<2x8xf32>
// CHECK-NOT: kiln.erf
// CHECK: return %[[G]]
func.func @onnx_export(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %s2 = kiln.constant dense<1.41421354> : tensor<f32> : tensor<f32>
  %one = kiln.constant dense<1.0> : tensor<f32> : tensor<f32>
  %half = kiln.constant dense<0.5> : tensor<f32> : tensor<f32>
  %0 = kiln.div %x, %s2 : tensor<2x8xf32>, tensor<f32>
  %1 = kiln.erf %0 : tensor<2x8xf32> -> tensor<2x8xf32>
  %2 = kiln.add %1, %one : tensor<2x8xf32>, tensor<f32>
  %3 = kiln.mul %x, %2 : tensor<2x8xf32>, tensor<2x8xf32>
  %4 = kiln.mul %3, %half : tensor<2x8xf32>, tensor<f32>
  return %4 : tensor<2x8xf32>
}

// The other grouping and order: 0.5 * x first, the inner scale as a product by 1/sqrt(2), the
// add with the constant first.
// CHECK-LABEL: func.func @regrouped
// CHECK: kiln.gelu %arg0
// CHECK-NOT: kiln.mul
func.func @regrouped(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = kiln.constant dense<0.707106769> : tensor<f32> : tensor<f32>
  %one = kiln.constant dense<1.0> : tensor<f32> : tensor<f32>
  %half = kiln.constant dense<0.5> : tensor<f32> : tensor<f32>
  %h = kiln.mul %half, %x : tensor<f32>, tensor<4xf32>
  %0 = kiln.mul %r, %x : tensor<f32>, tensor<4xf32>
  %1 = kiln.erf %0 : tensor<4xf32> -> tensor<4xf32>
  %2 = kiln.add %one, %1 : tensor<f32>, tensor<4xf32>
  %3 = kiln.mul %h, %2 : tensor<4xf32>, tensor<4xf32>
  return %3 : tensor<4xf32>
}

// Left alone: another constant (0.6), erf of another value, an intermediate also returned.
// CHECK-LABEL: func.func @not_gelu
// CHECK-NOT: kiln.gelu
func.func @not_gelu(%x: tensor<4xf32>, %y: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %s2 = kiln.constant dense<1.41421354> : tensor<f32> : tensor<f32>
  %one = kiln.constant dense<1.0> : tensor<f32> : tensor<f32>
  %half = kiln.constant dense<0.5> : tensor<f32> : tensor<f32>
  %six = kiln.constant dense<0.6> : tensor<f32> : tensor<f32>
  %a0 = kiln.div %x, %s2 : tensor<4xf32>, tensor<f32>
  %a1 = kiln.erf %a0 : tensor<4xf32> -> tensor<4xf32>
  %a2 = kiln.add %a1, %one : tensor<4xf32>, tensor<f32>
  %a3 = kiln.mul %x, %a2 : tensor<4xf32>, tensor<4xf32>
  %a4 = kiln.mul %a3, %six : tensor<4xf32>, tensor<f32>
  %b0 = kiln.div %y, %s2 : tensor<4xf32>, tensor<f32>
  %b1 = kiln.erf %b0 : tensor<4xf32> -> tensor<4xf32>
  %b2 = kiln.add %b1, %one : tensor<4xf32>, tensor<f32>
  %b3 = kiln.mul %x, %b2 : tensor<4xf32>, tensor<4xf32>
  %b4 = kiln.mul %b3, %half : tensor<4xf32>, tensor<f32>
  %c0 = kiln.div %x, %s2 : tensor<4xf32>, tensor<f32>
  %c1 = kiln.erf %c0 : tensor<4xf32> -> tensor<4xf32>
  %c2 = kiln.add %c1, %one : tensor<4xf32>, tensor<f32>
  %c3 = kiln.mul %x, %c2 : tensor<4xf32>, tensor<4xf32>
  %c4 = kiln.mul %c3, %half : tensor<4xf32>, tensor<f32>
  return %a4, %b4, %c4, %c2 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}
