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

func.func @rank(%a: tensor<3xf32>, %b: tensor<3x5xf32>) {
  // expected-error @+1 {{kiln.matmul: expected operands of rank >= 2}}
  %0 = kiln.matmul %a, %b : tensor<3xf32>, tensor<3x5xf32>
  return
}
