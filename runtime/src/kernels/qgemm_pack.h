#pragma once
// The packed operand layouts of the integer GEMM and the loops that fill them (internal to the
// int8 kernels; quant_internal.h describes the word formats).

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "conv_internal.h"
#include "kiln/runtime/kernels/qgemm.h"
#include "kiln/runtime/thread_pool.h"
#include "quant_internal.h"
#include "transpose_bytes.h"

namespace kiln::kernels::quant_detail {

using conv_detail::ConvGeom;

inline int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// The packed layout of one operand: `lines` rows (A) or columns (B) in blocks of `width`, K in
// words of `group` elements (int16 or bytes).
struct Layout {
  int64_t lines = 0, K = 0, width = 0, group = 0;
  // QFamily::a_tile_words: K padded to blocks of this many words (both operands), and with
  // `rows` the lines of a block stored one after another per K block (the A operand).
  int64_t tile_words = 0;
  bool rows = false;
  int64_t words() const {
    const int64_t w = ceil_div(K, group);
    return tile_words > 0 ? ceil_div(w, tile_words) * tile_words : w;
  }
  int64_t blocks() const { return ceil_div(lines, width); }
  int64_t block_words() const { return words() * width; }
  int64_t total_words() const { return blocks() * block_words(); }
};

// The layouts of a family's operands: A (`lines` rows in slivers of mr) and B (columns in panels
// of nr).
inline Layout a_layout(const QFamily& f, int64_t lines, int64_t K) {
  return {lines, K, f.mr, f.group, f.a_tile_words, f.a_tile_words > 0};
}
inline Layout b_layout(const QFamily& f, int64_t lines, int64_t K) {
  return {lines, K, f.nr, f.group, f.a_tile_words, false};
}

// Where a tile loop's results go with rq's constants: out (rows `ld` apart), the constants per
// row (conv: output channels along A) or per column (output channels along B).
inline TileOut tile_out(const Requant& rq, const std::vector<int32_t>& bias, void* out, int64_t ld,
                        bool per_row) {
  TileOut t;
  t.out = out;
  t.ld = ld;
  t.out_signed = rq.out_signed;
  t.mult = rq.mult.data();
  t.bias = bias.data();
  t.row_step = per_row ? 1 : 0;
  t.col_step = per_row ? 0 : 1;
  t.lo = rq.lo;
  t.hi = rq.hi;
  t.zp = rq.y_zp;
  return t;
}

// Each of `rows` int8 rows' sum over its K values (the byte quads' zero-point correction).
inline std::vector<int32_t> channel_sums(const int8_t* w, int64_t rows, int64_t K) {
  std::vector<int32_t> sums(static_cast<size_t>(rows));
  for (int64_t o = 0; o < rows; ++o) {
    int32_t sum = 0;  // a local: int8 loads alias everything, a member would be reloaded
    for (int64_t k = 0; k < K; ++k) sum += w[o * K + k];
    sums[static_cast<size_t>(o)] = sum;
  }
  return sums;
}

// Packs f(line, src[line * ld + k]) (an E value) for every line and k into `dst`, zeros past K and
// lines; the writes in buffer order. Byte stores may alias anything, so everything the loop
// reads is a local first (else the compiler reloads it per element).
template <typename E, typename S, typename F>
void pack(const Layout& l, const S* src, int64_t ld, F f, int32_t* dst) {
  E* const d = reinterpret_cast<E*>(dst);
  const int64_t words = l.words(), width = l.width, group = l.group, lines = l.lines, K = l.K;
  const int64_t block_elems = l.block_words() * group;
  if (l.rows) {  // A tiles: per K block, each line's words together
    const int64_t tw = l.tile_words;
    parallel_for(0, l.blocks(), 1, [=](int64_t b0, int64_t b1) {
      const F fn = f;
      for (int64_t b = b0; b < b1; ++b) {
        E* o = d + b * block_elems;
        for (int64_t p0 = 0; p0 < words; p0 += tw) {
          for (int64_t r = 0; r < width; ++r) {
            const int64_t line = b * width + r;
            const S* row = src + line * ld;
            for (int64_t k = p0 * group, e = k + tw * group; k < e; ++k)
              *o++ = line < lines && k < K ? fn(line, row[k]) : E(0);
          }
        }
      }
    });
    return;
  }
  parallel_for(0, l.blocks(), 1, [=](int64_t b0, int64_t b1) {
    const F fn = f;
    for (int64_t b = b0; b < b1; ++b) {
      E* o = d + b * block_elems;
      for (int64_t p = 0; p < words; ++p) {
        for (int64_t r = 0; r < width; ++r) {
          const int64_t line = b * width + r;
          const S* row = src + line * ld;
          for (int64_t k = p * group, e = k + group; k < e; ++k)
            *o++ = line < lines && k < K ? fn(line, row[k]) : E(0);
        }
      }
    }
  });
}

// The column panels of one image's group straight from NCHW: B[k = (c, kh, kw), j = (oh, ow)] =
// f(x[c, oh * sh - ph + kh * dh, ow * sw - pw + kw * dw]), `pad` in the padding. Per K word: the
// word's `group` rows of B gathered into a buffer (bounds tested per input row and column range,
// never divided out per element), then interleaved into whole 32-bit words stored as contiguous
// runs of each panel: the compiler vectorizes both, where storing single bytes at each column's
// offset would not.
template <typename E, typename T, typename F>
void pack_conv_columns(const ConvGeom& geom, const Layout& l, const T* x, F f, E pad,
                       int32_t* dst) {
  static_assert(sizeof(E) == 1 || sizeof(E) == 2, "byte quads or int16 pairs");
  constexpr int64_t group = 4 / sizeof(E);
  using U = std::make_unsigned_t<E>;
  const ConvGeom g = geom;
  const int64_t kk = g.KH * g.KW, N = g.HoWo(), cols = l.blocks() * l.width;
  const int64_t words = l.words(), nr = l.width, K = l.K, Wo = g.Wo;
  parallel_for(0, words, 1, [=](int64_t w0, int64_t w1) {
    const F fn = f;
    conv_detail::ConvScratch<E> buffer(group * N);  // per chunk of words, from the scratch pool
    E* const rows = buffer.get();
    for (int64_t p = w0; p < w1; ++p) {
      for (int64_t e = 0; e < group; ++e) {
        E* __restrict r = rows + e * N;
        const int64_t k = p * group + e;
        if (k >= K) {
          std::fill(r, r + N, E(0));
          continue;
        }
        const int64_t c = k / kk, kh = k % kk / g.KW, kw = k % g.KW;
        const int64_t iw0 = kw * g.dw - g.pw, sw = g.sw;
        // Columns [lo, hi) of every output row read inside the input row; the others pad.
        const int64_t lo = std::min(Wo, iw0 >= 0 ? 0 : (-iw0 + sw - 1) / sw);
        const int64_t hi =
            std::max(lo, std::min(Wo, g.W - iw0 <= 0 ? 0 : (g.W - iw0 + sw - 1) / sw));
        for (int64_t oh = 0; oh < g.Ho; ++oh, r += Wo) {
          const int64_t ih = oh * g.sh - g.ph + kh * g.dh;
          if (ih < 0 || ih >= g.H) {
            std::fill(r, r + Wo, pad);
            continue;
          }
          const T* __restrict src = x + (c * g.H + ih) * g.W + iw0;
          std::fill(r, r + lo, pad);
          if (sw == 1) {
            for (int64_t ow = lo; ow < hi; ++ow) r[ow] = fn(src[ow]);
          } else if (sw == 2) {  // a constant stride vectorizes (stems, downsampling layers)
            for (int64_t ow = lo; ow < hi; ++ow) r[ow] = fn(src[2 * ow]);
          } else {
            for (int64_t ow = lo; ow < hi; ++ow) r[ow] = fn(src[ow * sw]);
          }
          std::fill(r + hi, r + Wo, pad);
        }
      }
      // Word p of column j lives at dst[(j / nr * words + p) * nr + j % nr]: runs of nr.
      for (int64_t j0 = 0; j0 < cols; j0 += nr) {
        int32_t* __restrict out = dst + (j0 / nr * words + p) * nr;
        const int64_t run = std::max<int64_t>(0, std::min(nr, N - j0));
        const U* __restrict a = reinterpret_cast<const U*>(rows) + j0;
        if constexpr (group == 4) {
          const U *b = a + N, *c = b + N, *d = c + N;
          for (int64_t i = 0; i < run; ++i)
            out[i] = static_cast<int32_t>(uint32_t(a[i]) | uint32_t(b[i]) << 8 |
                                          uint32_t(c[i]) << 16 | uint32_t(d[i]) << 24);
        } else {
          const U* b = a + N;
          for (int64_t i = 0; i < run; ++i)
            out[i] = static_cast<int32_t>(uint32_t(a[i]) | uint32_t(b[i]) << 16);
        }
        for (int64_t i = run; i < nr; ++i) out[i] = 0;  // columns past N
      }
    }
  });
}

}  // namespace kiln::kernels::quant_detail

namespace kiln::kernels {

// The weights packed once for one family: `groups` blocks of `rows` output channels by K, in
// that family's A (conv: slivers of mr) or B (linear: panels of nr) layout; for byte quads also
// each channel's sum of weights (the activations' zero-point correction). A direct
// convolution's (qconv_direct.cpp) are B panels over K = KH filter rows of `channels` bytes
// (KW x C values padded to whole K blocks).
struct PreparedQWeight {
  const quant_detail::QFamily* family = nullptr;
  int64_t groups = 1, rows = 0, K = 0, width = 0;
  bool a_operand = false;  // conv: the weights are A; linear: B
  bool direct = false;     // a direct convolution's
  int64_t channels = 0;    // direct: bytes per filter row (KW x C values, padded)
  std::string label;       // prepared_family's answer
  std::vector<int32_t> words;
  std::vector<int32_t> sums;
  // qlinear_dynamic's: the weights' epilogue constants at input scale 1 (dynamic_call).
  std::optional<quant_detail::Requant> unit;
  quant_detail::Layout layout() const {
    return a_operand ? quant_detail::a_layout(*family, rows, K)
                     : quant_detail::b_layout(*family, rows, K);
  }
  size_t nbytes() const { return (words.size() + sums.size()) * sizeof(int32_t); }
};

}  // namespace kiln::kernels

namespace kiln::kernels::quant_detail {

// The direct convolution (qconv_direct.cpp). One filter row's KW x C values in bytes, padded to
// whole K blocks (kDirectBlockBytes).
int64_t direct_row_bytes(int64_t KW, int64_t C);
// Whether f runs a convolution with weights of w's shape [O, C, KH, KW] and `p` directly.
bool direct_conv_fits(const QFamily& f, const TensorImpl& w, const Conv2dParams& p);
// wc: contiguous int8 [O, C, KH, KW] with zero points 0.
PreparedQWeightPtr pack_direct_weight(const QFamily& f, const TensorImpl& wc);
// out (NCHW, rq's dtype) = the convolution of xc (contiguous NCHW, uint8 or int8) with pw;
// `bias`: the quads' per-channel bias (the zero-point correction in it), q_zp the activations'
// zero point as uint8 quads hold it; `add` (or null) applied to each image's output as soon as
// it is written. With channels_last both xc and out are NHWC.
void qconv2d_direct(const ConvGeom& g, const TensorImpl& xc, const PreparedQWeight& pw,
                    const Requant& rq, const std::vector<int32_t>& bias, int32_t q_zp, void* out,
                    const ResidualAdd* add = nullptr, bool channels_last = false);


}  // namespace kiln::kernels::quant_detail
