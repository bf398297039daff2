// RUN: kiln-opt %s --kiln-cleanup --kiln-fuse-attention | FileCheck %s

// One head at batch 1 in torch.nn.MultiheadAttention's layout: the transposes between (L, 1, hd)
// and (1, L, hd) move only a size-1 dim, so --kiln-cleanup makes them reshapes (views, no copy);
// attention fusion still sees the sequence-first layout through them: one kiln.attention on the
// untransposed values.
// CHECK-LABEL: func.func @one_head_batch_one
// CHECK-NOT: kiln.transpose
// CHECK-NOT: kiln.matmul
// CHECK-NOT: kiln.reshape
// CHECK: %[[A:.*]] = kiln.attention %arg0, %arg1, %arg2, %{{.*}} {scale = 1.250000e-01 : f64, seq_first = true} : (tensor<16x1x8xf32>, tensor<16x1x8xf32>, tensor<16x1x8xf32>, none) -> tensor<16x1x8xf32>
// CHECK-NEXT: return %[[A]]
func.func @one_head_batch_one(%q: tensor<16x1x8xf32>, %k: tensor<16x1x8xf32>, %v: tensor<16x1x8xf32>) -> tensor<16x1x8xf32> {
  %c = kiln.constant dense<8.0> : tensor<f32> : tensor<f32>
  %qt = kiln.transpose %q {dim0 = 0 : i64, dim1 = 1 : i64} : (tensor<16x1x8xf32>) -> tensor<1x16x8xf32>
  %kt = kiln.transpose %k {dim0 = 0 : i64, dim1 = 1 : i64} : (tensor<16x1x8xf32>) -> tensor<1x16x8xf32>
  %vt = kiln.transpose %v {dim0 = 0 : i64, dim1 = 1 : i64} : (tensor<16x1x8xf32>) -> tensor<1x16x8xf32>
  %ktt = kiln.transpose %kt {dim0 = 1 : i64, dim1 = 2 : i64} : (tensor<1x16x8xf32>) -> tensor<1x8x16xf32>
  %qs = kiln.div %qt, %c : tensor<1x16x8xf32>, tensor<f32>
  %s = kiln.matmul %qs, %ktt : tensor<1x16x8xf32>, tensor<1x8x16xf32>
  %p = kiln.softmax %s {dim = -1 : i64} : (tensor<1x16x16xf32>) -> tensor<1x16x16xf32>
  %o = kiln.matmul %p, %vt : tensor<1x16x16xf32>, tensor<1x16x8xf32>
  %ot = kiln.transpose %o {dim0 = 0 : i64, dim1 = 1 : i64} : (tensor<1x16x8xf32>) -> tensor<16x1x8xf32>
  return %ot : tensor<16x1x8xf32>
}
