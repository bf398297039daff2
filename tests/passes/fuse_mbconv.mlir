// RUN: kiln-opt %s --kiln-fuse-mbconv=min-bytes=0 | FileCheck %s
// RUN: kiln-opt %s --kiln-fuse-mbconv | FileCheck %s --check-prefix=DEFAULT
// RUN: kiln-opt %s --kiln-fuse-mbconv=small-max-bytes=-1 | FileCheck %s --check-prefix=LARGE
// RUN: kiln-opt %s --kiln-fuse-mbconv=small-max-bytes=4096 | FileCheck %s --check-prefix=GROW
// RUN: kiln-opt %s '--kiln-fuse-mbconv=no-expand-min-bytes=1048576' | FileCheck %s --check-prefix=SMALLL3

// expand 1x1 (relu6) -> depthwise 3x3 (relu6) -> project 1x1 + residual: one kiln.mbconv with
// every operand and each step's activation.
// CHECK-LABEL: func.func @block
// CHECK-NOT: kiln.conv2d
// CHECK: %[[M:.*]] = kiln.mbconv %arg0, %arg1, %arg2, %arg3, %arg4, %arg5, %arg6, %arg0 {dw_activation = 2 : i64, dw_clamp_max = 6.000000e+00 : f64, dw_clamp_min = 0.000000e+00 : f64, expand_activation = 2 : i64, expand_clamp_max = 6.000000e+00 : f64, expand_clamp_min = 0.000000e+00 : f64, padding = array<i64: 1, 1>, project_activation = 0 : i64, project_clamp_max = 0.000000e+00 : f64, project_clamp_min = 0.000000e+00 : f64, strategy = 1 : i64, stride = array<i64: 1, 1>}
// CHECK-NOT: kiln.conv2d
// CHECK: return %[[M]]
// By default small blocks (at most 640 KB expanded per image: the runtime runs them
// channels-last) fuse; without that, the 1 MB threshold leaves this one alone.
// DEFAULT-LABEL: func.func @block
// DEFAULT-NOT: kiln.conv2d
// DEFAULT: kiln.mbconv {{.*}}strategy = 1 : i64
// DEFAULT-NOT: kiln.conv2d
// DEFAULT: return
// LARGE-LABEL: func.func @block
// LARGE-NOT: kiln.mbconv
// LARGE-COUNT-3: kiln.conv2d_fused
// LARGE-NOT: kiln.mbconv
func.func @block(%x: tensor<1x4x8x8xf32>, %we: tensor<12x4x1x1xf32>, %be: tensor<12xf32>, %wd: tensor<12x1x3x3xf32>, %bd: tensor<12xf32>, %wp: tensor<4x12x1x1xf32>, %bp: tensor<4xf32>) -> tensor<1x4x8x8xf32> {
  %none = kiln.none
  %e = kiln.conv2d_fused %x, %we, %be, %none {activation = 2 : i64, clamp_max = 6.0 : f64, clamp_min = 0.0 : f64, dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (tensor<1x4x8x8xf32>, tensor<12x4x1x1xf32>, tensor<12xf32>, none) -> tensor<1x12x8x8xf32>
  %d = kiln.conv2d_fused %e, %wd, %bd, %none {activation = 2 : i64, clamp_max = 6.0 : f64, clamp_min = 0.0 : f64, dilation = array<i64: 1, 1>, groups = 12 : i64, padding = array<i64: 1, 1>, stride = array<i64: 1, 1>} : (tensor<1x12x8x8xf32>, tensor<12x1x3x3xf32>, tensor<12xf32>, none) -> tensor<1x12x8x8xf32>
  %y = kiln.conv2d_fused %d, %wp, %bp, %x {activation = 0 : i64, clamp_max = 0.0 : f64, clamp_min = 0.0 : f64, dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (tensor<1x12x8x8xf32>, tensor<4x12x1x1xf32>, tensor<4xf32>, tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
  return %y : tensor<1x4x8x8xf32>
}

// MobileNetV2's first block has no expansion: the depthwise reads x; stride 2 carries over. A
// projection without activation or residual is a plain kiln.conv2d (its bias folded in).
// CHECK-LABEL: func.func @no_expansion
// LARGE-LABEL: func.func @no_expansion
// CHECK-NOT: kiln.conv2d
// CHECK: kiln.mbconv %arg0, %{{.*}}, %{{.*}}, %arg1, %{{.*}}, %arg2, %{{.*}}, %{{.*}} {{{.*}}expand_activation = 0 : i64{{.*}}strategy = 1 : i64, stride = array<i64: 2, 2>} : (tensor<2x8x9x9xf32>, none, none, tensor<8x1x3x3xf32>, none, tensor<4x8x1x1xf32>, none, none)
// CHECK-NOT: kiln.conv2d
func.func @no_expansion(%x: tensor<2x8x9x9xf32>, %wd: tensor<8x1x3x3xf32>, %wp: tensor<4x8x1x1xf32>) -> tensor<2x4x5x5xf32> {
  %none = kiln.none
  %d = kiln.conv2d_fused %x, %wd, %none, %none {activation = 1 : i64, clamp_max = 0.0 : f64, clamp_min = 0.0 : f64, dilation = array<i64: 1, 1>, groups = 8 : i64, padding = array<i64: 1, 1>, stride = array<i64: 2, 2>} : (tensor<2x8x9x9xf32>, tensor<8x1x3x3xf32>, none, none) -> tensor<2x8x5x5xf32>
  %y = kiln.conv2d %d, %wp, %none {dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (tensor<2x8x5x5xf32>, tensor<4x8x1x1xf32>, none) -> tensor<2x4x5x5xf32>
  return %y : tensor<2x4x5x5xf32>
}

// The depthwise output is also returned: it must stay materialized, nothing fuses. A 3x3 conv
// with one group in the middle is not a depthwise conv either.
// CHECK-LABEL: func.func @not_fused
// CHECK-NOT: kiln.mbconv
// CHECK: return
func.func @not_fused(%x: tensor<1x4x8x8xf32>, %wd: tensor<4x1x3x3xf32>, %wp: tensor<4x4x1x1xf32>, %wf: tensor<4x4x3x3xf32>) -> (tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>) {
  %none = kiln.none
  %d = kiln.conv2d_fused %x, %wd, %none, %none {activation = 0 : i64, clamp_max = 0.0 : f64, clamp_min = 0.0 : f64, dilation = array<i64: 1, 1>, groups = 4 : i64, padding = array<i64: 1, 1>, stride = array<i64: 1, 1>} : (tensor<1x4x8x8xf32>, tensor<4x1x3x3xf32>, none, none) -> tensor<1x4x8x8xf32>
  %y = kiln.conv2d_fused %d, %wp, %none, %none {activation = 0 : i64, clamp_max = 0.0 : f64, clamp_min = 0.0 : f64, dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (tensor<1x4x8x8xf32>, tensor<4x4x1x1xf32>, none, none) -> tensor<1x4x8x8xf32>
  %f = kiln.conv2d_fused %x, %wf, %none, %none {activation = 0 : i64, clamp_max = 0.0 : f64, clamp_min = 0.0 : f64, dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 1, 1>, stride = array<i64: 1, 1>} : (tensor<1x4x8x8xf32>, tensor<4x4x3x3xf32>, none, none) -> tensor<1x4x8x8xf32>
  %z = kiln.conv2d_fused %f, %wp, %none, %none {activation = 0 : i64, clamp_max = 0.0 : f64, clamp_min = 0.0 : f64, dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (tensor<1x4x8x8xf32>, tensor<4x4x1x1xf32>, none, none) -> tensor<1x4x8x8xf32>
  return %d, %y, %z : tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>
}

// 64x56x56 floats expanded (784 KB, one image): above the small-block limit, below 1 MB.
// DEFAULT-LABEL: func.func @medium
// DEFAULT-NOT: kiln.mbconv
// DEFAULT-COUNT-3: kiln.conv2d_fused
// DEFAULT-NOT: kiln.mbconv
// CHECK-LABEL: func.func @medium
// CHECK-NOT: kiln.conv2d
// CHECK: kiln.mbconv {{.*}}strategy = 0 : i64
// CHECK-NOT: kiln.conv2d
func.func @medium(%x: tensor<1x8x56x56xf32>, %we: tensor<64x8x1x1xf32>, %wd: tensor<64x1x3x3xf32>, %wp: tensor<8x64x1x1xf32>) -> tensor<1x8x56x56xf32> {
  %none = kiln.none
  %e = kiln.conv2d_fused %x, %we, %none, %none {activation = 2 : i64, clamp_max = 6.0 : f64, clamp_min = 0.0 : f64, dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (tensor<1x8x56x56xf32>, tensor<64x8x1x1xf32>, none, none) -> tensor<1x64x56x56xf32>
  %d = kiln.conv2d_fused %e, %wd, %none, %none {activation = 2 : i64, clamp_max = 6.0 : f64, clamp_min = 0.0 : f64, dilation = array<i64: 1, 1>, groups = 64 : i64, padding = array<i64: 1, 1>, stride = array<i64: 1, 1>} : (tensor<1x64x56x56xf32>, tensor<64x1x3x3xf32>, none, none) -> tensor<1x64x56x56xf32>
  %y = kiln.conv2d_fused %d, %wp, %none, %x {activation = 0 : i64, clamp_max = 0.0 : f64, clamp_min = 0.0 : f64, dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (tensor<1x64x56x56xf32>, tensor<8x64x1x1xf32>, none, tensor<1x8x56x56xf32>) -> tensor<1x8x56x56xf32>
  return %y : tensor<1x8x56x56xf32>
}

// 64x112x112 floats expanded (3.2 MB, one image, as MobileNetV2's 112x112 block at batch 1):
// banded by default.
// DEFAULT-LABEL: func.func @banded
// DEFAULT-NOT: kiln.conv2d
// DEFAULT: kiln.mbconv {{.*}}strategy = 0 : i64
// DEFAULT-NOT: kiln.conv2d_fused
// DEFAULT: return
func.func @banded(%x: tensor<1x8x112x112xf32>, %we: tensor<64x8x1x1xf32>, %wd: tensor<64x1x3x3xf32>, %wp: tensor<8x64x1x1xf32>) -> tensor<1x8x112x112xf32> {
  %none = kiln.none
  %e = kiln.conv2d_fused %x, %we, %none, %none {activation = 2 : i64, clamp_max = 6.0 : f64, clamp_min = 0.0 : f64, dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (tensor<1x8x112x112xf32>, tensor<64x8x1x1xf32>, none, none) -> tensor<1x64x112x112xf32>
  %d = kiln.conv2d_fused %e, %wd, %none, %none {activation = 2 : i64, clamp_max = 6.0 : f64, clamp_min = 0.0 : f64, dilation = array<i64: 1, 1>, groups = 64 : i64, padding = array<i64: 1, 1>, stride = array<i64: 1, 1>} : (tensor<1x64x112x112xf32>, tensor<64x1x3x3xf32>, none, none) -> tensor<1x64x112x112xf32>
  %y = kiln.conv2d_fused %d, %wp, %none, %x {activation = 0 : i64, clamp_max = 0.0 : f64, clamp_min = 0.0 : f64, dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (tensor<1x64x112x112xf32>, tensor<8x64x1x1xf32>, none, tensor<1x8x112x112xf32>) -> tensor<1x8x112x112xf32>
  return %y : tensor<1x8x112x112xf32>
}

// Without an expansion, a block above the small-block limit (32x112x112 floats per image) stays
// two convs even with min-bytes=0 while x (1.6 MB) stays in the L3: bands would save only the
// depthwise output's round trip through it.
// CHECK-LABEL: func.func @large_no_expansion
// CHECK-NOT: kiln.mbconv
// CHECK: return
// With a smaller L3's threshold (a target with 4 MB of L3: 1 MB) it fuses, banded.
// SMALLL3-LABEL: func.func @large_no_expansion
// SMALLL3: kiln.mbconv {{.*}}strategy = 0 : i64
func.func @large_no_expansion(%x: tensor<1x32x112x112xf32>, %wd: tensor<32x1x3x3xf32>, %wp: tensor<16x32x1x1xf32>) -> tensor<1x16x112x112xf32> {
  %none = kiln.none
  %d = kiln.conv2d_fused %x, %wd, %none, %none {activation = 2 : i64, clamp_max = 6.0 : f64, clamp_min = 0.0 : f64, dilation = array<i64: 1, 1>, groups = 32 : i64, padding = array<i64: 1, 1>, stride = array<i64: 1, 1>} : (tensor<1x32x112x112xf32>, tensor<32x1x3x3xf32>, none, none) -> tensor<1x32x112x112xf32>
  %y = kiln.conv2d_fused %d, %wp, %none, %none {activation = 0 : i64, clamp_max = 0.0 : f64, clamp_min = 0.0 : f64, dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (tensor<1x32x112x112xf32>, tensor<16x32x1x1xf32>, none, none) -> tensor<1x16x112x112xf32>
  return %y : tensor<1x16x112x112xf32>
}

// The same block at batch 8 (12.8 MB): the depthwise output would leave the L3, so it fuses by
// default.
// DEFAULT-LABEL: func.func @large_no_expansion_batch8
// DEFAULT-NOT: kiln.conv2d
// DEFAULT: kiln.mbconv %arg0, %{{.*}}, %{{.*}}, %arg1{{.*}}strategy = 0 : i64
// DEFAULT-NOT: kiln.conv2d_fused
// DEFAULT: return
// LARGE-LABEL: func.func @large_no_expansion_batch8
// LARGE-NOT: kiln.conv2d
// LARGE: kiln.mbconv
// LARGE-NOT: kiln.conv2d
// LARGE: return
func.func @large_no_expansion_batch8(%x: tensor<8x32x112x112xf32>, %wd: tensor<32x1x3x3xf32>, %wp: tensor<16x32x1x1xf32>) -> tensor<8x16x112x112xf32> {
  %none = kiln.none
  %d = kiln.conv2d_fused %x, %wd, %none, %none {activation = 2 : i64, clamp_max = 6.0 : f64, clamp_min = 0.0 : f64, dilation = array<i64: 1, 1>, groups = 32 : i64, padding = array<i64: 1, 1>, stride = array<i64: 1, 1>} : (tensor<8x32x112x112xf32>, tensor<32x1x3x3xf32>, none, none) -> tensor<8x32x112x112xf32>
  %y = kiln.conv2d_fused %d, %wp, %none, %none {activation = 0 : i64, clamp_max = 0.0 : f64, clamp_min = 0.0 : f64, dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (tensor<8x32x112x112xf32>, tensor<16x32x1x1xf32>, none, none) -> tensor<8x16x112x112xf32>
  return %y : tensor<8x16x112x112xf32>
}

// The strategy looks at the depthwise output's image too: with small-max-bytes=4096 this block's
// input image (4x16x16 floats, 4 KB) is small, but the padded 3x3 grows it to 4x18x18 (5 KB), so it
// fuses (as a small block) yet runs in bands.
// GROW-LABEL: func.func @growing_map
// GROW: kiln.mbconv {{.*}}strategy = 0 : i64
// GROW-LABEL: func.func @same_map
// GROW: kiln.mbconv {{.*}}strategy = 1 : i64
func.func @growing_map(%x: tensor<1x4x16x16xf32>, %wd: tensor<4x1x3x3xf32>, %wp: tensor<4x4x1x1xf32>) -> tensor<1x4x18x18xf32> {
  %none = kiln.none
  %d = kiln.conv2d_fused %x, %wd, %none, %none {activation = 2 : i64, clamp_max = 6.0 : f64, clamp_min = 0.0 : f64, dilation = array<i64: 1, 1>, groups = 4 : i64, padding = array<i64: 2, 2>, stride = array<i64: 1, 1>} : (tensor<1x4x16x16xf32>, tensor<4x1x3x3xf32>, none, none) -> tensor<1x4x18x18xf32>
  %y = kiln.conv2d_fused %d, %wp, %none, %none {activation = 0 : i64, clamp_max = 0.0 : f64, clamp_min = 0.0 : f64, dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (tensor<1x4x18x18xf32>, tensor<4x4x1x1xf32>, none, none) -> tensor<1x4x18x18xf32>
  return %y : tensor<1x4x18x18xf32>
}
func.func @same_map(%x: tensor<1x4x16x16xf32>, %wd: tensor<4x1x3x3xf32>, %wp: tensor<4x4x1x1xf32>) -> tensor<1x4x16x16xf32> {
  %none = kiln.none
  %d = kiln.conv2d_fused %x, %wd, %none, %none {activation = 2 : i64, clamp_max = 6.0 : f64, clamp_min = 0.0 : f64, dilation = array<i64: 1, 1>, groups = 4 : i64, padding = array<i64: 1, 1>, stride = array<i64: 1, 1>} : (tensor<1x4x16x16xf32>, tensor<4x1x3x3xf32>, none, none) -> tensor<1x4x16x16xf32>
  %y = kiln.conv2d_fused %d, %wp, %none, %none {activation = 0 : i64, clamp_max = 0.0 : f64, clamp_min = 0.0 : f64, dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (tensor<1x4x16x16xf32>, tensor<4x4x1x1xf32>, none, none) -> tensor<1x4x16x16xf32>
  return %y : tensor<1x4x16x16xf32>
}
