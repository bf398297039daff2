// The target description: the spec parser and presets, the derivation rules (values computed by
// hand from the rules in target_params.cpp), refusal of descriptions this CPU cannot run, and
// GEMM results that do not depend on the description (against a float64 reference).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

#include "kiln/runtime/error.h"
#include "kiln/runtime/kernels/gemm.h"
#include "kiln/runtime/target.h"
#include "kiln/runtime/thread_pool.h"
#include "nn_test_util.h"

using namespace kiln;
using namespace kiln::rt;
using nn_test::error_of;

namespace {

// Restores the active description when a test ends.
struct ScopedTarget {
  TargetDescription saved = active_target();
  ~ScopedTarget() { set_active_target(saved); }
};

}  // namespace

TEST(Target, HostIsDetectedAndRunnable) {
  const TargetDescription& h = host_target();
  EXPECT_EQ(h.name, "host");
  EXPECT_GE(h.cpus, 1);
  EXPECT_GE(h.l1d_bytes, 4 << 10);
  EXPECT_GE(h.l2_bytes, h.l1d_bytes);
  EXPECT_TRUE(missing_features(h, h).empty());
#if defined(__x86_64__)
  // kiln's x86 baseline is x86-64-v3: AVX2 and FMA.
  EXPECT_TRUE(h.features.avx2 && h.features.fma);
  EXPECT_NE(h.isa, VectorIsa::Neon);
  if (h.isa == VectorIsa::Avx512) EXPECT_TRUE(h.features.avx512f && h.features.avx512bw);
#elif defined(__aarch64__)
  EXPECT_EQ(h.isa, VectorIsa::Neon);
#endif
  // The description prints what the kernels use.
  const std::string text = describe(h);
  EXPECT_NE(text.find(std::string("isa: ") + vector_isa_name(h.isa)), std::string::npos) << text;
  EXPECT_NE(text.find("kc "), std::string::npos) << text;
}

TEST(Target, PresetsAndOverrides) {
  const TargetDescription spr = parse_target("sapphirerapids");
  EXPECT_EQ(spr.isa, VectorIsa::Avx512);
  EXPECT_EQ(spr.vector_bits, 512);
  EXPECT_EQ(spr.vector_registers, 32);
  EXPECT_TRUE(spr.features.amx_int8 && spr.features.avx512_vnni);
  EXPECT_EQ(spr.l1d_bytes, 48 << 10);
  EXPECT_EQ(spr.l2_bytes, 2 << 20);
  EXPECT_EQ(spr.cpus, host_target().cpus);

  const TargetDescription t = parse_target("znver3,l1d=64K,l2=1M,l3=16M,cpus=3");
  EXPECT_EQ(t.isa, VectorIsa::Avx2);
  EXPECT_EQ(t.l1d_bytes, 64 << 10);
  EXPECT_EQ(t.l2_bytes, 1 << 20);
  EXPECT_EQ(t.l3_bytes, 16 << 20);
  EXPECT_EQ(t.cpus, 3);
  EXPECT_EQ(parse_target("l2=65536").l2_bytes, 65536);  // the host, overridden

  // Lowering the ISA: 256-bit vectors, 16 registers, the extensions kept.
  const TargetDescription lowered = parse_target("sapphirerapids,isa=avx2");
  EXPECT_EQ(lowered.isa, VectorIsa::Avx2);
  EXPECT_EQ(lowered.vector_bits, 256);
  EXPECT_EQ(lowered.vector_registers, 16);
  for (const std::string& name : preset_target_names()) EXPECT_EQ(preset_target(name).name, name);
}

TEST(Target, BadSpecsAreNamed) {
  EXPECT_NE(error_of([] { parse_target("pentium4"); }).find("expected a CPU name"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_target("pentium4"); }).find("got 'pentium4'"), std::string::npos);
  EXPECT_NE(error_of([] { parse_target("znver3,l2"); }).find("expected key=value"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_target("znver3,l4=1M"); }).find("got 'l4'"), std::string::npos);
  EXPECT_NE(error_of([] { parse_target("znver3,l2=-1"); }).find("l2: expected a positive size"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_target("znver3,l2=12Q"); }).find("got '12Q'"), std::string::npos);
  EXPECT_NE(error_of([] { parse_target("znver3,l2=1K"); }).find("at least 4K"), std::string::npos);
  EXPECT_NE(error_of([] { parse_target("znver3,l2=99999999999999"); }).find("l2"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_target("znver3,cpus=0"); }).find("cpus: expected 1..4096"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_target("znver3,isa=sse9"); }).find("got 'sse9'"),
            std::string::npos);
}

// The rules, computed by hand. znver3 (32 KiB L1d, 512 KiB L2), AVX2's 6x16 tile:
//   kc = 32768 * 3/4 / ((6 + 16) * 4) = 279 -> 256 (multiple of 64, at least 256)
//   nc = 524288 / (256 * 4) = 512;  mc = 3 * 524288 / 1024 = 1536
//   kc (packed B) = 32768 * 3/4 / (6 * 4) = 1024
// sapphirerapids (48 KiB L1d, 2 MiB L2), AVX-512's 12x32 tile:
//   kc = 49152 * 3/4 / 176 = 209 -> 256;  nc = 2097152 / 1024 = 2048;  mc = 6144
TEST(Target, DerivedParametersFollowTheRules) {
  const TargetParams z3 = derive_target_params(parse_target("znver3"));
  EXPECT_EQ(z3.gemm_avx2.kc, 256);
  EXPECT_EQ(z3.gemm_avx2.nc, 512);
  EXPECT_EQ(z3.gemm_avx2.mc, 1536);
  EXPECT_EQ(z3.gemm_avx2.kc_packed_b, 1024);
  EXPECT_EQ(z3.l1_panel_bytes, 32 << 10);
  EXPECT_EQ(z3.l2_block_bytes, 256 << 10);
  EXPECT_EQ(z3.conv_tile_bytes, 1536 << 10);
  EXPECT_EQ(z3.stream_store_bytes, 16 << 20);
  // The inverted-residual fusion thresholds the compiler records: bands from an L2-sized expanded
  // tensor (a quarter of the L3 without an expansion), whole images up to 640 KB on every target.
  EXPECT_EQ(z3.mbconv_banded_min_bytes, 512 << 10);
  EXPECT_EQ(z3.mbconv_no_expand_min_bytes, 8 << 20);
  EXPECT_EQ(z3.mbconv_whole_image_bytes, 640 << 10);
  const TargetParams small = derive_target_params(parse_target("znver3,l2=256K,l3=4M"));
  EXPECT_EQ(small.mbconv_banded_min_bytes, 256 << 10);
  EXPECT_EQ(small.mbconv_no_expand_min_bytes, 1 << 20);
  EXPECT_EQ(small.mbconv_whole_image_bytes, 640 << 10);

  const TargetParams spr = derive_target_params(parse_target("sapphirerapids"));
  EXPECT_EQ(spr.gemm_avx512.kc, 256);
  EXPECT_EQ(spr.gemm_avx512.nc, 2048);
  EXPECT_EQ(spr.gemm_avx512.mc, 6144);
  EXPECT_EQ(spr.gemm_avx512.kc_packed_b, 0);

  // Invariants over every preset and a range of L2 sizes: blocks in whole tiles, the B block
  // within L2, kc a multiple of 64 in [256, 1024], and larger caches never giving smaller blocks.
  for (const std::string& name : preset_target_names()) {
    SCOPED_TRACE(name);
    TargetDescription t = preset_target(name);
    int64_t prev_nc = 0;
    for (int64_t l2 : {int64_t(128) << 10, int64_t(512) << 10, int64_t(2) << 20}) {
      t.l2_bytes = l2;
      for (VectorIsa isa :
           {VectorIsa::Avx512, VectorIsa::Avx2, VectorIsa::Neon, VectorIsa::Scalar}) {
        const MicroTile tile = gemm_micro_tile(isa);
        const GemmBlocking g = derive_gemm_blocking(t, tile, true);
        EXPECT_EQ(g.kc % 64, 0);
        EXPECT_GE(g.kc, 256);
        EXPECT_LE(g.kc, 1024);
        EXPECT_EQ(g.nc % tile.nr, 0);
        EXPECT_EQ(g.mc % tile.mr, 0);
        EXPECT_GE(g.kc_packed_b, g.kc);
        if (g.nc > 4 * tile.nr) EXPECT_LE(g.nc * g.kc * 4, l2);
      }
      const int64_t nc = derive_gemm_blocking(t, gemm_micro_tile(VectorIsa::Avx2), false).nc;
      EXPECT_GE(nc, prev_nc);
      prev_nc = nc;
    }
  }
}

TEST(Target, DescriptionsThisCpuCannotRunAreRefused) {
  ScopedTarget restore;
  const TargetDescription& host = host_target();
  // The other architecture is always missing.
  const TargetDescription other = parse_target(host.features.neon ? "znver3" : "neoverse-n1");
  const std::vector<std::string> missing = missing_features(other, host);
  ASSERT_EQ(missing.size(), 1u);
  const std::string msg = error_of([&] { set_active_target(other); });
  EXPECT_NE(msg.find("expected a description this CPU can run"), std::string::npos) << msg;
  EXPECT_NE(msg.find(missing[0]), std::string::npos) << msg;
  EXPECT_EQ(active_target().name, restore.saved.name);  // unchanged
  // AVX-512 on a CPU without it names the features.
  if (!host.features.neon && !host.features.avx512f) {
    const std::vector<std::string> m = missing_features(parse_target("icelake-server"), host);
    EXPECT_NE(std::find(m.begin(), m.end(), "avx512f"), m.end());
    EXPECT_NE(error_of([] { set_active_target(parse_target("icelake-server")); }).find("avx512f"),
              std::string::npos);
  }
  // A lower ISA always runs, and the kernels follow it (unless a family is forced).
  const kernels::GemmIsa saved_isa = kernels::sgemm_isa();
  kernels::set_sgemm_isa(kernels::GemmIsa::Auto);
  if (!host.features.neon) {
    set_active_target(parse_target("host,isa=avx2"));
    EXPECT_EQ(kernels::sgemm_isa(), kernels::GemmIsa::Avx2);
  }
  set_active_target(parse_target("host,isa=scalar"));
  EXPECT_EQ(kernels::sgemm_isa(), kernels::GemmIsa::Scalar);
  kernels::set_sgemm_isa(saved_isa);
}

// sgemm against float64 under descriptions whose blocking cuts the products into many blocks
// (tiny caches: kc 256, nc and mc at their minimum) or none; every ISA this CPU has.
TEST(Target, GemmResultsDoNotDependOnTheTarget) {
  ScopedTarget restore;
  const int saved_threads = num_threads();
  const kernels::GemmIsa saved_isa = kernels::sgemm_isa();
  kernels::set_sgemm_isa(kernels::GemmIsa::Auto);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  struct Shape {
    int64_t M, N, K;
    bool ta, tb;
  };
  // Past the smallest blocks (kc 256, nc 4 panels, mc 8 slivers) in every dimension.
  const Shape shapes[] = {{150, 140, 600, false, false},
                          {97, 300, 300, true, false},
                          {5, 200, 700, false, true},
                          {130, 33, 530, true, true}};
  for (const char* spec :
       {"host,l1d=4K,l2=4K,l3=4K", "host", "host,l1d=1M,l2=64M,l3=256M", "host,isa=scalar,l2=4K"}) {
    SCOPED_TRACE(spec);
    set_active_target(parse_target(spec));
    for (int nt : {1, 2}) {
      set_num_threads(nt);
      for (const Shape& s : shapes) {
        SCOPED_TRACE(testing::Message() << s.M << "x" << s.N << "x" << s.K << " ta" << s.ta << " tb"
                                        << s.tb << " threads " << nt);
        std::vector<float> A(s.M * s.K), B(s.K * s.N), C(s.M * s.N, 0.5f);
        for (float& v : A) v = dist(rng);
        for (float& v : B) v = dist(rng);
        const int64_t lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
        kernels::sgemm(s.ta, s.tb, s.M, s.N, s.K, 1.0f, A.data(), lda, B.data(), ldb, 0.25f,
                       C.data(), s.N);
        double worst = 0.0;
        for (int64_t i = 0; i < s.M; ++i)
          for (int64_t j = 0; j < s.N; ++j) {
            double acc = 0.0;
            for (int64_t p = 0; p < s.K; ++p)
              acc += double(s.ta ? A[p * lda + i] : A[i * lda + p]) *
                     double(s.tb ? B[j * ldb + p] : B[p * ldb + j]);
            acc += 0.25 * 0.5;
            worst = std::max(worst, std::abs(acc - double(C[i * s.N + j])));
          }
        EXPECT_LE(worst, 1e-5 * std::sqrt(double(s.K)) * 4);
      }
      // A weight packed once against few rows (an RNN step): under the tiny caches B outgrows
      // the L2 block and its columns are split across the threads; under the huge ones not.
      for (int64_t M : {1, 3, 8}) {
        const int64_t N = 333, K = 300;
        SCOPED_TRACE(testing::Message() << "packed B, M " << M << " threads " << nt);
        std::vector<float> A(M * K), B(K * N), C(M * N, 0.5f);
        for (float& v : A) v = dist(rng);
        for (float& v : B) v = dist(rng);
        const auto packed = kernels::sgemm_pack_b(false, K, N, B.data(), N);
        kernels::sgemm_packed_b(false, M, 1.0f, A.data(), K, *packed, 0.25f, C.data(), N);
        double worst = 0.0;
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            double acc = 0.25 * 0.5;
            for (int64_t p = 0; p < K; ++p) acc += double(A[i * K + p]) * double(B[p * N + j]);
            worst = std::max(worst, std::abs(acc - double(C[i * N + j])));
          }
        EXPECT_LE(worst, 1e-5 * std::sqrt(double(K)) * 4);
      }
    }
  }
  kernels::set_sgemm_isa(saved_isa);
  set_num_threads(saved_threads);
}
