// A shape whose byte count overflows int64 (a user's file can say anything) is refused before
// any stride or size arithmetic, naming the argument and the op.
// RUN: not kiln-opt --kiln-lower-to-llvm %s 2>&1 | FileCheck %s

// CHECK: cannot compile @forward: argument 0 has more bytes than int64 can count
// CHECK: cannot compile 'kiln.exp' (op #0 of @forward{{.*}}): a result has more bytes than int64 can count
func.func @forward(%x: tensor<4611686018427387904x4xf32>) -> tensor<4611686018427387904x4xf32> {
  %0 = kiln.exp %x : tensor<4611686018427387904x4xf32> -> tensor<4611686018427387904x4xf32>
  return %0 : tensor<4611686018427387904x4xf32>
}
