// The direct int8 convolution (implicit GEMM) for families with a direct tile (AMX): no im2col
// copy. Per image, the input is laid out once channels-last with its padding (the zero point
// outside the image), its padded rows split by their remainder modulo the stride s into s row
// phases, each Hq rows of Wq * s pixels (Hq = ceil(Hp / s), the padded width Wp rounded up to
// Wq * s):
//   xp[((a * Hq + i) * Wq * s + col) * C + c]  = padded pixel (s i + a, col), channel c
// One filter row kh reads, for output pixel (oh, ow), the KW * C contiguous bytes from padded
// pixel (s oh + kh dh, s ow): row phase a = (kh dh) % s, row oh + (kh dh) / s. Over the
// flattened index m = oh * Wq + ow that is
//   base(kh) + m * s * C   bytes,   base(kh) = (a * Hq + (kh dh) / s) * Wq * s * C,
// a constant offset per filter row, consecutive m s * C bytes apart: an A tile (16 rows m, a
// 64-byte block of the filter row's KW * C values) is one strided load from xp itself. K is
// KH filter rows of KW * C values, each padded to whole 64-byte blocks (the bytes past a row's
// values are read from the next pixels and multiplied by zero weights). The columns ow in
// [Wo, Wq) are computed and dropped. Outputs go channels-last to scratch, then to NCHW; both
// layout changes are 16 x 16 byte transposes in registers. The weights are B panels over that K.
#include <cstring>

#include "kiln/runtime/kernels/qgemm.h"
#include "kiln/runtime/thread_pool.h"
#include "qgemm_pack.h"
#include "transpose_bytes.h"

namespace kiln::kernels::quant_detail {

using conv_detail::ConvScratch;

int64_t direct_row_bytes(int64_t KW, int64_t C) {
  return ceil_div(KW * C, kDirectBlockBytes) * kDirectBlockBytes;
}

// The one cost rule of the choice, in bytes moved per output pixel: im2col writes (and the
// tiles read back) K = C x KH x KW bytes; the direct path writes the image channels-last once
// (C bytes per input pixel, s x s input pixels per output pixel at stride s) and its results
// once more (O bytes, transposed to NCHW). Its copies are 16x16 register transposes, about 1.5x
// cheaper per byte than im2col's gather-and-interleave into byte quads: a ratio of two of
// kiln's loops, measured with bench_conv's ResNet18Int8 / MobileNetV2Int8 rows (a Xeon with AMX,
// then Zen 4's AVX-512 VNNI, where every layer it admits without extra products ran faster than
// im2col; bench/README.md). So it is taken where
//   C s^2 + O <= 1.5 K
// (every ResNet-18 convolution but the 1x1 downsampling; MobileNetV2's projections, not its
// expansions, whose output outweighs their input 6:1). Beside that: filter rows read as
// contiguous bytes (dilation 1 along W), one stride for both dims (at most 64 row phases), one
// group, and no more extra products than the family's tile pays for with the copy it saves
// (QFamily::direct_max_k_ratio, direct_max_column_ratio): filter rows are padded to whole K
// blocks (the ResNet stem's 7 rows of 21 values take 7 blocks where im2col takes 3) and the
// output channels to whole tiles of nr (the direct tile's columns), where im2col's products have
// them as rows of mr.
bool direct_conv_fits(const QFamily& f, const TensorImpl& w, const Conv2dParams& p) {
  if (f.direct_conv == nullptr || w.dim() != 4) return false;
  const int64_t O = w.size(0), C = w.size(1), KH = w.size(2), KW = w.size(3), st = p.stride_h;
  const int64_t block = kDirectBlockBytes;
  const int64_t direct_k = KH * direct_row_bytes(KW, C),
                im2col_k = ceil_div(C * KH * KW, block) * block;
  auto within = [](double ratio, double bound) { return bound <= 0.0 || ratio <= bound; };
  return p.groups == 1 && p.dilation_w == 1 && p.stride_h == p.stride_w && st >= 1 && st <= 64 &&
         C > 0 && O > 0 && within(double(direct_k) / double(im2col_k), f.direct_max_k_ratio) &&
         within(double(ceil_div(O, f.nr) * f.nr) / double(O), f.direct_max_column_ratio) &&
         2 * (C * st * st + O) <= 3 * C * KH * KW;
}

PreparedQWeightPtr pack_direct_weight(const QFamily& f, const TensorImpl& wc) {
  const int64_t O = wc.size(0), C = wc.size(1), KH = wc.size(2), KW = wc.size(3);
  const int64_t R = direct_row_bytes(KW, C), K = KH * R;
  std::vector<int8_t> rows(static_cast<size_t>(O * K), 0);  // [o][kh][kw * C + c, padded]
  const int8_t* w = wc.data_ptr<int8_t>();
  for (int64_t o = 0; o < O; ++o)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t kh = 0; kh < KH; ++kh)
        for (int64_t kw = 0; kw < KW; ++kw)
          rows[static_cast<size_t>(o * K + kh * R + kw * C + c)] =
              w[((o * C + c) * KH + kh) * KW + kw];
  auto pw = std::make_shared<PreparedQWeight>();
  pw->family = &f;
  pw->label = std::string(f.name) + "-direct";
  pw->rows = O;
  pw->K = K;
  pw->width = f.nr;
  pw->direct = true;
  pw->channels = R;
  const Layout l = pw->layout();
  pw->words.resize(static_cast<size_t>(l.total_words()));
  pack<int8_t>(
      l, rows.data(), K, [](int64_t, int8_t v) { return v; }, pw->words.data());
  pw->sums = channel_sums(w, O, C * KH * KW);
  return pw;
}

namespace {

// The layout above for one padded image of C channels: s row phases of Hq rows, each row
// `pitch` pixels.
struct RowPhases {
  int64_t s = 1, Hq = 0, pitch = 0;
  uint64_t read = 0;                             // bit a: some filter row reads row phase a
  int64_t pixel(int64_t r, int64_t col) const {  // padded row r, padded column col
    return (r % s * Hq + r / s) * pitch + col;
  }
};

// xp (`bytes`, `zp` everywhere first) from one NCHW image of uint8 or int8 (flip 0x80) values:
// each image row's [C][W] block transposed into place as W pixels of C bytes; from a
// channels-last image (`nhwc`) each row is already W pixels of C bytes.
void fill_channels_last(const ConvGeom& g, const uint8_t* x, uint8_t flip, const RowPhases& ph,
                        uint8_t zp, int64_t bytes, uint8_t* xp, bool nhwc) {
  parallel_for(0, bytes, 1 << 16, [=](int64_t b0, int64_t b1) {
    std::memset(xp + b0, zp, static_cast<size_t>(b1 - b0));
  });
  parallel_for(0, g.H, 1, [=, &g](int64_t h0, int64_t h1) {
    for (int64_t ih = h0; ih < h1; ++ih) {
      const int64_t r = ih + g.ph;
      if (!(ph.read >> (r % ph.s) & 1)) continue;
      uint8_t* dst = xp + ph.pixel(r, g.pw) * g.C;
      if (!nhwc) {
        transpose_bytes(x + ih * g.W, g.HW(), dst, g.C, g.C, g.W, flip);
        continue;
      }
      const uint8_t* src = x + ih * g.W * g.C;
      for (int64_t i = 0, e = g.W * g.C; i < e; ++i) dst[i] = src[i] ^ flip;
    }
  });
}

}  // namespace

void qconv2d_direct(const ConvGeom& g, const TensorImpl& xc, const PreparedQWeight& pw,
                    const Requant& rq, const std::vector<int32_t>& bias, int32_t q_zp, void* out,
                    const ResidualAdd* add, bool channels_last) {
  const QFamily& f = *pw.family;
  const int64_t st = g.sh, C = g.C, R = pw.channels, Hp = g.H + 2 * g.ph;
  const int64_t Wq = ceil_div(g.W + 2 * g.pw, st);
  RowPhases ph{st, ceil_div(Hp, st), Wq * st};
  for (int64_t kh = 0; kh < g.KH; ++kh) ph.read |= uint64_t(1) << (kh * g.dh % st);
  const int64_t M = g.Ho * Wq, slivers = ceil_div(M, f.mr), panels = ceil_div(g.O, f.nr);
  const int64_t block = kDirectBlockBytes;
  ConvScratch<int64_t> offsets(g.KH * (R / block));  // per K block: its row's first byte
  for (int64_t kh = 0, i = 0; kh < g.KH; ++kh)
    for (int64_t b = 0; b < R / block; ++b)
      offsets.get()[i++] = ph.pixel(kh * g.dh, 0) * C + b * block;
  // Every byte a tile loads: past the phases, the last sliver's rows through a whole filter row.
  const int64_t image = st * ph.Hq * ph.pitch * C;
  const int64_t bytes = image + slivers * f.mr * st * C + R + block;
  const Layout lb = pw.layout();
  const int64_t words = lb.words();
  ConvScratch<uint8_t> xp(bytes);
  ConvScratch<uint8_t> yl(M * g.O);  // channels-last results, Wq columns per row
  // The larger operand read once: the image's rows (sliver-major) or the weights (panel-major).
  const bool sliver_major = image > g.O * words * 4;
  const int64_t grain =
      std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(int64_t(f.mr) * f.nr * words, 1));
  for (int64_t n = 0; n < g.N; ++n) {
    const bool x_signed = xc.dtype() == DType::Int8;
    fill_channels_last(g, static_cast<const uint8_t*>(xc.data()) + n * C * g.HW(),
                       x_signed ? 0x80 : 0, ph, uint8_t(q_zp), bytes, xp.get(), channels_last);
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
        f.direct_conv(words, xp.get() + s * f.mr * st * C, st * C, offsets.get(),
                      pw.words.data() + q * words * f.nr, m, nn, tile);
      }
    });
    // Channels-last rows of Wq columns -> NCHW (or the rows' first Wo columns as they are),
    // dropping the columns past Wo.
    uint8_t* y = static_cast<uint8_t*>(out) + n * g.O * g.HoWo();
    const uint8_t* src = yl.get();
    parallel_for(0, g.Ho, 1, [=, &g](int64_t h0, int64_t h1) {
      for (int64_t oh = h0; oh < h1; ++oh)
        if (channels_last)
          std::memcpy(y + oh * g.Wo * g.O, src + oh * Wq * g.O, static_cast<size_t>(g.Wo * g.O));
        else
          transpose_bytes(src + oh * Wq * g.O, g.O, y + oh * g.Wo, g.HoWo(), g.Wo, g.O, 0);
    });
    if (add) add->apply_planes(out, n * g.O, g.O, g.HoWo());
  }
}

}  // namespace kiln::kernels::quant_detail
