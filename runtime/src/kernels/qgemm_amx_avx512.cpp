// The AMX-INT8 integer microkernel (Sapphire / Emerald Rapids and later): a 32 x 32 int32 tile as
// four 16 x 16 accumulator tiles, fed per 64 values of K by two A tiles (16 rows x 64 bytes,
// K contiguous per row: the family's A layout is K-blocked row-major, QFamily::a_tile_words) and
// two B tiles (16 K quads x 16 columns of 4 bytes: the byte-quad panels the VNNI family uses
// already). `tdpbusd` multiplies unsigned A bytes by signed B bytes (qlinear: A holds the uint8
// activations), `tdpbsud` signed A by unsigned B (qconv2d: B holds them); both sum into int32
// wrapping, exact as in the VNNI kernel (qgemm.cpp bounds K). The accumulators go to memory once
// per tile and are requantized with the AVX-512 epilogue the VNNI kernel uses. The direct
// convolution's tile (qgemm.cpp's qconv2d_direct) reads its A tiles from the image itself.
// Built with -mamx-tile -mamx-int8 (runtime/CMakeLists.txt); chosen only where CPUID reports
// amx_int8 and the kernel granted this process the tile state (arch_prctl).
#include "quant_internal.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && \
    defined(__AMX_TILE__) && defined(__AMX_INT8__) && defined(__linux__)

#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

#include "qgemm_avx512_epilogue.h"

namespace kiln::kernels::quant_detail {
namespace {

constexpr int kMR = 32, kNR = 32;
constexpr int kTileWords = 16;  // 64 bytes of K per tile row
static_assert(kTileWords * 4 == kDirectBlockBytes,
              "the direct convolution loads one tile row per K block");

// Linux's permission to use the tile data state (XFEATURE_XTILEDATA = 18), asked once.
bool tile_permission() {
  static const bool granted = [] {
    constexpr long kArchReqXcompPerm = 0x1023;
    constexpr long kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return granted;
}

// Palette 1, every tile 16 rows of 64 bytes; loaded once per thread (the configuration is part
// of the thread's state).
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

void configure_tiles() {
  thread_local bool configured = false;
  if (configured) return;
  TileConfig c;
  for (int i = 0; i < 8; ++i) {
    c.colsb[i] = 64;
    c.rows[i] = 16;
  }
  _tile_loadconfig(&c);
  configured = true;
}

inline void zero_accumulators() {  // tiles 0-3
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
}

// The four products of A tiles 4, 5 (rows) and B tiles 6, 7 (columns) into the accumulators.
template <bool kAUnsigned>
inline void multiply_tiles() {
  if constexpr (kAUnsigned) {
    _tile_dpbusd(0, 4, 6);
    _tile_dpbusd(1, 4, 7);
    _tile_dpbusd(2, 5, 6);
    _tile_dpbusd(3, 5, 7);
  } else {
    _tile_dpbsud(0, 4, 6);
    _tile_dpbsud(1, 4, 7);
    _tile_dpbsud(2, 5, 6);
    _tile_dpbsud(3, 5, 7);
  }
}

// The accumulators to memory once, requantized into the tile's m x n results.
inline void store_accumulators(int m, int n, const TileOut& t) {
  alignas(64) int32_t acc[kMR][kNR];
  _tile_stored(0, &acc[0][0], kNR * 4);
  _tile_stored(1, &acc[0][16], kNR * 4);
  _tile_stored(2, &acc[16][0], kNR * 4);
  _tile_stored(3, &acc[16][16], kNR * 4);
  store_tile_avx512(&acc[0][0], kNR, m, n, t);
}

template <bool kAUnsigned>
void qkernel_amx(int64_t words, const int32_t* a, const int32_t* b, int m, int n,
                 const TileOut& t) {
  configure_tiles();
  zero_accumulators();
  for (int64_t p = 0; p < words; p += kTileWords) {
    const int32_t* ak = a + p * kMR;  // this K block's [32 rows][16 words]
    const int32_t* bk = b + p * kNR;  // [16 K quads][32 columns]
    _tile_loadd(4, ak, kTileWords * 4);
    _tile_loadd(5, ak + 16 * kTileWords, kTileWords * 4);
    _tile_loadd(6, bk, kNR * 4);
    _tile_loadd(7, bk + 16, kNR * 4);
    multiply_tiles<kAUnsigned>();
  }
  store_accumulators(m, n, t);
}

// The direct convolution's tile (QDirectKernelFn): the same products, each K block's two A
// tiles loaded from the channels-last image at that block's offset (64 bytes of one filter
// row), 16 rows `a_stride` bytes apart (output pixels).
void qconv_direct_amx(int64_t words, const uint8_t* a, int64_t a_stride, const int64_t* a_offsets,
                      const int32_t* b, int m, int n, const TileOut& t) {
  configure_tiles();
  zero_accumulators();
  for (int64_t p = 0, block = 0; p < words; p += kTileWords, ++block) {
    const uint8_t* ak = a + a_offsets[block];
    const int32_t* bk = b + p * kNR;  // [16 K quads][32 columns]
    _tile_loadd(4, ak, a_stride);
    _tile_loadd(5, ak + 16 * a_stride, a_stride);
    _tile_loadd(6, bk, kNR * 4);
    _tile_loadd(7, bk + 16, kNR * 4);
    multiply_tiles<true>();
  }
  store_accumulators(m, n, t);
}

}  // namespace

const QFamily* qgemm_amx_family() {
  if (!tile_permission()) return nullptr;
  static const QFamily f{
      "amx-int8", kMR, kNR, 4, qkernel_amx<true>, qkernel_amx<false>, kTileWords, false,
      qconv_direct_amx,
      // K: the stem's ratio 2.3 (padded filter rows) still ran faster than im2col; columns: no
      // bound, as measured (MobileNetV2's projections to 16-24 channels direct; bench/README.md).
      3.0, 0.0};
  return &f;
}

}  // namespace kiln::kernels::quant_detail

#else

namespace kiln::kernels::quant_detail {
const QFamily* qgemm_amx_family() {
  return nullptr;
}
}  // namespace kiln::kernels::quant_detail

#endif
