// The direct int8 convolution (implicit GEMM) for families with a direct tile (AMX): no im2col
// copy. Per image, the input is laid out once channels-last with its padding, each pixel's
// channels padded to whole 64-byte K blocks (the zero point everywhere outside the image). At
// stride s the padded image (Hp x Wp) is split into s * s phase images, phase (a, b) holding the
// padded pixels (s i + a, s j + b) at [i][j], each Hq x Wq (Hq = ceil(Hp / s), Wq = ceil(Wp / s)):
//   xp[((a s + b) Hq + i) Wq + j][c]
// Output pixel (oh, ow) read through tap (kh, kw) is padded pixel (s oh + kh dh, s ow + kw dw):
// phase ((kh dh) % s, (kw dw) % s), at (oh + (kh dh) / s) Wq + ow + (kw dw) / s
//   = m + (kh dh) / s * Wq + (kw dw) / s,   m = oh * Wq + ow.
// So over the flattened index m every tap is a constant offset into one phase, and consecutive
// m are consecutive pixels: an A tile (rows m, 64 channels) is a strided load from xp itself.
// The columns ow in [Wo, Wq) are computed and dropped (2 of 58 at 56 wide, stride 1). Outputs
// go channels-last to scratch, then to NCHW. The weights are B panels over K = (tap, padded
// channel).
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

// One stride for both dims (the phases above, at most 64 of them per dim), one group, channels
// that fill their K blocks to at least 80% (padding each pixel's channels costs products on
// zeros, more than im2col's copy saves below that), and a window of several taps or stride 1:
// a strided 1x1 convolution's im2col copies each value it reads once, where the phases cost
// two transposes.
bool direct_conv_fits(const QFamily& f, const TensorImpl& w, const Conv2dParams& p) {
  const int64_t channels = w.dim() == 4 ? w.size(1) : 0;
  const int64_t taps = w.dim() == 4 ? w.size(2) * w.size(3) : 0;
  return f.direct_conv != nullptr && f.a_tile_words > 0 && p.groups == 1 &&
         p.stride_h == p.stride_w && p.stride_h >= 1 && p.stride_h <= 64 &&
         (taps > 1 || p.stride_h == 1) && channels > 0 &&
         5 * channels >= 4 * direct_channels(f, channels);
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

// Where the padded image's pixels live: s * s phase images of Hq x Wq pixels (the top comment).
struct Phases {
  int64_t s = 1, Hq = 0, Wq = 0;
  // The phase rows and columns some tap reads (bit a: (kh dh) % s == a for some kh): a 1x1
  // stride-2 convolution reads one phase of four, and only that one is laid out.
  uint64_t rows_read = 0, cols_read = 0;
  int64_t pixel(int64_t r, int64_t col) const {  // padded row r, padded column col
    return ((r % s * s + col % s) * Hq + r / s) * Wq + col / s;
  }
  bool read(int64_t r, int64_t col) const {
    return (rows_read >> (r % s) & 1) && (cols_read >> (col % s) & 1);
  }
};

// xp (`pixels` of Cp bytes, `zp` outside the image) from one NCHW image of uint8 or int8 (flip
// 0x80) values: each image row's [C][W] block transposed to [W][C] (at stride 1 straight into
// place, else through a row of pixels copied to the phases read). Phases no tap reads stay
// unwritten (only rows past a tile's valid ones reach them, and those results are dropped).
void fill_channels_last(const ConvGeom& g, const uint8_t* x, uint8_t flip, int64_t Cp,
                        const Phases& ph, uint8_t zp, int64_t pixels, uint8_t* xp) {
  const int64_t phase = ph.Hq * ph.Wq, phases = ph.s * ph.s;
  parallel_for(0, phases + 1, 1, [=](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q) {  // each phase image read, then the slack past them
      if (q < phases && !ph.read(q / ph.s, q % ph.s)) continue;
      const int64_t p0 = q * phase, p1 = q < phases ? p0 + phase : pixels;
      std::memset(xp + p0 * Cp, zp, static_cast<size_t>((p1 - p0) * Cp));
    }
  });
  parallel_for(0, g.H, 1, [=, &g](int64_t h0, int64_t h1) {
    std::vector<uint8_t> row;  // stride > 1: one row's pixels, channels past C at zp
    if (ph.s > 1) row.assign(static_cast<size_t>(g.W * Cp), zp);
    for (int64_t ih = h0; ih < h1; ++ih) {
      const int64_t r = ih + g.ph;
      if (!(ph.rows_read >> (r % ph.s) & 1)) continue;
      if (ph.s == 1) {
        transpose_bytes(x + ih * g.W, g.HW(), xp + ph.pixel(r, g.pw) * Cp, Cp, g.C, g.W, flip);
        continue;
      }
      transpose_bytes(x + ih * g.W, g.HW(), row.data(), Cp, g.C, g.W, flip);
      for (int64_t iw = 0; iw < g.W; ++iw)
        if (ph.read(r, iw + g.pw))
          std::memcpy(xp + ph.pixel(r, iw + g.pw) * Cp, row.data() + iw * Cp,
                      static_cast<size_t>(Cp));
    }
  });
}

}  // namespace

void qconv2d_direct(const ConvGeom& g, const TensorImpl& xc, const PreparedQWeight& pw,
                    const Requant& rq, const std::vector<int32_t>& bias, int32_t q_zp, void* out) {
  const QFamily& f = *pw.family;
  const int64_t Cp = pw.channels, st = g.sh, Wp = g.W + 2 * g.pw, Hp = g.H + 2 * g.ph;
  Phases ph{st, ceil_div(Hp, st), ceil_div(Wp, st)};
  for (int64_t kh = 0; kh < g.KH; ++kh) ph.rows_read |= uint64_t(1) << (kh * g.dh % st);
  for (int64_t kw = 0; kw < g.KW; ++kw) ph.cols_read |= uint64_t(1) << (kw * g.dw % st);
  const int64_t M = g.Ho * ph.Wq, slivers = ceil_div(M, f.mr), panels = ceil_div(g.O, f.nr);
  // Every pixel a tile loads: the last phase's, through the last sliver's padding rows and the
  // farthest tap.
  const int64_t reach = (g.KH - 1) * g.dh / st * ph.Wq + (g.KW - 1) * g.dw / st;
  const int64_t pixels = st * st * ph.Hq * ph.Wq + slivers * f.mr + reach;
  const int64_t block = int64_t(f.a_tile_words) * 4, blocks_per_tap = Cp / block;
  std::vector<int64_t> offsets;  // per K block: its tap's first pixel and its channels
  for (int64_t kh = 0; kh < g.KH; ++kh)
    for (int64_t kw = 0; kw < g.KW; ++kw)
      for (int64_t b = 0; b < blocks_per_tap; ++b)
        offsets.push_back(ph.pixel(kh * g.dh, kw * g.dw) * Cp + b * block);
  const Layout lb = pw.layout();
  const int64_t words = lb.words();
  ConvScratch<uint8_t> xp(pixels * Cp);
  ConvScratch<uint8_t> yl(M * g.O);  // channels-last results, Wq columns per row
  // The larger operand read once: the image's rows (sliver-major) or the weights (panel-major).
  const bool sliver_major = Hp * Wp * Cp > g.O * words * 4;
  const int64_t grain =
      std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(int64_t(f.mr) * f.nr * words, 1));
  for (int64_t n = 0; n < g.N; ++n) {
    const int64_t x_off = n * g.C * g.HW();
    const bool x_signed = xc.dtype() == DType::Int8;
    fill_channels_last(g, static_cast<const uint8_t*>(xc.data()) + x_off, x_signed ? 0x80 : 0, Cp,
                       ph, uint8_t(q_zp), pixels, xp.get());
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
    // Channels-last rows of Wq columns -> NCHW, dropping the columns past Wo.
    uint8_t* y = static_cast<uint8_t*>(out) + n * g.O * g.HoWo();
    const uint8_t* src = yl.get();
    parallel_for(0, g.Ho, 1, [=, &g](int64_t h0, int64_t h1) {
      for (int64_t oh = h0; oh < h1; ++oh)
        transpose_bytes(src + oh * ph.Wq * g.O, g.O, y + oh * g.Wo, g.HoWo(), g.Wo, g.O, 0);
    });
  }
}

}  // namespace kiln::kernels::quant_detail
