// The direct int8 convolution (implicit GEMM) for families with a direct tile (AMX): no im2col
// copy. Per image, the input is laid out once channels-last with its padding, each pixel's
// channels padded to whole 64-byte K blocks (the zero point everywhere outside the image):
//   xp[(ih + ph) * Wp + iw + pw][c],  Wp = W + 2 pw
// At stride 1, output pixel (oh, ow) read through tap (kh, kw) is input pixel
//   (oh + kh dh) * Wp + ow + kw dw = m + kh dh Wp + kw dw,   m = oh * Wp + ow,
// so over the flattened index m every tap is a constant offset and consecutive m are
// consecutive pixels: an A tile (rows m, 64 channels) is a strided load from xp itself. The
// columns ow in [Wo, Wp) are computed and dropped (2 of 58 at 56 wide). Outputs go channels-last
// to scratch, then to NCHW. The weights are B panels over K = (tap, padded channel).
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "kiln/runtime/kernels/qgemm.h"
#include "kiln/runtime/thread_pool.h"
#include "qgemm_pack.h"

namespace kiln::kernels::quant_detail {

using conv_detail::ConvScratch;

int64_t direct_channels(const QFamily& f, int64_t channels) {
  const int64_t block = int64_t(f.a_tile_words) * 4;
  return ceil_div(channels, block) * block;
}

// Stride 1 (the flattened rows above), one group, and channels that fill their K blocks to at
// least 80%: padding each pixel's channels costs products on zeros, more than im2col's copy
// saves below that.
bool direct_conv_fits(const QFamily& f, int64_t channels, const Conv2dParams& p) {
  return f.direct_conv != nullptr && f.a_tile_words > 0 && p.groups == 1 && p.stride_h == 1 &&
         p.stride_w == 1 && channels > 0 && 5 * channels >= 4 * direct_channels(f, channels);
}

PreparedQWeightPtr pack_direct_weight(const QFamily& f, const TensorImpl& wc) {
  const int64_t O = wc.size(0), C = wc.size(1), taps = wc.size(2) * wc.size(3);
  const int64_t Cp = direct_channels(f, C), K = taps * Cp;
  std::vector<int8_t> tapped(static_cast<size_t>(O * K), 0);  // [o][tap][padded channel]
  const int8_t* w = wc.data_ptr<int8_t>();
  for (int64_t o = 0; o < O; ++o)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t t = 0; t < taps; ++t)
        tapped[static_cast<size_t>((o * taps + t) * Cp + c)] = w[(o * C + c) * taps + t];
  auto pw = std::make_shared<PreparedQWeight>();
  pw->family = &f;
  pw->label = std::string(f.name) + "-direct";
  pw->rows = O;
  pw->K = K;
  pw->width = f.nr;
  pw->direct = true;
  pw->channels = Cp;
  const Layout l = pw->layout();
  pw->words.resize(static_cast<size_t>(l.total_words()));
  pack<int8_t>(
      l, tapped.data(), K, [](int64_t, int8_t v) { return v; }, pw->words.data());
  pw->sums = channel_sums(w, O, C * taps);
  return pw;
}

namespace {

// d[c * ld + r] = s[r * ls + c] ^ flip for r < rows, c < cols: 16 x 16 blocks transposed in
// registers (four rounds of interleaving bytes, pairs, quads and halves), scalar at the edges.
// flip 0x80 turns int8 values into the quads' uint8 (v + 128).
void transpose_bytes(const uint8_t* s, int64_t ls, uint8_t* d, int64_t ld, int64_t rows,
                     int64_t cols, uint8_t flip) {
  int64_t r0 = 0;
#if defined(__SSE2__)
  const __m128i f = _mm_set1_epi8(static_cast<char>(flip));
  for (; r0 + 16 <= rows; r0 += 16) {
    int64_t c0 = 0;
    for (; c0 + 16 <= cols; c0 += 16) {
      __m128i a[16], b[16], c[16];
      for (int i = 0; i < 16; ++i)
        a[i] = _mm_xor_si128(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + (r0 + i) * ls + c0)), f);
      for (int g = 0; g < 8; ++g) {  // b[2g + h]: rows 2g, 2g + 1, columns 8h..8h + 7
        b[2 * g] = _mm_unpacklo_epi8(a[2 * g], a[2 * g + 1]);
        b[2 * g + 1] = _mm_unpackhi_epi8(a[2 * g], a[2 * g + 1]);
      }
      for (int h = 0; h < 4; ++h)  // c[4h + k]: rows 4h..4h + 3, columns 4k..4k + 3
        for (int half = 0; half < 2; ++half) {
          c[4 * h + 2 * half] = _mm_unpacklo_epi16(b[4 * h + half], b[4 * h + 2 + half]);
          c[4 * h + 2 * half + 1] = _mm_unpackhi_epi16(b[4 * h + half], b[4 * h + 2 + half]);
        }
      for (int e = 0; e < 2; ++e)  // a[8e + j]: rows 8e..8e + 7, columns 2j, 2j + 1
        for (int k = 0; k < 4; ++k) {
          a[8 * e + 2 * k] = _mm_unpacklo_epi32(c[8 * e + k], c[8 * e + 4 + k]);
          a[8 * e + 2 * k + 1] = _mm_unpackhi_epi32(c[8 * e + k], c[8 * e + 4 + k]);
        }
      for (int j = 0; j < 8; ++j) {  // columns 2j and 2j + 1, all 16 rows
        _mm_storeu_si128(reinterpret_cast<__m128i*>(d + (c0 + 2 * j) * ld + r0),
                         _mm_unpacklo_epi64(a[j], a[8 + j]));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(d + (c0 + 2 * j + 1) * ld + r0),
                         _mm_unpackhi_epi64(a[j], a[8 + j]));
      }
    }
    for (int64_t c = c0; c < cols; ++c)
      for (int64_t r = r0; r < r0 + 16; ++r) d[c * ld + r] = s[r * ls + c] ^ flip;
  }
#endif
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t r = r0; r < rows; ++r) d[c * ld + r] = s[r * ls + c] ^ flip;
}

// xp (pixels x Cp bytes, `zp` outside the image) from one NCHW image of uint8 or int8 (flip
// 0x80) values: per padded row, the image row's [C][W] block transposed to [W][C].
void fill_channels_last(const ConvGeom& g, const uint8_t* x, uint8_t flip, int64_t Cp, int64_t Wp,
                        uint8_t zp, int64_t pixels, uint8_t* xp) {
  parallel_for(0, pixels / Wp + 1, 1, [=](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {  // padded row r
      const int64_t p0 = r * Wp, p1 = std::min(pixels, p0 + Wp);
      if (p0 >= p1) continue;
      std::memset(xp + p0 * Cp, zp, static_cast<size_t>((p1 - p0) * Cp));
      const int64_t ih = r - g.ph;
      if (ih < 0 || ih >= g.H) continue;
      transpose_bytes(x + ih * g.W, g.HW(), xp + (p0 + g.pw) * Cp, Cp, g.C, g.W, flip);
    }
  });
}

}  // namespace

void qconv2d_direct(const ConvGeom& g, const TensorImpl& xc, const PreparedQWeight& pw,
                    const Requant& rq, const std::vector<int32_t>& bias, int32_t q_zp, void* out) {
  const QFamily& f = *pw.family;
  const int64_t Cp = pw.channels, Wp = g.W + 2 * g.pw, Hp = g.H + 2 * g.ph;
  const int64_t M = g.Ho * Wp, slivers = ceil_div(M, f.mr), panels = ceil_div(g.O, f.nr);
  // Every row a tile loads: the last sliver's padding rows through the last tap.
  const int64_t reach = (g.KH - 1) * g.dh * Wp + (g.KW - 1) * g.dw;
  const int64_t pixels = std::max(Hp * Wp, slivers * f.mr + reach);
  const int64_t blocks_per_tap = Cp / (int64_t(f.a_tile_words) * 4);
  std::vector<int64_t> offsets;  // per K block: its tap's pixel offset and its channels
  for (int64_t kh = 0; kh < g.KH; ++kh)
    for (int64_t kw = 0; kw < g.KW; ++kw)
      for (int64_t b = 0; b < blocks_per_tap; ++b)
        offsets.push_back((kh * g.dh * Wp + kw * g.dw) * Cp + b * int64_t(f.a_tile_words) * 4);
  const Layout lb = pw.layout();
  const int64_t words = lb.words();
  ConvScratch<uint8_t> xp(pixels * Cp);
  ConvScratch<uint8_t> yl(M * g.O);  // channels-last results, Wp columns per row
  // The larger operand read once: the image's rows (sliver-major) or the weights (panel-major).
  const bool sliver_major = Hp * Wp * Cp > g.O * words * 4;
  const int64_t grain =
      std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(int64_t(f.mr) * f.nr * words, 1));
  for (int64_t n = 0; n < g.N; ++n) {
    const int64_t x_off = n * g.C * g.HW();
    const bool x_signed = xc.dtype() == DType::Int8;
    fill_channels_last(g, static_cast<const uint8_t*>(xc.data()) + x_off, x_signed ? 0x80 : 0, Cp,
                       Wp, uint8_t(q_zp), pixels, xp.get());
    const TileOut t = tile_out(rq, bias, yl.get(), g.O, false);
    parallel_for(0, slivers * panels, grain, [&](int64_t t0, int64_t t1) {
      for (int64_t i = t0; i < t1; ++i) {
        const int64_t q = sliver_major ? i % panels : i / slivers;
        const int64_t s = sliver_major ? i / panels : i % slivers;
        TileOut tile = t;
        tile.out = yl.get() + s * f.mr * g.O + q * f.nr;
        tile.mult = t.mult + q * f.nr;
        tile.bias = t.bias + q * f.nr;
        const int m = static_cast<int>(std::min<int64_t>(f.mr, M - s * f.mr));
        const int nn = static_cast<int>(std::min<int64_t>(f.nr, g.O - q * f.nr));
        f.direct_conv(words, xp.get() + s * f.mr * Cp, Cp, offsets.data(),
                      pw.words.data() + q * words * f.nr, m, nn, tile);
      }
    });
    // Channels-last rows of Wp columns -> NCHW, dropping the columns past Wo.
    uint8_t* y = static_cast<uint8_t*>(out) + n * g.O * g.HoWo();
    const uint8_t* src = yl.get();
    parallel_for(0, g.Ho, 1, [=, &g](int64_t h0, int64_t h1) {
      for (int64_t oh = h0; oh < h1; ++oh)
        transpose_bytes(src + oh * Wp * g.O, g.O, y + oh * g.Wo, g.HoWo(), g.Wo, g.O, 0);
    });
  }
}

}  // namespace kiln::kernels::quant_detail
