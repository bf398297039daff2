// The kernels' cache-dependent parameters, derived from a target description: the one place
// that decides them (docs/target.md tabulates the results per CPU class).
//
// Each rule sizes one working set as a fixed fraction of the cache level it must stay in, so the
// same rule gives every CPU its own value. The fractions were measured on the machines named in
// docs/target.md (bench_gemm, bench_conv); a fraction is changed only with a same-run measurement
// on at least two cache sizes.

#include <algorithm>

#include "kiln/runtime/target.h"

namespace kiln::rt {
namespace {

int64_t floor_to(int64_t v, int64_t multiple) {
  return std::max<int64_t>(multiple, v / multiple * multiple);
}

// The register tiles of the GEMM microkernel families (gemm_avx512.cpp, gemm_avx2.cpp, the NEON
// and portable kernels in gemm.cpp check theirs against these when they start).
constexpr MicroTile kAvx512Tile{12, 32}, kAvx2Tile{6, 16}, kNeonTile{8, 12}, kPortableTile{4, 16};

}  // namespace

GemmBlocking derive_gemm_blocking(const TargetDescription& t, MicroTile tile, bool long_packed_k) {
  constexpr int64_t kFloat = 4;
  GemmBlocking g;
  // One step of the register tile reads MR floats of the A sliver and NR of a B panel: kc steps
  // of both stay within 3/4 of L1, so neither the sliver (reused across the row of tiles) nor the
  // panel being consumed is evicted by the other. At least 256: each K block reloads and stores
  // the C tile, and shorter blocks lost 6-19% on square products (AVX2, 32 KiB L1; a sliver-only
  // rule that gave 672 was measured slower, its B block narrower).
  g.kc = std::clamp<int64_t>(floor_to(t.l1d_bytes * 3 / 4 / ((tile.mr + tile.nr) * kFloat), 64),
                             256, 1024);
  // One thread's packed B block (kc x nc) is re-read once per A sliver: it fills its core's L2.
  g.nc = std::clamp<int64_t>(floor_to(t.l2_bytes / (g.kc * kFloat), tile.nr), 4 * tile.nr, 8192);
  // The packed A block (mc x kc) is shared by all threads and read by each once per B block: it
  // stays in L3, three L2s of it (a small fraction of any L3 slice, so neighbours' blocks fit).
  g.mc =
      std::clamp<int64_t>(floor_to(3 * t.l2_bytes / (g.kc * kFloat), tile.mr), 8 * tile.mr, 16384);
  // Against a B packed once (weights) with few rows of A, the row of tiles restarts per K block
  // and re-reads C: longer blocks while the sliver still fits 3/4 of L1.
  if (long_packed_k)
    g.kc_packed_b =
        std::clamp<int64_t>(floor_to(t.l1d_bytes * 3 / 4 / (tile.mr * kFloat), 16), g.kc, 4096);
  return g;
}

TargetParams derive_target_params(const TargetDescription& t) {
  TargetParams p;
  p.gemm_avx512 = derive_gemm_blocking(t, kAvx512Tile, false);
  p.gemm_avx2 = derive_gemm_blocking(t, kAvx2Tile, true);
  p.gemm_neon = derive_gemm_blocking(t, kNeonTile, false);
  p.gemm_portable = derive_gemm_blocking(t, kPortableTile, false);
  // A panel read once per sliver straight from a row-major B must stay in L1.
  p.l1_panel_bytes = t.l1d_bytes;
  // A block re-read by every sliver of one thread: half of L2 (the rest holds C and A).
  p.l2_block_bytes = t.l2_bytes / 2;
  // im2col tiles: three L2s of columns amortize re-packing the weights per GEMM call (on Zen 4's
  // 1 MB L2, 768 KB - 3 MB tiles beat 192 - 384 KB ones on ResNet-18's layers), and stay far below
  // materializing the whole column matrix (slower on the 7x7 stem).
  p.conv_tile_bytes = 3 * t.l2_bytes;
  // Winograd: the shared transformed-input block V (six L2s) and each thread's product buffer M
  // (one L2).
  p.winograd_v_bytes = 6 * t.l2_bytes;
  p.winograd_m_bytes = t.l2_bytes;
  // The fused inverted-residual block's bands: 3/4 of L2, so the expanded band and the
  // depthwise's output stay there between the three stages.
  p.mbconv_band_bytes = t.l2_bytes * 3 / 4;
  // An inverted-residual block (expand 1x1, depthwise, project 1x1) is fused and run in bands
  // once its expanded tensor outgrows L2: three convs would send it through the L3 (or memory)
  // twice. Without an expansion the bands save only the depthwise output's round trip, which pays
  // once it no longer stays in a quarter of the L3 (the rest holds the input and the weights);
  // on Zen 3 and Zen 4 (32 MB L3) that is 8 MB, between MobileNetV2's t=1 block at batch 1
  // (1.6 MB: fused no faster) and batch 8 (12.8 MB: fused 0.78x).
  p.mbconv_banded_min_bytes = t.l2_bytes;
  p.mbconv_no_expand_min_bytes = t.l3_bytes / 4;
  // An inverted-residual block whose one image's expanded tensor (before and after the depthwise)
  // holds at most this runs whole images channels-last, sparing the transposes NCHW costs on
  // small maps (--kiln-fuse-mbconv records the choice on each kiln.mbconv). Not a cache fit: the
  // strategy stayed ahead of the bands for every MobileNetV2 block within 640 KB with 512 KB
  // (Zen 3) and 1 MB (Zen 4) of L2 alike, so every target gets that until one measures otherwise.
  p.mbconv_whole_image_bytes = int64_t(640) << 10;
  // The channel-interleaved depthwise band: 1/8 of L2, its output beside it.
  p.depthwise_band_bytes = t.l2_bytes / 8;
  // Non-temporal stores for elementwise outputs of half the last-level cache or more: larger
  // outputs would evict the inputs (and everything else) before a consumer reads them.
  p.stream_store_bytes = t.l3_bytes / 2;
  return p;
}

MicroTile gemm_micro_tile(VectorIsa isa) {
  switch (isa) {
    case VectorIsa::Avx512:
      return kAvx512Tile;
    case VectorIsa::Avx2:
      return kAvx2Tile;
    case VectorIsa::Neon:
      return kNeonTile;
    case VectorIsa::Scalar:
      break;
  }
  return kPortableTile;
}

}  // namespace kiln::rt
