// RUN: kiln-opt %s --kiln-plan-memory | FileCheck %s

// x and y (256 bytes each) are inputs: x at 0, y at 256. add's x dies there, so the sum takes
// x's bytes; exp takes y's; mul takes the sum's; the view aliases the product. Nothing else is
// allocated: arena 512 bytes; without reuse, 6 values of 256 bytes.
// CHECK-LABEL: func.func @inplace_chain
// CHECK-SAME: kiln.arena_bytes = 512
// CHECK-SAME: kiln.arg_offsets = array<i64: 0, 256>
// CHECK-SAME: kiln.naive_bytes = 1536
// CHECK: kiln.add {{.*}}kiln.arena_offsets = array<i64: 0>
// CHECK: kiln.exp {{.*}}kiln.arena_offsets = array<i64: 256>
// CHECK: kiln.mul {{.*}}kiln.arena_offsets = array<i64: 0>
// CHECK: kiln.view {{.*}}kiln.arena_offsets = array<i64: 0>
func.func @inplace_chain(%x: tensor<64xf32>, %y: tensor<64xf32>) -> (tensor<64xf32>, tensor<8x8xf32>)
    attributes {kiln.num_inputs = 2 : i64} {
  %0 = kiln.add %x, %y : tensor<64xf32>, tensor<64xf32>
  %1 = kiln.exp %y : tensor<64xf32> -> tensor<64xf32>
  %2 = kiln.mul %0, %1 : tensor<64xf32>, tensor<64xf32>
  %3 = kiln.view %2 {shape = array<i64: 8, 8>} : (tensor<64xf32>) -> tensor<8x8xf32>
  return %2, %3 : tensor<64xf32>, tensor<8x8xf32>
}

// linear is not elementwise: its result may not overwrite x even though x dies there. The weight
// (argument after kiln.num_inputs) is not an arena value (-1).
// CHECK-LABEL: func.func @no_inplace_for_linear
// CHECK-SAME: kiln.arena_bytes = 128
// CHECK-SAME: kiln.arg_offsets = array<i64: 0, -1>
// CHECK: kiln.linear {{.*}}kiln.arena_offsets = array<i64: 64>
func.func @no_inplace_for_linear(%x: tensor<1x4xf32>, %w: tensor<4x4xf32>) -> tensor<1x4xf32>
    attributes {kiln.num_inputs = 1 : i64} {
  %none = kiln.none
  %0 = kiln.linear %x, %w, %none : (tensor<1x4xf32>, tensor<4x4xf32>, none) -> tensor<1x4xf32>
  return %0 : tensor<1x4xf32>
}

// Greedy by size with liveness: b (2048 B) and c (2048 B) meet at softmax (which never runs in
// place), so they take [0, 2048) and [2048, 4096); the input a (1024 B) is dead before c exists and
// shares c's bytes. Arena 4096 instead of 5120.
// CHECK-LABEL: func.func @reuse_after_death
// CHECK-SAME: kiln.arena_bytes = 4096
// CHECK-SAME: kiln.arg_offsets = array<i64: 2048>
// CHECK-SAME: kiln.naive_bytes = 5120
// CHECK: kiln.cat {{.*}}kiln.arena_offsets = array<i64: 0>
// CHECK: kiln.softmax {{.*}}kiln.arena_offsets = array<i64: 2048>
func.func @reuse_after_death(%a: tensor<256xf32>) -> tensor<512xf32>
    attributes {kiln.num_inputs = 1 : i64} {
  %b = kiln.cat %a, %a {dim = 0 : i64} : (tensor<256xf32>, tensor<256xf32>) -> tensor<512xf32>
  %c = kiln.softmax %b {dim = 0 : i64} : (tensor<512xf32>) -> tensor<512xf32>
  return %c : tensor<512xf32>
}

// A predicate extracted once and read by two scf.ifs: the runtime reads it from the tensor's
// buffer at each If, so %p stays live through the second one. x takes 0, z 256; the first If's
// result takes z's bytes (z dies at gt) and %p may not sit inside it (320 if its life ended at
// the extract); the second If's result takes x's.
// CHECK-LABEL: func.func @predicate_read_by_two_ifs
// CHECK: kiln.gt {{.*}}kiln.arena_offsets = array<i64: 512>
// CHECK: scf.if
// CHECK: kiln.arena_offsets = array<i64: 256>
// CHECK: scf.if
// CHECK: kiln.arena_offsets = array<i64: 0>
func.func @predicate_read_by_two_ifs(%x: tensor<64xf32>, %z: tensor<f32>) -> (tensor<64xf32>, tensor<64xf32>)
    attributes {kiln.num_inputs = 2 : i64} {
  %p = kiln.gt %z, %z : tensor<f32>, tensor<f32>
  %b = tensor.extract %p[] : tensor<i1>
  %0 = scf.if %b -> (tensor<64xf32>) {
    %e = kiln.exp %x : tensor<64xf32> -> tensor<64xf32>
    scf.yield %e : tensor<64xf32>
  } else {
    scf.yield %x : tensor<64xf32>
  }
  %1 = scf.if %b -> (tensor<64xf32>) {
    %n = kiln.neg %0 : tensor<64xf32> -> tensor<64xf32>
    scf.yield %n : tensor<64xf32>
  } else {
    scf.yield %0 : tensor<64xf32>
  }
  return %0, %1 : tensor<64xf32>, tensor<64xf32>
}
