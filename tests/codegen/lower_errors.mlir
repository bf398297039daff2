// An op without a lowering fails at compile time, naming the op and its position in @forward:
// every such op, not only the first.
// RUN: not kiln-opt --kiln-lower-to-llvm %s 2>&1 | FileCheck %s

// CHECK: cannot compile 'kiln.to' (op #0 of @forward{{.*}}): element type f16 is not supported
// CHECK: cannot compile 'kiln.exp' (op #1 of @forward{{.*}}): element type f16 is not supported
func.func @forward(%x: tensor<4xf32>) -> tensor<4xf16> {
  %0 = kiln.to %x {dtype = 2 : i64} : (tensor<4xf32>) -> tensor<4xf16>
  %1 = kiln.exp %0 : tensor<4xf16> -> tensor<4xf16>
  return %1 : tensor<4xf16>
}
