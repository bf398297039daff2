// A conv's elementwise chain marked kiln.block_epilogue (--kiln-fuse-block-epilogues) becomes a
// function the runtime's conv calls on each block of output it finishes: one call, no kernel of
// its own, no buffer for the conv's value (the chain maps it in place). The function walks each
// row of the block as runs of the output's flat indices over the innermost dim the operands
// share (here the width: the [6] operand broadcasts over rows), the outer indices divided out.
// RUN: kiln-opt --kiln-fuse-block-epilogues --kiln-lower-to-loops %s | FileCheck %s
// RUN: kiln-opt --kiln-lower-to-loops %s | FileCheck %s --check-prefix=SEPARATE
// RUN: kiln-opt --kiln-fuse-block-epilogues --kiln-lower-to-vectors=vector-bits=512 %s | FileCheck %s --check-prefix=VEC

// CHECK-LABEL: func.func @kiln_entry
// CHECK: %[[OUT:.*]] = llvm.load
// CHECK: %[[FN:.*]] = constant @kiln_epilogue_[[N:[0-9]+]]
// CHECK: %[[PTR:.*]] = builtin.unrealized_conversion_cast %[[FN]]
// CHECK: call @kiln_abi_conv2d_epilogue(%{{.*}}, %{{.*}}, %{{.*}}, %[[PTR]], %{{.*}})
// CHECK-NOT: call @kiln_kernel_
// CHECK: return
// CHECK: func.func private @kiln_epilogue_[[N]](%{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i64)
// CHECK: scf.for
// CHECK: scf.while
// CHECK: arith.remsi
// CHECK: arith.divsi
// CHECK: scf.for
// CHECK: llvm.load
// CHECK: arith.mulf
// CHECK: llvm.store

// With a vector width each run is a vector map: whole tiles, then a masked remainder; the
// per-channel scale (constant along the run) is broadcast.
// VEC-LABEL: func.func private @kiln_epilogue_
// VEC: scf.while
// VEC: scf.for
// VEC: vector.transfer_read {{.*}} vector<64xf32>
// VEC: vector.broadcast {{.*}} vector<64xf32>
// VEC: vector.transfer_write
// VEC: scf.for
// VEC: vector.create_mask
// VEC: vector.transfer_write

// Without the pass: the conv into a buffer of its own, then the chain's kernel.
// SEPARATE-LABEL: func.func @kiln_entry
// SEPARATE: call @kiln_abi_conv2d(
// SEPARATE: call @kiln_kernel_
func.func @forward(%x: tensor<1x2x6x6xf32>, %w: tensor<4x2x3x3xf32>, %b: tensor<4xf32>, %r: tensor<1x4x6x6xf32>, %s: tensor<4x1x1xf32>, %row: tensor<6xf32>) -> tensor<1x4x6x6xf32> {
  %0 = kiln.conv2d %x, %w, %b {dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 1, 1>, stride = array<i64: 1, 1>} : (tensor<1x2x6x6xf32>, tensor<4x2x3x3xf32>, tensor<4xf32>) -> tensor<1x4x6x6xf32>
  %1 = kiln.fused(%0, %s, %r, %row) : (tensor<1x4x6x6xf32>, tensor<4x1x1xf32>, tensor<1x4x6x6xf32>, tensor<6xf32>) -> tensor<1x4x6x6xf32> {
  ^bb0(%y: tensor<1x4x6x6xf32>, %sc: tensor<4x1x1xf32>, %res: tensor<1x4x6x6xf32>, %rw: tensor<6xf32>):
    %2 = kiln.mul %y, %sc : tensor<1x4x6x6xf32>, tensor<4x1x1xf32>
    %3 = kiln.add %2, %res : tensor<1x4x6x6xf32>, tensor<1x4x6x6xf32>
    %4 = kiln.sigmoid %y : tensor<1x4x6x6xf32> -> tensor<1x4x6x6xf32>
    %5 = kiln.mul %3, %4 : tensor<1x4x6x6xf32>, tensor<1x4x6x6xf32>
    %6 = kiln.add %5, %rw : tensor<1x4x6x6xf32>, tensor<6xf32>
    kiln.yield %6 : tensor<1x4x6x6xf32>
  }
  return %1 : tensor<1x4x6x6xf32>
}
