// RUN: kiln-opt %s --kiln-fuse-attention | FileCheck %s

// torch.nn.MultiheadAttention as traced: q, k, v transposed from (L, N * H, hd) to batch-major,
// the query divided by sqrt(hd), the key transposed for the product, the output transposed back.
// One kiln.attention on the untransposed values (seq_first), scale 1/8; every op of the chain
// gone (the scale's constant is left to --kiln-cleanup), the result typed as the final transpose's.
// CHECK-LABEL: func.func @multihead_layout
// CHECK-NOT: kiln.transpose
// CHECK: %[[NONE:.*]] = kiln.none
// CHECK-NEXT: %[[A:.*]] = kiln.attention %arg0, %arg1, %arg2, %[[NONE]] {scale = 1.250000e-01 : f64, seq_first = true} : (tensor<16x4x8xf32>, tensor<16x4x8xf32>, tensor<16x4x8xf32>, none) -> tensor<16x4x8xf32>
// CHECK-NEXT: return %[[A]]
func.func @multihead_layout(%q: tensor<16x4x8xf32>, %k: tensor<16x4x8xf32>, %v: tensor<16x4x8xf32>) -> tensor<16x4x8xf32> {
  %c = kiln.constant dense<8.0> : tensor<f32> : tensor<f32>
  %qt = kiln.transpose %q {dim0 = 0 : i64, dim1 = 1 : i64} : (tensor<16x4x8xf32>) -> tensor<4x16x8xf32>
  %kt = kiln.transpose %k {dim0 = 0 : i64, dim1 = 1 : i64} : (tensor<16x4x8xf32>) -> tensor<4x16x8xf32>
  %vt = kiln.transpose %v {dim0 = 0 : i64, dim1 = 1 : i64} : (tensor<16x4x8xf32>) -> tensor<4x16x8xf32>
  %ktt = kiln.transpose %kt {dim0 = 1 : i64, dim1 = 2 : i64} : (tensor<4x16x8xf32>) -> tensor<4x8x16xf32>
  %qs = kiln.div %qt, %c : tensor<4x16x8xf32>, tensor<f32>
  %s = kiln.matmul %qs, %ktt : tensor<4x16x8xf32>, tensor<4x8x16xf32>
  %p = kiln.softmax %s {dim = -1 : i64} : (tensor<4x16x16xf32>) -> tensor<4x16x16xf32>
  %o = kiln.matmul %p, %vt : tensor<4x16x16xf32>, tensor<4x16x8xf32>
  %ot = kiln.transpose %o {dim0 = 0 : i64, dim1 = 1 : i64} : (tensor<4x16x8xf32>) -> tensor<16x4x8xf32>
  return %ot : tensor<16x4x8xf32>
}

// Batch-major operands, the scores scaled by a multiplication after the product, an additive
// mask [L, S] broadcast over the batches, the key transposed by kiln.permute: batch-major
// attention with the mask as its fourth operand.
// CHECK-LABEL: func.func @masked
// CHECK-NOT: kiln.matmul
// CHECK: %[[A:.*]] = kiln.attention %arg0, %arg1, %arg2, %arg3 {scale = 2.500000e-01 : f64, seq_first = false} : (tensor<2x5x8xf32>, tensor<2x7x8xf32>, tensor<2x7x3xf32>, tensor<5x7xf32>) -> tensor<2x5x3xf32>
// CHECK-NEXT: return %[[A]]
func.func @masked(%q: tensor<2x5x8xf32>, %k: tensor<2x7x8xf32>, %v: tensor<2x7x3xf32>, %m: tensor<5x7xf32>) -> tensor<2x5x3xf32> {
  %c = kiln.constant dense<0.25> : tensor<f32> : tensor<f32>
  %kt = kiln.permute %k {dims = array<i64: 0, 2, 1>} : (tensor<2x7x8xf32>) -> tensor<2x8x7xf32>
  %s = kiln.matmul %q, %kt : tensor<2x5x8xf32>, tensor<2x8x7xf32>
  %ss = kiln.mul %c, %s : tensor<f32>, tensor<2x5x7xf32>
  %sm = kiln.add %m, %ss : tensor<5x7xf32>, tensor<2x5x7xf32>
  %p = kiln.softmax %sm {dim = 2 : i64} : (tensor<2x5x7xf32>) -> tensor<2x5x7xf32>
  %o = kiln.matmul %p, %v : tensor<2x5x7xf32>, tensor<2x7x3xf32>
  return %o : tensor<2x5x3xf32>
}

// Only some operands transposed from a sequence-first layout: batch-major attention on the
// transposes (which stay), no scale.
// CHECK-LABEL: func.func @partly_sequence_first
// CHECK: %[[QT:.*]] = kiln.transpose %arg0
// CHECK: kiln.attention %[[QT]], %arg1, %arg2, %{{.*}} {scale = 1.000000e+00 : f64, seq_first = false}
// CHECK-NOT: kiln.softmax
func.func @partly_sequence_first(%q: tensor<6x2x4xf32>, %k: tensor<2x6x4xf32>, %v: tensor<2x6x4xf32>) -> tensor<2x6x4xf32> {
  %qt = kiln.transpose %q {dim0 = 0 : i64, dim1 = 1 : i64} : (tensor<6x2x4xf32>) -> tensor<2x6x4xf32>
  %kt = kiln.transpose %k {dim0 = -1 : i64, dim1 = -2 : i64} : (tensor<2x6x4xf32>) -> tensor<2x4x6xf32>
  %s = kiln.matmul %qt, %kt : tensor<2x6x4xf32>, tensor<2x4x6xf32>
  %p = kiln.softmax %s {dim = -1 : i64} : (tensor<2x6x6xf32>) -> tensor<2x6x6xf32>
  %o = kiln.matmul %p, %v : tensor<2x6x6xf32>, tensor<2x6x4xf32>
  return %o : tensor<2x6x4xf32>
}

// Left alone: attention weights also returned (need_weights), a softmax over another dim, a key
// that is not a transpose, a scale tensor that is not one element, float64.
// CHECK-LABEL: func.func @not_fused
// CHECK-NOT: kiln.attention
// CHECK-COUNT-5: kiln.softmax
// CHECK-NOT: kiln.attention
func.func @not_fused(%q: tensor<2x4x4xf32>, %k: tensor<2x4x4xf32>, %v: tensor<2x4x4xf32>, %c: tensor<4xf32>, %qd: tensor<2x4x4xf64>) -> (tensor<2x4x4xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf64>) {
  %kt = kiln.transpose %k {dim0 = 1 : i64, dim1 = 2 : i64} : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %s0 = kiln.matmul %q, %kt : tensor<2x4x4xf32>, tensor<2x4x4xf32>
  %p0 = kiln.softmax %s0 {dim = -1 : i64} : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %o0 = kiln.matmul %p0, %v : tensor<2x4x4xf32>, tensor<2x4x4xf32>
  %kt1 = kiln.transpose %k {dim0 = 1 : i64, dim1 = 2 : i64} : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %s1 = kiln.matmul %q, %kt1 : tensor<2x4x4xf32>, tensor<2x4x4xf32>
  %p1 = kiln.softmax %s1 {dim = 1 : i64} : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %o1 = kiln.matmul %p1, %v : tensor<2x4x4xf32>, tensor<2x4x4xf32>
  %s2 = kiln.matmul %q, %k : tensor<2x4x4xf32>, tensor<2x4x4xf32>
  %p2 = kiln.softmax %s2 {dim = -1 : i64} : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %o2 = kiln.matmul %p2, %v : tensor<2x4x4xf32>, tensor<2x4x4xf32>
  %kt3 = kiln.transpose %k {dim0 = 1 : i64, dim1 = 2 : i64} : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %s3 = kiln.matmul %q, %kt3 : tensor<2x4x4xf32>, tensor<2x4x4xf32>
  %s3c = kiln.mul %s3, %c : tensor<2x4x4xf32>, tensor<4xf32>
  %p3 = kiln.softmax %s3c {dim = -1 : i64} : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %o3 = kiln.matmul %p3, %v : tensor<2x4x4xf32>, tensor<2x4x4xf32>
  %qdt = kiln.transpose %qd {dim0 = 1 : i64, dim1 = 2 : i64} : (tensor<2x4x4xf64>) -> tensor<2x4x4xf64>
  %s4 = kiln.matmul %qd, %qdt : tensor<2x4x4xf64>, tensor<2x4x4xf64>
  %p4 = kiln.softmax %s4 {dim = -1 : i64} : (tensor<2x4x4xf64>) -> tensor<2x4x4xf64>
  %o4 = kiln.matmul %p4, %qd : tensor<2x4x4xf64>, tensor<2x4x4xf64>
  return %o0, %p0, %o1, %o2, %o3, %o4 : tensor<2x4x4xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf64>
}

// ONNX's export of MultiheadAttention: the key permuted from (S, N * H, hd) straight to
// (N * H, hd, S), the others by perm [1, 0, 2]: sequence-first attention on the permutes' inputs.
// CHECK-LABEL: func.func @onnx_layout
// CHECK-NOT: kiln.permute
// CHECK: kiln.attention %arg0, %arg1, %arg2, %{{.*}} {scale = 1.250000e-01 : f64, seq_first = true} : (tensor<16x4x8xf32>, tensor<16x4x8xf32>, tensor<16x4x8xf32>, none) -> tensor<16x4x8xf32>
// CHECK-NOT: kiln.permute
func.func @onnx_layout(%q: tensor<16x4x8xf32>, %k: tensor<16x4x8xf32>, %v: tensor<16x4x8xf32>) -> tensor<16x4x8xf32> {
  %c = kiln.constant dense<8.0> : tensor<f32> : tensor<f32>
  %qt = kiln.permute %q {dims = array<i64: 1, 0, 2>} : (tensor<16x4x8xf32>) -> tensor<4x16x8xf32>
  %qs = kiln.div %qt, %c : tensor<4x16x8xf32>, tensor<f32>
  %kt = kiln.permute %k {dims = array<i64: 1, 2, 0>} : (tensor<16x4x8xf32>) -> tensor<4x8x16xf32>
  %vt = kiln.permute %v {dims = array<i64: 1, 0, 2>} : (tensor<16x4x8xf32>) -> tensor<4x16x8xf32>
  %s = kiln.matmul %qs, %kt : tensor<4x16x8xf32>, tensor<4x8x16xf32>
  %p = kiln.softmax %s {dim = -1 : i64} : (tensor<4x16x16xf32>) -> tensor<4x16x16xf32>
  %o = kiln.matmul %p, %vt : tensor<4x16x16xf32>, tensor<4x16x8xf32>
  %ot = kiln.permute %o {dims = array<i64: 1, 0, 2>} : (tensor<4x16x8xf32>) -> tensor<16x4x8xf32>
  return %ot : tensor<16x4x8xf32>
}

// The same key among batch-major query and value: transposed to batch-major for the op.
// CHECK-LABEL: func.func @sequence_first_key_only
// CHECK: %[[K:.*]] = kiln.transpose %arg1 {dim0 = 0 : i64, dim1 = 1 : i64}
// CHECK: kiln.attention %arg0, %[[K]], %arg2, %{{.*}} {scale = 1.000000e+00 : f64, seq_first = false}
func.func @sequence_first_key_only(%q: tensor<4x16x8xf32>, %k: tensor<16x4x8xf32>, %v: tensor<4x16x8xf32>) -> tensor<4x16x8xf32> {
  %kt = kiln.permute %k {dims = array<i64: 1, 2, 0>} : (tensor<16x4x8xf32>) -> tensor<4x8x16xf32>
  %s = kiln.matmul %q, %kt : tensor<4x16x8xf32>, tensor<4x8x16xf32>
  %p = kiln.softmax %s {dim = -1 : i64} : (tensor<4x16x16xf32>) -> tensor<4x16x16xf32>
  %o = kiln.matmul %p, %v : tensor<4x16x16xf32>, tensor<4x16x8xf32>
  return %o : tensor<4x16x8xf32>
}

// Four dims, as BERT-style exports give it: [B, L, H, D] projections reshaped, heads transposed
// out (perm [0, 2, 1, 3]), the key straight to [B, H, D, S] (perm [0, 2, 3, 1]), a [B, 1, 1, S]
// padding mask: sequence-first attention on the reshaped values, the mask as given.
// CHECK-LABEL: func.func @four_dims
// CHECK-NOT: kiln.permute
// CHECK: kiln.attention %arg0, %arg1, %arg2, %arg3 {scale = 1.250000e-01 : f64, seq_first = true} : (tensor<2x16x4x8xf32>, tensor<2x16x4x8xf32>, tensor<2x16x4x8xf32>, tensor<2x1x1x16xf32>) -> tensor<2x16x4x8xf32>
// CHECK-NOT: kiln.permute
func.func @four_dims(%q: tensor<2x16x4x8xf32>, %k: tensor<2x16x4x8xf32>, %v: tensor<2x16x4x8xf32>, %m: tensor<2x1x1x16xf32>) -> tensor<2x16x4x8xf32> {
  %c = kiln.constant dense<8.0> : tensor<f32> : tensor<f32>
  %qt = kiln.permute %q {dims = array<i64: 0, 2, 1, 3>} : (tensor<2x16x4x8xf32>) -> tensor<2x4x16x8xf32>
  %kt = kiln.permute %k {dims = array<i64: 0, 2, 3, 1>} : (tensor<2x16x4x8xf32>) -> tensor<2x4x8x16xf32>
  %vt = kiln.permute %v {dims = array<i64: 0, 2, 1, 3>} : (tensor<2x16x4x8xf32>) -> tensor<2x4x16x8xf32>
  %s = kiln.matmul %qt, %kt : tensor<2x4x16x8xf32>, tensor<2x4x8x16xf32>
  %ss = kiln.div %s, %c : tensor<2x4x16x16xf32>, tensor<f32>
  %sm = kiln.add %ss, %m : tensor<2x4x16x16xf32>, tensor<2x1x1x16xf32>
  %p = kiln.softmax %sm {dim = 3 : i64} : (tensor<2x4x16x16xf32>) -> tensor<2x4x16x16xf32>
  %o = kiln.matmul %p, %vt : tensor<2x4x16x16xf32>, tensor<2x4x16x8xf32>
  %ot = kiln.transpose %o {dim0 = 1 : i64, dim1 = 2 : i64} : (tensor<2x4x16x8xf32>) -> tensor<2x16x4x8xf32>
  return %ot : tensor<2x16x4x8xf32>
}
