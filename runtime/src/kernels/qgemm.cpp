// Integer linear and convolution (kernels/qgemm.h): parameter checks, the packing of either
// layout (int16 pairs or byte quads, quant_internal.h), the tile loop, the portable microkernel,
// the choice of family, and the reference loops.
//
// Both operations are one integer GEMM with a requantize epilogue:
//   qlinear:  C[M, N] = X[M, K] . W^T       per-column (output feature) constants
//   qconv2d:  C[Og, HoWo] = W_g . cols       per-row (output channel) constants; the column
//             panels are packed straight from the NCHW image (no im2col buffer).
// The whole of B is packed once per product and each tile runs the full K: the weights' A
// slivers (mr x K) and one B panel (K x nr) are re-read from L2 per tile. Blocking K from the
// target description's caches is the next step where K outgrows L2 (docs/quantization.md).
#include "kiln/runtime/kernels/qgemm.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#include <string_view>
#include <type_traits>
#include <vector>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "conv_internal.h"
#include "kiln/runtime/kernels/quantize.h"
#include "kiln/runtime/target.h"
#include "kiln/runtime/thread_pool.h"
#include "qgemm_pack.h"
#include "quant_internal.h"

namespace kiln::kernels {
namespace quant_detail {
namespace {
// Element i of a uint8 or int8 output (v already in its range).
void store_int8(void* out, int64_t i, bool out_signed, int32_t v) {
  if (out_signed)
    static_cast<int8_t*>(out)[i] = static_cast<int8_t>(v);
  else
    static_cast<uint8_t*>(out)[i] = static_cast<uint8_t>(v);
}
}  // namespace

void store_tile_scalar(const int32_t* acc, int64_t ld_acc, int m, int n, const TileOut& t) {
  for (int r = 0; r < m; ++r) {
    for (int j = 0; j < n; ++j) {
      const int64_t c = r * t.row_step + j * t.col_step;
      if (t.float_out) {
        static_cast<float*>(t.out)[r * t.ld + j] = dequantize_acc(
            acc[r * ld_acc + j], t.bias ? t.bias[c] : 0, t.mult[c], t.fbias ? t.fbias[c] : 0.0f);
        continue;
      }
      const int32_t v = requantize_value(acc[r * ld_acc + j], t.bias ? t.bias[c] : 0, t.mult[c],
                                         t.lo, t.hi, t.zp);
      store_int8(t.out, r * t.ld + j, t.out_signed, v);
    }
  }
}

}  // namespace quant_detail

namespace {

using namespace quant_detail;
using conv_detail::ConvGeom;
using conv_detail::ConvScratch;

// ---- The portable microkernel (int16 pairs) -----------------------------------------------------

constexpr int kPortableMR = 6, kPortableNR = 16;

void qkernel_portable(int64_t words, const int32_t* a, const int32_t* b, int m, int n,
                      const TileOut& t) {
  int32_t acc[kPortableMR * kPortableNR] = {};
  for (int64_t p = 0; p < words; ++p) {
    const int32_t* ap = a + p * kPortableMR;
    const int32_t* bp = b + p * kPortableNR;
    for (int r = 0; r < kPortableMR; ++r) {
      const int32_t a0 = static_cast<int16_t>(ap[r]), a1 = ap[r] >> 16;
      for (int j = 0; j < kPortableNR; ++j) {
        const int32_t b0 = static_cast<int16_t>(bp[j]), b1 = bp[j] >> 16;
        acc[r * kPortableNR + j] += a0 * b0 + a1 * b1;
      }
    }
  }
  store_tile_scalar(acc, kPortableNR, m, n, t);
}

const QFamily kPortable{"portable", kPortableMR, kPortableNR, 2, qkernel_portable};

// ---- Family selection ---------------------------------------------------------------------------

std::atomic<QGemmIsa> g_forced{QGemmIsa::Auto};

bool host_has_vnni() {
  const rt::CpuFeatures& f = rt::host_target().features;
  return f.avx512_vnni && f.avx512f && f.avx512bw && f.avx512vl && qgemm_avx512vnni_family();
}
bool host_has_amx() {
  const rt::CpuFeatures& f = rt::host_target().features;
  return f.amx_tile && f.amx_int8 && host_has_vnni() && qgemm_amx_family();
}
bool host_has_avxvnni() {
  return rt::host_target().features.avx_vnni && rt::host_target().features.avx2 &&
         qgemm_avxvnni_family();
}
bool host_has_i8mm() {
  return rt::host_target().features.i8mm && qgemm_neon_i8mm_family();
}
bool host_has_dotprod() {
  return rt::host_target().features.dotprod && qgemm_neon_dot_family();
}
bool host_has_avx2() {
  return rt::host_target().features.avx2 && qgemm_avx2_family();
}

// The ISA asked for, or the best the active target description allows.
QGemmIsa resolve(QGemmIsa isa) {
  if (isa != QGemmIsa::Auto) return isa;
  const rt::TargetDescription& t = rt::active_target();
  if (t.isa == rt::VectorIsa::Avx512 && t.features.amx_int8 && host_has_amx()) return QGemmIsa::Amx;
  if (t.isa == rt::VectorIsa::Avx512 && t.features.avx512_vnni && host_has_vnni())
    return QGemmIsa::Avx512Vnni;
  const bool avx2_class = t.isa == rt::VectorIsa::Avx2 || t.isa == rt::VectorIsa::Avx512;
  if (avx2_class && t.features.avx_vnni && host_has_avxvnni()) return QGemmIsa::AvxVnni;
  if (avx2_class && host_has_avx2()) return QGemmIsa::Avx2;
  if (t.isa == rt::VectorIsa::Neon && t.features.i8mm && host_has_i8mm()) return QGemmIsa::NeonI8mm;
  if (t.isa == rt::VectorIsa::Neon && t.features.dotprod && host_has_dotprod())
    return QGemmIsa::NeonDot;
  return QGemmIsa::Portable;
}

// The family for these operands: VNNI's byte quads need int8 weights with zero points 0 (the
// symmetric scheme int8 flows use for weights); other operands take the int16 path.
// `rows`: the activations' rows when they are the A operand (qlinear; 0: not known). The one
// shape rule of the policy: AMX's 32-row tiles are left for VNNI's 8-row ones when fewer rows than
// one 16-row hardware tile would fill them (a batch-1 linear, an RNN step), where the padding
// costs more than the wider products gain. Only for Auto: a forced family is that family.
const QFamily& family_for(bool quads_allowed, int64_t rows = 0) {
  const QGemmIsa forced = g_forced.load(std::memory_order_acquire);
  QGemmIsa isa = resolve(forced);
  if (forced == QGemmIsa::Auto && isa == QGemmIsa::Amx && rows > 0 &&
      rows < qgemm_amx_family()->mr / 2)
    isa = QGemmIsa::Avx512Vnni;
  switch (isa) {
    case QGemmIsa::Amx:
      if (quads_allowed) return *qgemm_amx_family();
      [[fallthrough]];
    case QGemmIsa::Avx512Vnni:
      if (quads_allowed) return *qgemm_avx512vnni_family();
      [[fallthrough]];
    case QGemmIsa::AvxVnni:
      if (quads_allowed && host_has_avxvnni()) return *qgemm_avxvnni_family();
      [[fallthrough]];
    case QGemmIsa::NeonI8mm:
      if (quads_allowed && host_has_i8mm()) return *qgemm_neon_i8mm_family();
      [[fallthrough]];
    case QGemmIsa::NeonDot:
      if (quads_allowed && host_has_dotprod()) return *qgemm_neon_dot_family();
      [[fallthrough]];
    case QGemmIsa::Avx2:
      if (host_has_avx2()) return *qgemm_avx2_family();
      break;
    default:
      break;
  }
  return kPortable;
}

// ---- Checked parameters -------------------------------------------------------------------------

// `w` has the output channels along dim 0 and `k` values per channel.
Requant requant_of(std::string_view op, const TensorImpl& x, const TensorImpl& w, int64_t k,
                   const QuantizedOperands& q, DType out_dtype) {
  const Range xr = int8_range(op, x.dtype(), "input");
  const Range wr = int8_range(op, w.dtype(), "weight");
  const Range yr = int8_range(op, out_dtype, "out");
  Requant rq;
  const float xs = scalar_scale(op, q.x_scale, "input scale");
  rq.x_zp = scalar_zero_point(op, q.x_zero_point, xr, "input zero point");
  const float ys = scalar_scale(op, q.y_scale, "output scale");
  rq.y_zp = scalar_zero_point(op, q.y_zero_point, yr, "output zero point");
  KILN_CHECK(q.w_scale && q.w_zero_point, op, "expected a weight scale and zero point, got none");
  const Channels wc = channels_of(op, w, *q.w_scale, *q.w_zero_point, 0, wr);
  const int64_t oc = w.size(0);
  const int64_t padded = (oc + kChannelPad - 1) / kChannelPad * kChannelPad;
  rq.w_zp.resize(oc);
  rq.mult.resize(padded);
  int64_t w_bound = 0;
  for (int64_t o = 0; o < oc; ++o) {
    const size_t c = wc.scale.size() == 1 ? 0 : o;
    rq.w_zp[o] = static_cast<int32_t>(wc.zero_point[c]);
    rq.mult[o] = xs * wc.scale[c] / ys;
    KILN_CHECK(std::isfinite(rq.mult[o]) && rq.mult[o] > 0.0f, op,
               "expected input scale * weight scale / output scale to be a positive finite "
               "float32, got ",
               xs, " * ", wc.scale[c], " / ", ys, " (channel ", o, ")");
    w_bound = std::max({w_bound, wr.hi - rq.w_zp[o], rq.w_zp[o] - wr.lo});
  }
  // Every |x - x_zp| * |w - w_zp| summed over K must fit int32 (the accumulator; the int16 pairs
  // themselves cannot overflow: |x - x_zp| <= 255).
  const int64_t x_bound = std::max<int64_t>(xr.hi - rq.x_zp, rq.x_zp - xr.lo);
  KILN_CHECK(
      x_bound * w_bound == 0 || k <= std::numeric_limits<int32_t>::max() / (x_bound * w_bound), op,
      "expected at most ", std::numeric_limits<int32_t>::max() / (x_bound * w_bound),
      " products per output (int32 accumulation at these zero points), got ", k);
  rq.bias.assign(padded, 0);
  if (q.bias) {
    KILN_CHECK(q.bias->dtype() == DType::Int32, op, "expected bias of dtype int32, got ",
               dtype_name(q.bias->dtype()));
    KILN_CHECK(q.bias->dim() == 1 && q.bias->size(0) == oc, op, "expected bias of shape [", oc,
               "], got ", dims_str(q.bias->sizes()));
    auto b = views::contiguous(*q.bias);
    std::memcpy(rq.bias.data(), b->data_ptr<int32_t>(), oc * sizeof(int32_t));
  }
  for (int64_t o = oc; o < padded; ++o) rq.mult[o] = rq.mult[oc - 1];
  rq.lo = static_cast<float>(yr.lo - rq.y_zp);
  rq.hi = static_cast<float>(yr.hi - rq.y_zp);
  if (q.relu) rq.lo = std::max(rq.lo, 0.0f);
  rq.out_signed = out_dtype == DType::Int8;
  return rq;
}

// ---- The tile loop ------------------------------------------------------------------------------

// Calls tile(s, q, m, n, tile_out) for every tile (sliver s of mr rows, panel q of nr columns) of
// out[M, N] (row stride t.ld), `t` describing tile (0, 0) and its constants advancing with the
// tile's rows and columns, over the threads.
template <typename Tile>
void for_tiles(const QFamily& f, int64_t M, int64_t N, int64_t words, const TileOut& t,
               Tile&& tile_fn) {
  const int64_t slivers = ceil_div(M, f.mr), panels = ceil_div(N, f.nr);
  // The larger operand is read once, in order, and the smaller one again per tile from cache:
  // panel-major (consecutive tiles of a thread share a B panel; A re-read) when B is larger,
  // sliver-major when A is (a deep layer's weights outweigh its few columns). Chunks of at
  // least ~64K word products keep the pool's per-chunk cost small.
  const bool sliver_major = slivers * f.mr > panels * f.nr;
  const int64_t grain =
      std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(int64_t(f.mr) * f.nr * words, 1));
  parallel_for(0, slivers * panels, grain, [&](int64_t t0, int64_t t1) {
    for (int64_t i = t0; i < t1; ++i) {
      const int64_t q = sliver_major ? i % panels : i / slivers;
      const int64_t s = sliver_major ? i / panels : i % slivers;
      TileOut tile = t;
      const int64_t element = t.float_out ? sizeof(float) : 1;
      tile.out = static_cast<char*>(t.out) + (s * f.mr * t.ld + q * f.nr) * element;
      const int64_t c = s * f.mr * t.row_step + q * f.nr * t.col_step;
      tile.mult = t.mult + c;
      if (t.bias) tile.bias = t.bias + c;
      if (t.fbias) tile.fbias = t.fbias + c;
      const int m = static_cast<int>(std::min<int64_t>(f.mr, M - s * f.mr));
      const int n = static_cast<int>(std::min<int64_t>(f.nr, N - q * f.nr));
      tile_fn(s, q, m, n, tile);
    }
  });
}

// out[M, N] = requantize(A . B) from packed operands (for_tiles).
void run_tiles(const QFamily& f, QMicroKernelFn kernel, int64_t M, int64_t N, int64_t words,
               const int32_t* a, const int32_t* b, const TileOut& t) {
  for_tiles(f, M, N, words, t, [&](int64_t s, int64_t q, int m, int n, const TileOut& tile) {
    kernel(words, a + s * words * f.mr, b + q * words * f.nr, m, n, tile);
  });
}

// Reads element i of a uint8 or int8 tensor's contiguous data as int32.
struct Int8Data {
  const void* p = nullptr;
  bool is_signed = false;
  int32_t operator[](int64_t i) const {
    return is_signed ? static_cast<const int8_t*>(p)[i] : static_cast<const uint8_t*>(p)[i];
  }
};
Int8Data data_of(const TensorImplPtr& t) {
  return {t->data(), t->dtype() == DType::Int8};
}

// Whether the byte-quad (VNNI) layout can take these weights: int8 with zero points 0.
bool quads_allowed(const TensorImpl& w, const Requant& rq) {
  return w.dtype() == DType::Int8 &&
         std::all_of(rq.w_zp.begin(), rq.w_zp.end(), [](int32_t z) { return z == 0; });
}
// The activations' zero point in byte quads: in uint8 (int8 activations are offset by 128), or
// for signed_quads families in int8 (uint8 activations are offset by -128).
int32_t quad_zero_point(const QFamily& f, const Requant& rq, bool x_signed) {
  if (f.signed_quads) return rq.x_zp - (x_signed ? 0 : 128);
  return rq.x_zp + (x_signed ? 128 : 0);
}
// Slivers of whole words straight from the rows (no padding in K beyond `row_words`): word p of
// line `line` is word(line, p), zeros past the rows and their words. A word at a time where
// the generic pack converts byte by byte: packing would cost more than a channels-last 1x1
// convolution's product with few outputs.
template <typename Word>
void pack_row_words(const Layout& l, int64_t row_words, Word word, int32_t* dst) {
  const int64_t words = l.words(), width = l.width, lines = l.lines;
  parallel_for(0, l.blocks(), 1, [=](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      int32_t* const o = dst + b * words * width;
      for (int64_t r = 0; r < width; ++r) {
        const int64_t line = b * width + r;
        int64_t p = 0;
        if (line < lines)
          for (; p < row_words; ++p) o[p * width + r] = word(line, p);
        for (; p < words; ++p) o[p * width + r] = 0;
      }
    }
  });
}

// Rows of K % 4 == 0 bytes as quads: 4 bytes of a row as they lie, XORed with `flip` (0x80 per
// byte turns int8 into uint8 quads and back: v + 128 = v - 128 = v ^ 0x80 modulo 256).
void pack_row_quads(const Layout& l, const uint8_t* x, uint32_t flip, int32_t* dst) {
  const int64_t K = l.K;
  auto word = [=](int64_t line, int64_t p) {
    uint32_t v;
    std::memcpy(&v, x + line * K + 4 * p, 4);
    return static_cast<int32_t>(v ^ flip);
  };
#if defined(__SSE2__)
  // Four rows' four words at a time, transposed in registers: a channels-last 1x1's pixel rows
  // as B's columns, whose packing is a large share of a product with few output channels.
  const int64_t row_words = K / 4, words = l.words(), width = l.width, lines = l.lines;
  if (width % 4 == 0) {
    parallel_for(0, l.blocks(), 1, [=](int64_t b0, int64_t b1) {
      const __m128i f = _mm_set1_epi32(static_cast<int32_t>(flip));
      for (int64_t b = b0; b < b1; ++b) {
        int32_t* const o = dst + b * words * width;
        for (int64_t r = 0; r < width; r += 4) {
          const int64_t line = b * width + r;
          int64_t p = 0;
          if (line + 4 <= lines) {
            const uint8_t* x0 = x + line * K;
            auto load = [&](int64_t row, int64_t q) {
              return _mm_xor_si128(
                  _mm_loadu_si128(reinterpret_cast<const __m128i*>(x0 + row * K + 4 * q)), f);
            };
            for (; p + 4 <= row_words; p += 4) {
              const __m128i a0 = load(0, p), a1 = load(1, p), a2 = load(2, p), a3 = load(3, p);
              const __m128i t0 = _mm_unpacklo_epi32(a0, a1), t1 = _mm_unpacklo_epi32(a2, a3);
              const __m128i t2 = _mm_unpackhi_epi32(a0, a1), t3 = _mm_unpackhi_epi32(a2, a3);
              auto store = [&](int64_t q, __m128i v) {
                _mm_storeu_si128(reinterpret_cast<__m128i*>(o + q * width + r), v);
              };
              store(p, _mm_unpacklo_epi64(t0, t1));
              store(p + 1, _mm_unpackhi_epi64(t0, t1));
              store(p + 2, _mm_unpacklo_epi64(t2, t3));
              store(p + 3, _mm_unpackhi_epi64(t2, t3));
            }
          }
          for (int64_t rr = r; rr < r + 4; ++rr) {  // the rest: words past p, rows past lines
            const int64_t ln = b * width + rr;
            int64_t q = ln < lines ? p : 0;
            if (ln < lines)
              for (; q < row_words; ++q) o[q * width + rr] = word(ln, q);
            for (; q < words; ++q) o[q * width + rr] = 0;
          }
        }
      }
    });
    return;
  }
#endif
  pack_row_words(l, K / 4, word, dst);
}

// Rows of K % 2 == 0 bytes as int16 pairs minus the zero point (the int16-pair families).
template <typename Byte>
void pack_row_pairs(const Layout& l, const Byte* x, int32_t zp, int32_t* dst) {
  const int64_t K = l.K;
  pack_row_words(
      l, K / 2,
      [=](int64_t line, int64_t p) {
        const Byte* pair = x + line * K + 2 * p;
        const auto lo = static_cast<uint16_t>(int32_t(pair[0]) - zp);
        const auto hi = static_cast<uint16_t>(int32_t(pair[1]) - zp);
        return static_cast<int32_t>(uint32_t(lo) | uint32_t(hi) << 16);
      },
      dst);
}

// Packs a uint8 or int8 tensor's rows (contiguous, K per row) as the family's quads: uint8
// (int8 + 128), or for signed_quads int8 (uint8 - 128).
void pack_activations_quads(const QFamily& f, const Layout& l, const TensorImpl& x, int32_t* dst) {
  const bool x_signed = x.dtype() == DType::Int8;
  if (!l.rows && l.group == 4 && l.K % 4 == 0)
    return pack_row_quads(l, static_cast<const uint8_t*>(x.data()),
                          x_signed != f.signed_quads ? 0x80808080u : 0u, dst);
  if (f.signed_quads && x_signed)
    pack<int8_t>(
        l, x.data_ptr<int8_t>(), l.K, [](int64_t, int8_t v) { return v; }, dst);
  else if (f.signed_quads)
    pack<int8_t>(
        l, x.data_ptr<uint8_t>(), l.K, [](int64_t, uint8_t v) { return int8_t(v - 128); }, dst);
  else if (x_signed)
    pack<uint8_t>(
        l, x.data_ptr<int8_t>(), l.K, [](int64_t, int8_t v) { return uint8_t(v + 128); }, dst);
  else
    pack<uint8_t>(
        l, x.data_ptr<uint8_t>(), l.K, [](int64_t, uint8_t v) { return v; }, dst);
}
// Packs the conv columns of one image's group (x from element `offset`) as the family's quads,
// `zp` (quad_zero_point) in the padding.
void pack_conv_quads(const QFamily& f, const ConvGeom& g, const Layout& l, const TensorImpl& x,
                     int64_t offset, int32_t zp, int32_t* dst) {
  const bool x_signed = x.dtype() == DType::Int8;
  if (f.signed_quads && x_signed)
    pack_conv_columns<int8_t>(
        g, l, x.data_ptr<int8_t>() + offset, [](int8_t v) { return v; }, int8_t(zp), dst);
  else if (f.signed_quads)
    pack_conv_columns<int8_t>(
        g, l, x.data_ptr<uint8_t>() + offset, [](uint8_t v) { return int8_t(v - 128); }, int8_t(zp),
        dst);
  else if (x_signed)
    pack_conv_columns<uint8_t>(
        g, l, x.data_ptr<int8_t>() + offset, [](int8_t v) { return uint8_t(v + 128); }, uint8_t(zp),
        dst);
  else
    pack_conv_columns<uint8_t>(
        g, l, x.data_ptr<uint8_t>() + offset, [](uint8_t v) { return v; }, uint8_t(zp), dst);
}
// Packs rows (contiguous, K per row, from element `offset`) as int16 v - zp(line).
template <typename Zp>
void pack_minus_zero_point(const Layout& l, const TensorImpl& t, Zp zp, int32_t* dst,
                           int64_t offset = 0) {
  if (t.dtype() == DType::Int8)
    pack<int16_t>(
        l, t.data_ptr<int8_t>() + offset, l.K,
        [zp](int64_t line, int8_t v) { return int16_t(v - zp(line)); }, dst);
  else
    pack<int16_t>(
        l, t.data_ptr<uint8_t>() + offset, l.K,
        [zp](int64_t line, uint8_t v) { return int16_t(v - zp(line)); }, dst);
}

// (x - x_zp) . w = x_q . w - q_zp * sum_k w (x_q, q_zp: the activations and their zero point as
// the quads hold them): the second term joins each channel's bias (modulo 2^32, as the sums wrap).
std::vector<int32_t> quad_bias(const Requant& rq, const std::vector<int32_t>& sums, int32_t q_zp) {
  std::vector<int32_t> b = rq.bias;
  for (size_t o = 0; o < sums.size(); ++o)
    b[o] = static_cast<int32_t>(static_cast<uint32_t>(b[o]) -
                                static_cast<uint32_t>(q_zp) * static_cast<uint32_t>(sums[o]));
  return b;
}

// ---- qlinear ------------------------------------------------------------------------------------

struct LinearShape {
  int64_t M = 0, K = 0, N = 0;
};

LinearShape linear_shape(std::string_view op, const TensorImpl& x, const TensorImpl& w,
                         const TensorImpl& out) {
  KILN_CHECK(x.dim() >= 1, op, "expected input of at least 1 dim, got ", dims_str(x.sizes()));
  KILN_CHECK(w.dim() == 2, op, "expected weight of 2 dims [out_features, in_features], got ",
             dims_str(w.sizes()));
  LinearShape s;
  s.K = x.size(x.dim() - 1);
  s.N = w.size(0);
  KILN_CHECK(w.size(1) == s.K, op, "expected weight with ", s.K,
             " in_features (input's last dim), got ", dims_str(w.sizes()));
  s.M = s.K == 0 ? 0 : x.numel() / s.K;
  if (s.K == 0) {
    s.M = 1;
    for (int64_t d = 0; d + 1 < x.dim(); ++d) s.M *= x.size(d);
  }
  std::vector<int64_t> want(x.sizes().begin(), x.sizes().end());
  want.back() = s.N;
  nn_detail::check_shape(op, out, want, "out");
  return s;
}

// ---- qlinear_dynamic ----------------------------------------------------------------------------

// A 0-dim tensor holding v.
template <typename T>
TensorImplPtr scalar_of(T v, DType dtype) {
  auto t = empty(Dims{}, dtype);
  *t->data_ptr<T>() = v;
  return t;
}

// One qlinear_dynamic call's operands: x quantized with its own range, the epilogue constants
// (mult = x_scale * w_scale[o]) and the float bias padded like them.
struct DynamicCall {
  LinearShape s;
  TensorImplPtr xq;  // uint8, x's shape
  Requant rq;
  std::vector<float> fbias;
};

// `unit`: the weights' constants checked once when they were prepared (requant_of at input and
// output scale 1, input zero point 0: mult = w_scale), or null (checked now).
DynamicCall dynamic_call(std::string_view op, const TensorImpl& x, const TensorImpl& w,
                         const TensorImpl& w_scale, const TensorImpl& w_zero_point,
                         const TensorImpl* bias, const TensorImpl& out, const Requant* unit) {
  KILN_CHECK(x.dtype() == DType::Float32, op, "expected input of dtype float32, got ",
             dtype_name(x.dtype()));
  KILN_CHECK(out.dtype() == DType::Float32, op, "expected out of dtype float32, got ",
             dtype_name(out.dtype()));
  DynamicCall d;
  d.s = linear_shape(op, x, w, out);
  auto xc = views::contiguous(x);
  const float* xp = xc->data_ptr<float>();
  const int64_t n = xc->numel();
  float lo = 0.0f, hi = 0.0f;
  bool finite = true;
  for (int64_t i = 0; i < n; ++i) {
    finite &= std::isfinite(xp[i]);
    lo = std::min(lo, xp[i]);
    hi = std::max(hi, xp[i]);
  }
  KILN_CHECK(finite, op, "expected finite input values (its range gives the quantization), got ",
             "NaN or Inf");
  const AffineParams xq = affine_qparams(lo, hi, 0, 255);
  d.xq = empty(x.sizes(), DType::UInt8);
  if (unit) {
    // requant_of's values without its checks and conversions: mult = x_scale * w_scale / 1.
    d.rq = *unit;
    d.rq.x_zp = static_cast<int32_t>(xq.zero_point);
    for (float& m : d.rq.mult) {
      const float w_scale_o = m;
      m = xq.scale * w_scale_o;
      KILN_CHECK(std::isfinite(m) && m > 0.0f, op,
                 "expected input scale * weight scale to be a positive finite float32, got ",
                 xq.scale, " * ", w_scale_o);
    }
  } else {
    auto xs = scalar_of<float>(xq.scale, DType::Float32);
    auto xz = scalar_of<int32_t>(static_cast<int32_t>(xq.zero_point), DType::Int32);
    auto one = scalar_of<float>(1.0f, DType::Float32);
    auto zero = scalar_of<int32_t>(0, DType::Int32);
    // Requantized to scale 1: mult = x_scale * w_scale[o] / 1, the dequantizing factor.
    const QuantizedOperands q{xs.get(), xz.get(),  &w_scale,   &w_zero_point,
                              nullptr,  one.get(), zero.get(), false};
    d.rq = requant_of(op, *d.xq, w, d.s.K, q, DType::UInt8);
  }
  quant_detail::quantize_bytes(xp, n, xq.scale, static_cast<int32_t>(xq.zero_point),
                               d.xq->data_ptr<uint8_t>());
  d.fbias.assign(d.rq.mult.size(), 0.0f);
  if (bias) {
    KILN_CHECK(bias->dtype() == DType::Float32, op, "expected bias of dtype float32, got ",
               dtype_name(bias->dtype()));
    KILN_CHECK(bias->dim() == 1 && bias->size(0) == d.s.N, op, "expected bias of shape [", d.s.N,
               "], got ", dims_str(bias->sizes()));
    auto b = views::contiguous(*bias);
    std::copy_n(b->data_ptr<float>(), d.s.N, d.fbias.begin());
  }
  return d;
}

// ---- qconv2d ------------------------------------------------------------------------------------

// The geometry in NCHW terms for either layout (channels-last sizes read as their NCHW dims).
ConvGeom qconv_geom(std::string_view op, const TensorImpl& x, const TensorImpl& w,
                    const Conv2dParams& p, const TensorImpl& out) {
  Conv2dParams nchw = p;
  nchw.channels_last = false;
  Dims in(x.sizes());
  if (p.channels_last) {
    KILN_CHECK(in.size() == 4, op, "expected channels-last input of 4 dims (N,H,W,C), got ",
               dims_str(x.sizes()));
    in = Dims{in[0], in[3], in[1], in[2]};
  }
  const ConvGeom g = conv_detail::make_geom(op, in, w.sizes(), nchw);
  nn_detail::check_shape(op, out,
                         p.channels_last ? std::vector<int64_t>{g.N, g.Ho, g.Wo, g.O}
                                         : std::vector<int64_t>{g.N, g.O, g.Ho, g.Wo},
                         "out");
  return g;
}

// A channels-last 1x1 convolution of stride 1 without padding or groups: the product of the
// images' pixel rows (C bytes each) with the weights.
bool pointwise_rows(const Conv2dParams& p, const TensorImpl& w) {
  return p.channels_last && p.groups == 1 && w.dim() == 4 && w.size(2) == 1 && w.size(3) == 1 &&
         p.stride_h == 1 && p.stride_w == 1 && p.pad_h == 0 && p.pad_w == 0;
}
// Its orientation: as qlinear computes it (pixel rows as A, the output channels across B's
// columns, results already channels-last) unless the channels would fill whole tiles of nr
// columns worse than the family's column bound (16 or 24 of 32): then the weights are A and the
// pixels B's columns (both packs a word per quad from the rows: byte quads with K % 4 == 0), the
// results transposed afterwards.
bool pointwise_by_rows(const QFamily& f, int64_t O, int64_t K) {
  if (f.group != 4 || K % 4 != 0 || f.direct_max_column_ratio <= 0.0) return true;
  return double(ceil_div(O, f.nr) * f.nr) <= f.direct_max_column_ratio * double(O);
}

}  // namespace

// ---- Prepared weights ---------------------------------------------------------------------------

namespace {

std::shared_ptr<PreparedQWeight> pack_weight(const QFamily& f, const TensorImpl& wc,
                                             const Requant& rq, int64_t groups, int64_t K,
                                             bool conv) {
  auto pw = std::make_shared<PreparedQWeight>();
  pw->family = &f;
  pw->label = f.name;
  pw->groups = groups;
  pw->rows = wc.size(0) / groups;
  pw->K = K;
  pw->width = conv ? f.mr : f.nr;
  pw->a_operand = conv;
  const Layout l = pw->layout();
  pw->words.resize(groups * l.total_words());
  for (int64_t grp = 0; grp < groups; ++grp) {
    const int64_t o0 = grp * pw->rows;
    int32_t* dst = pw->words.data() + grp * l.total_words();
    if (f.group == 4)
      pack<int8_t>(
          l, wc.data_ptr<int8_t>() + o0 * K, K, [](int64_t, int8_t v) { return v; }, dst);
    else
      pack_minus_zero_point(
          l, wc, [zp = rq.w_zp.data() + o0](int64_t i) { return zp[i]; }, dst, o0 * K);
  }
  if (f.group == 4) pw->sums = channel_sums(wc.data_ptr<int8_t>(), wc.size(0), K);
  return pw;
}

// Whether qconv2d runs the direct depthwise kernel (qconv_depthwise.cpp) for weights `w` in
// `groups` groups: one input and one output channel per group, int8, and few enough taps for its
// exact float32 sums. Its prepared weights are a marker naming it (nothing is packed).
bool direct_depthwise(const TensorImpl& w, int64_t groups) {
  return groups > 1 && w.dim() == 4 && w.size(0) == groups && w.size(1) == 1 &&
         w.dtype() == DType::Int8 && w.size(2) * w.size(3) <= kMaxDepthwiseTaps;
}
const QFamily kDirectDepthwise{"depthwise-direct", 1, 1, 4, nullptr};

// The prepared weights to use: `prepared` when given (checked against this call), else packed now.
// `rows`: the activations' rows for a linear (family_for), 0 for a conv.
PreparedQWeightPtr weights_for(std::string_view op, const PreparedQWeight* prepared,
                               const TensorImpl& wc, const Requant& rq, int64_t groups, int64_t K,
                               bool conv, int64_t rows = 0) {
  if (!prepared)
    return pack_weight(family_for(quads_allowed(wc, rq), rows), wc, rq, groups, K, conv);
  KILN_CHECK(!prepared->direct && prepared->groups == groups &&
                 prepared->rows * groups == wc.size(0) && prepared->K == K &&
                 prepared->a_operand == conv &&
                 prepared->width == (conv ? prepared->family->mr : prepared->family->nr),
             op, "expected weights prepared for ", wc.size(0), " channels of ", K, " values in ",
             groups, " groups, got ones for ", prepared->rows * prepared->groups, " of ",
             prepared->K, " in ", prepared->groups);
  KILN_CHECK(prepared->family->group != 4 || quads_allowed(wc, rq), op,
             "expected int8 weights with zero points 0 for weights prepared as byte quads");
  return PreparedQWeightPtr(PreparedQWeightPtr(), prepared);  // not owned: the caller's
}

// `prepared`, direct convolution weights, checked against this call's.
PreparedQWeightPtr checked_direct(std::string_view op, const PreparedQWeight& prepared,
                                  const TensorImpl& wc, const Requant& rq, const Conv2dParams& p) {
  const int64_t O = wc.size(0), C = wc.size(1), taps = wc.size(2) * wc.size(3);
  KILN_CHECK(prepared.rows == O && prepared.channels == direct_row_bytes(wc.size(3), C) &&
                 prepared.K == wc.size(2) * prepared.channels &&
                 direct_conv_fits(*prepared.family, wc, p) && quads_allowed(wc, rq),
             op, "expected direct weights prepared for ", O, " channels of ", C, "x", taps,
             " int8 values, got ones for ", prepared.rows, " of ", prepared.K);
  return PreparedQWeightPtr(PreparedQWeightPtr(), &prepared);  // not owned: the caller's
}

}  // namespace

PreparedQWeightPtr prepare_qlinear_weight(const TensorImpl& w, const QuantizedOperands& q,
                                          DType x_dtype, DType out_dtype, int64_t rows) {
  constexpr std::string_view op = "qlinear";
  KILN_CHECK(w.dim() == 2, op, "expected weight of 2 dims, got ", dims_str(w.sizes()));
  auto x = empty(Dims{0, w.size(1)}, x_dtype);
  const Requant rq = requant_of(op, *x, w, w.size(1), q, out_dtype);
  auto wc = views::contiguous(w);
  return pack_weight(family_for(quads_allowed(*wc, rq), rows), *wc, rq, 1, w.size(1), false);
}

PreparedQWeightPtr prepare_qconv2d_weight(const TensorImpl& w, const QuantizedOperands& q,
                                          const Conv2dParams& p, DType x_dtype, DType out_dtype) {
  constexpr std::string_view op = "qconv2d";
  KILN_CHECK(w.dim() == 4 && p.groups >= 1 && w.size(0) % p.groups == 0, op,
             "expected weight of 4 dims with output channels divisible by groups (", p.groups,
             "), got ", dims_str(w.sizes()));
  const int64_t K = w.size(1) * w.size(2) * w.size(3);
  auto x = empty(Dims{0, w.size(1) * p.groups, 1, 1}, x_dtype);
  const Requant rq = requant_of(op, *x, w, K, q, out_dtype);
  if (direct_depthwise(w, p.groups)) {  // reads the weights as they are: nothing to pack
    auto pw = std::make_shared<PreparedQWeight>();
    pw->family = &kDirectDepthwise;
    pw->label = kDirectDepthwise.name;
    return pw;
  }
  auto wc = views::contiguous(w);
  const bool quads_ok = quads_allowed(*wc, rq);
  const QFamily& f = family_for(quads_ok);
  if (pointwise_rows(p, w))  // qlinear's operand, or the weights as A
    return pack_weight(f, *wc, rq, 1, K, !pointwise_by_rows(f, w.size(0), K));
  if (quads_ok && direct_conv_fits(f, w, p)) return pack_direct_weight(f, *wc);
  return pack_weight(f, *wc, rq, p.groups, K, true);
}

size_t prepared_nbytes(const PreparedQWeight& w) {
  return w.nbytes();
}
const char* prepared_family(const PreparedQWeight& w) {
  return w.label.c_str();
}

// ---- Public entry points ------------------------------------------------------------------------

namespace {

// out[M, N] = the activations xc (contiguous, K per row) times the prepared weights, requantized
// (or dequantized with `fbias` when it is given: float32 out).
void linear_tiles(const PreparedQWeight& pw, const Requant& rq, const TensorImpl& xc,
                  const LinearShape& s, void* out, const float* fbias) {
  // B: the weights (columns: output features); A: the activations.
  const QFamily& f = *pw.family;
  const Layout la = a_layout(f, s.M, s.K);
  const bool x_signed = xc.dtype() == DType::Int8;
  // Rows whose bytes are the family's quads as they lie are read in place: nothing packed.
  const bool in_place =
      f.group == 4 && f.kernel_a_rows && !la.rows && la.K % 4 == 0 && x_signed == f.signed_quads;
  std::optional<ConvScratch<int32_t>> a;  // the packed activations (none in place)
  if (!in_place) a.emplace(la.total_words());
  std::vector<int32_t> bias;
  if (f.group == 4) {
    // The activations as the family's quads, their zero point through the bias.
    if (!in_place) pack_activations_quads(f, la, xc, a->get());
    bias = quad_bias(rq, pw.sums, quad_zero_point(f, rq, x_signed));
  } else if (!la.rows && la.group == 2 && la.K % 2 == 0) {
    if (x_signed)
      pack_row_pairs(la, xc.data_ptr<int8_t>(), rq.x_zp, a->get());
    else
      pack_row_pairs(la, xc.data_ptr<uint8_t>(), rq.x_zp, a->get());
    bias = rq.bias;
  } else {
    pack_minus_zero_point(
        la, xc, [zp = rq.x_zp](int64_t) { return zp; }, a->get());
    bias = rq.bias;
  }
  TileOut t = tile_out(rq, bias, out, s.N, false);
  if (fbias) {
    t.float_out = true;
    t.fbias = fbias;
  }
  if (!in_place) return run_tiles(f, f.kernel, s.M, s.N, la.words(), a->get(), pw.words.data(), t);
  const auto* x = static_cast<const uint8_t*>(xc.data());
  for_tiles(f, s.M, s.N, la.words(), t,
            [&](int64_t sliver, int64_t q, int m, int n, const TileOut& tile) {
              f.kernel_a_rows(la.words(), x + sliver * f.mr * s.K, s.K,
                              pw.words.data() + q * la.words() * f.nr, m, n, tile);
            });
}

}  // namespace

void qlinear_out(const TensorImpl& x, const TensorImpl& w, const QuantizedOperands& q,
                 TensorImpl& out, const PreparedQWeight* prepared) {
  constexpr std::string_view op = "qlinear";
  const LinearShape s = linear_shape(op, x, w, out);
  const Requant rq = requant_of(op, x, w, s.K, q, out.dtype());
  nn_detail::OutTarget y(&out);
  if (s.M == 0 || s.N == 0) return y.finish();
  auto xc = views::contiguous(x);
  auto wc = views::contiguous(w);
  const PreparedQWeightPtr pw = weights_for(op, prepared, *wc, rq, 1, s.K, false, s.M);
  linear_tiles(*pw, rq, *xc, s, y.ptr, nullptr);
  y.finish();
}

void qlinear_dynamic_out(const TensorImpl& x, const TensorImpl& w, const TensorImpl& w_scale,
                         const TensorImpl& w_zero_point, const TensorImpl* bias, TensorImpl& out,
                         const PreparedQWeight* prepared) {
  constexpr std::string_view op = "qlinear_dynamic";
  const Requant* unit = prepared && prepared->unit ? &*prepared->unit : nullptr;
  const DynamicCall d = dynamic_call(op, x, w, w_scale, w_zero_point, bias, out, unit);
  nn_detail::OutTarget y(&out);
  if (d.s.M == 0 || d.s.N == 0) return y.finish();
  auto wc = views::contiguous(w);
  const PreparedQWeightPtr pw = weights_for(op, prepared, *wc, d.rq, 1, d.s.K, false, d.s.M);
  linear_tiles(*pw, d.rq, *d.xq, d.s, y.ptr, d.fbias.data());
  y.finish();
}

PreparedQWeightPtr prepare_qlinear_dynamic_weight(const TensorImpl& w, const TensorImpl& w_scale,
                                                  const TensorImpl& w_zero_point, int64_t rows) {
  constexpr std::string_view op = "qlinear_dynamic";
  KILN_CHECK(w.dim() == 2, op, "expected weight of 2 dims, got ", dims_str(w.sizes()));
  // Any input zero point works with the packed weights (it enters through the bias per call).
  auto one = scalar_of<float>(1.0f, DType::Float32);
  auto zero = scalar_of<int32_t>(0, DType::Int32);
  const QuantizedOperands q{one.get(), zero.get(), &w_scale,   &w_zero_point,
                            nullptr,   one.get(),  zero.get(), false};
  auto x = empty(Dims{0, w.size(1)}, DType::UInt8);
  const Requant rq = requant_of(op, *x, w, w.size(1), q, DType::UInt8);
  auto wc = views::contiguous(w);
  auto pw = pack_weight(family_for(quads_allowed(*wc, rq), rows), *wc, rq, 1, w.size(1), false);
  pw->unit = rq;
  return pw;
}

namespace {

void qconv2d_impl(std::string_view op, const TensorImpl& x, const TensorImpl& w,
                  const QuantizedOperands& q, const Conv2dParams& p, DType conv_dtype,
                  TensorImpl& out, const PreparedQWeight* prepared, const ResidualAdd* add);

// Images of `rows` x `cols` bytes each transposed to `cols` x `rows` (NHWC <-> NCHW).
void transpose_images(const void* src, void* dst, int64_t N, int64_t rows, int64_t cols) {
  parallel_for(0, N, 1, [=](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n)
      transpose_bytes(static_cast<const uint8_t*>(src) + n * rows * cols, cols,
                      static_cast<uint8_t*>(dst) + n * rows * cols, rows, rows, cols, 0);
  });
}

// qconv2d_impl on channels-last xc (contiguous) into channels-last out: the depthwise, 1x1 and
// direct kernels read and write that layout; any other convolution runs on NCHW copies.
void qconv2d_channels_last(std::string_view op, const ConvGeom& g, const TensorImpl& xc,
                           const TensorImpl& wc, const QuantizedOperands& q, const Conv2dParams& p,
                           const Requant& rq, DType conv_dtype, void* out,
                           const PreparedQWeight* prepared, const ResidualAdd* add) {
  const int64_t image = g.O * g.HoWo();
  if (direct_depthwise(wc, g.G) &&
      qconv2d_depthwise_channels_last(g, xc, wc.data_ptr<int8_t>(), rq, out, add))
    return;
  const bool quads_ok = quads_allowed(wc, rq);
  if (pointwise_rows(p, wc)) {
    const LinearShape s{g.N * g.HW(), g.C, g.O};
    const bool by_rows =
        prepared ? !prepared->a_operand : pointwise_by_rows(family_for(quads_ok, s.M), g.O, g.C);
    const PreparedQWeightPtr pw = weights_for(op, prepared, wc, rq, 1, g.C, !by_rows, s.M);
    const QFamily& f = *pw->family;
    // Weights prepared as A for a family without byte quads (an NCHW preparation) run on the
    // NCHW copies below.
    const bool transposed = !by_rows && f.group == 4 && s.K % 4 == 0;
    if (by_rows) {
      linear_tiles(*pw, rq, xc, s, out, nullptr);
    } else if (transposed) {  // out^T [O, M] = weights . pixel columns, then transposed
      const Layout lb = b_layout(f, s.M, s.K);
      ConvScratch<int32_t> b(lb.total_words());
      const bool x_signed = xc.dtype() == DType::Int8;
      pack_row_quads(lb, static_cast<const uint8_t*>(xc.data()),
                     x_signed != f.signed_quads ? 0x80808080u : 0u, b.get());
      const std::vector<int32_t> bias = quad_bias(rq, pw->sums, quad_zero_point(f, rq, x_signed));
      ConvScratch<uint8_t> yt(g.O * s.M);
      run_tiles(f, f.kernel_b_u8, g.O, s.M, pw->layout().words(), pw->words.data(), b.get(),
                tile_out(rq, bias, yt.get(), s.M, true));
      transpose_images(yt.get(), out, 1, g.O, s.M);
    }
    if (by_rows || transposed) {
      if (add) add->apply_planes(out, 0, g.N, image);
      return;
    }
  }
  if (!pointwise_rows(p, wc) &&
      (prepared ? prepared->direct : quads_ok && direct_conv_fits(family_for(true), wc, p))) {
    const PreparedQWeightPtr pd = prepared ? checked_direct(op, *prepared, wc, rq, p)
                                           : pack_direct_weight(family_for(true), wc);
    const int32_t q_zp = quad_zero_point(*pd->family, rq, xc.dtype() == DType::Int8);
    qconv2d_direct(g, xc, *pd, rq, quad_bias(rq, pd->sums, q_zp), q_zp, out, add, true);
    return;
  }
  // Everything else (grouped, im2col, depthwise beyond the ring's bound) on NCHW copies.
  auto xn = empty(Dims{g.N, g.C, g.H, g.W}, xc.dtype());
  auto yn = empty(Dims{g.N, g.O, g.Ho, g.Wo}, conv_dtype);
  transpose_images(xc.data(), xn->data(), g.N, g.HW(), g.C);
  Conv2dParams nchw = p;
  nchw.channels_last = false;
  qconv2d_impl(op, *xn, wc, q, nchw, conv_dtype, *yn, prepared, nullptr);
  transpose_images(yn->data(), out, g.N, g.O, g.HoWo());
  if (add) add->apply_planes(out, 0, g.N, image);
}

// qconv2d_out, its result requantized to conv_dtype; with `add` the residual added to each
// image's output as soon as it is written, while it is in cache (out then holds the add's
// dtype, one byte per element either way).
void qconv2d_impl(std::string_view op, const TensorImpl& x, const TensorImpl& w,
                  const QuantizedOperands& q, const Conv2dParams& p, DType conv_dtype,
                  TensorImpl& out, const PreparedQWeight* prepared, const ResidualAdd* add) {
  const ConvGeom g = qconv_geom(op, x, w, p, out);
  const Requant rq = requant_of(op, x, w, g.K(), q, conv_dtype);
  nn_detail::OutTarget y(&out);
  if (g.N == 0 || g.O == 0) return y.finish();
  auto xc = views::contiguous(x);
  auto wc = views::contiguous(w);
  if (p.channels_last) {
    qconv2d_channels_last(op, g, *xc, *wc, q, p, rq, conv_dtype, y.ptr, prepared, add);
    return y.finish();
  }
  const bool x_signed = xc->dtype() == DType::Int8;
  const int64_t K = g.K(), HoWo = g.HoWo();
  // A: the weights (rows: output channels of one group); B: one image's columns of one group.
  if (direct_depthwise(*wc, g.G)) {
    qconv2d_depthwise(g, *xc, wc->data_ptr<int8_t>(), rq, y.ptr, add);
    return y.finish();
  }
  const bool quads_ok = quads_allowed(*wc, rq);
  if (prepared ? prepared->direct : quads_ok && direct_conv_fits(family_for(true), *wc, p)) {
    const PreparedQWeightPtr pd = prepared ? checked_direct(op, *prepared, *wc, rq, p)
                                           : pack_direct_weight(family_for(true), *wc);
    const int32_t q_zp = quad_zero_point(*pd->family, rq, x_signed);
    qconv2d_direct(g, *xc, *pd, rq, quad_bias(rq, pd->sums, q_zp), q_zp, y.ptr, add);
    return y.finish();
  }
  const PreparedQWeightPtr pw = weights_for(op, prepared, *wc, rq, g.G, K, true);
  const QFamily& f = *pw->family;
  const bool quads = f.group == 4;
  const Layout la = pw->layout(), lb = b_layout(f, HoWo, K);
  const int32_t* a = pw->words.data();
  ConvScratch<int32_t> b(lb.total_words());
  const int32_t q_zp = quad_zero_point(f, rq, x_signed);
  const std::vector<int32_t> bias = quads ? quad_bias(rq, pw->sums, q_zp) : rq.bias;
  for (int64_t n = 0; n < g.N; ++n) {
    for (int64_t grp = 0; grp < g.G; ++grp) {
      const int64_t x_off = (n * g.C + grp * g.Cg) * g.HW();
      if (quads)
        pack_conv_quads(f, g, lb, *xc, x_off, q_zp, b.get());
      else if (x_signed)
        pack_conv_columns<int16_t>(
            g, lb, xc->data_ptr<int8_t>() + x_off,
            [zp = rq.x_zp](int8_t v) { return int16_t(v - zp); }, int16_t(0), b.get());
      else
        pack_conv_columns<int16_t>(
            g, lb, xc->data_ptr<uint8_t>() + x_off,
            [zp = rq.x_zp](uint8_t v) { return int16_t(v - zp); }, int16_t(0), b.get());
      TileOut t =
          tile_out(rq, bias, static_cast<char*>(y.ptr) + (n * g.O + grp * g.Og) * HoWo, HoWo, true);
      t.mult += grp * g.Og;
      t.bias += grp * g.Og;
      run_tiles(f, quads ? f.kernel_b_u8 : f.kernel, g.Og, HoWo, la.words(),
                a + grp * la.total_words(), b.get(), t);
    }
    if (add) add->apply_planes(y.ptr, n * g.O, g.O, HoWo);
  }
  y.finish();
}

}  // namespace

void qconv2d_out(const TensorImpl& x, const TensorImpl& w, const QuantizedOperands& q,
                 const Conv2dParams& p, TensorImpl& out, const PreparedQWeight* prepared) {
  qconv2d_impl("qconv2d", x, w, q, p, out.dtype(), out, prepared, nullptr);
}

void qconv2d_add_out(const TensorImpl& x, const TensorImpl& w, const QuantizedOperands& q,
                     const Conv2dParams& p, DType conv_dtype, const TensorImpl& other,
                     const QResidualOperands& r, TensorImpl& out, const PreparedQWeight* prepared) {
  constexpr std::string_view op = "qconv2d_add";
  ResidualAdd add;
  add.k =
      add_constants(op, conv_dtype, q.y_scale, q.y_zero_point, other.dtype(), r.other_scale,
                    r.other_zero_point, out.dtype(), r.output_scale, r.output_zero_point, r.relu);
  KILN_CHECK(std::ranges::equal(other.sizes(), out.sizes()), op,
             "expected other of the output's shape ", dims_str(out.sizes()), ", got ",
             dims_str(other.sizes()));
  auto oc = views::contiguous(other);
  add.other = static_cast<const uint8_t*>(oc->data());
  qconv2d_impl(op, x, w, q, p, conv_dtype, out, prepared, &add);
}

// ---- References: the formula as written ---------------------------------------------------------

void qlinear_reference_out(const TensorImpl& x, const TensorImpl& w, const QuantizedOperands& q,
                           TensorImpl& out) {
  constexpr std::string_view op = "qlinear";
  const LinearShape s = linear_shape(op, x, w, out);
  const Requant rq = requant_of(op, x, w, s.K, q, out.dtype());
  nn_detail::OutTarget y(&out);
  auto xc = views::contiguous(x);
  auto wc = views::contiguous(w);
  const Int8Data xd = data_of(xc), wd = data_of(wc);
  for (int64_t i = 0; i < s.M; ++i) {
    for (int64_t o = 0; o < s.N; ++o) {
      int32_t acc = 0;
      for (int64_t k = 0; k < s.K; ++k)
        acc += (xd[i * s.K + k] - rq.x_zp) * (wd[o * s.K + k] - rq.w_zp[o]);
      const int32_t v = requantize_value(acc, rq.bias[o], rq.mult[o], rq.lo, rq.hi, rq.y_zp);
      store_int8(y.ptr, i * s.N + o, rq.out_signed, v);
    }
  }
  y.finish();
}

void qlinear_dynamic_reference_out(const TensorImpl& x, const TensorImpl& w,
                                   const TensorImpl& w_scale, const TensorImpl& w_zero_point,
                                   const TensorImpl* bias, TensorImpl& out) {
  constexpr std::string_view op = "qlinear_dynamic";
  const DynamicCall d = dynamic_call(op, x, w, w_scale, w_zero_point, bias, out, nullptr);
  nn_detail::OutTarget y(&out);
  auto wc = views::contiguous(w);
  const Int8Data xd = data_of(d.xq), wd = data_of(wc);
  float* yp = static_cast<float*>(y.ptr);
  for (int64_t i = 0; i < d.s.M; ++i) {
    for (int64_t o = 0; o < d.s.N; ++o) {
      int32_t acc = 0;
      for (int64_t k = 0; k < d.s.K; ++k)
        acc += (xd[i * d.s.K + k] - d.rq.x_zp) * (wd[o * d.s.K + k] - d.rq.w_zp[o]);
      yp[i * d.s.N + o] = dequantize_acc(acc, 0, d.rq.mult[o], d.fbias[o]);
    }
  }
  y.finish();
}

void qconv2d_reference_out(const TensorImpl& x, const TensorImpl& w, const QuantizedOperands& q,
                           const Conv2dParams& p, TensorImpl& out) {
  constexpr std::string_view op = "qconv2d";
  const ConvGeom g = qconv_geom(op, x, w, p, out);
  const Requant rq = requant_of(op, x, w, g.K(), q, out.dtype());
  nn_detail::OutTarget y(&out);
  auto xc = views::contiguous(x);
  auto wc = views::contiguous(w);
  const Int8Data xd = data_of(xc), wd = data_of(wc);
  for (int64_t n = 0; n < g.N; ++n) {
    for (int64_t o = 0; o < g.O; ++o) {
      const int64_t grp = o / g.Og;
      for (int64_t oh = 0; oh < g.Ho; ++oh) {
        for (int64_t ow = 0; ow < g.Wo; ++ow) {
          int32_t acc = 0;
          for (int64_t c = 0; c < g.Cg; ++c) {
            for (int64_t kh = 0; kh < g.KH; ++kh) {
              for (int64_t kw = 0; kw < g.KW; ++kw) {
                const int64_t ih = oh * g.sh - g.ph + kh * g.dh, iw = ow * g.sw - g.pw + kw * g.dw;
                const int64_t ch = grp * g.Cg + c;
                const int64_t at = p.channels_last ? ((n * g.H + ih) * g.W + iw) * g.C + ch
                                                   : ((n * g.C + ch) * g.H + ih) * g.W + iw;
                const int32_t xv = ih >= 0 && ih < g.H && iw >= 0 && iw < g.W ? xd[at] : rq.x_zp;
                acc += (xv - rq.x_zp) * (wd[((o * g.Cg + c) * g.KH + kh) * g.KW + kw] - rq.w_zp[o]);
              }
            }
          }
          const int32_t v = requantize_value(acc, rq.bias[o], rq.mult[o], rq.lo, rq.hi, rq.y_zp);
          const int64_t i = p.channels_last ? ((n * g.Ho + oh) * g.Wo + ow) * g.O + o
                                            : ((n * g.O + o) * g.Ho + oh) * g.Wo + ow;
          store_int8(y.ptr, i, rq.out_signed, v);
        }
      }
    }
  }
  y.finish();
}

// ---- ISA control --------------------------------------------------------------------------------

bool qgemm_isa_available(QGemmIsa isa) {
  switch (isa) {
    case QGemmIsa::Amx:
      return host_has_amx();
    case QGemmIsa::Avx512Vnni:
      return host_has_vnni();
    case QGemmIsa::AvxVnni:
      return host_has_avxvnni();
    case QGemmIsa::NeonI8mm:
      return host_has_i8mm();
    case QGemmIsa::NeonDot:
      return host_has_dotprod();
    case QGemmIsa::Avx2:
      return host_has_avx2();
    default:
      return true;
  }
}

void set_qgemm_isa(QGemmIsa isa) {
  KILN_CHECK(qgemm_isa_available(isa), "qgemm", "expected an ISA available on this CPU, got ",
             qgemm_isa_name(isa), " (not available)");
  g_forced.store(isa, std::memory_order_release);
}

QGemmIsa qgemm_isa() {
  return resolve(g_forced.load(std::memory_order_acquire));
}

const char* qgemm_isa_name(QGemmIsa isa) {
  switch (isa) {
    case QGemmIsa::Auto:
      return "auto";
    case QGemmIsa::Amx:
      return "amx-int8";
    case QGemmIsa::Avx512Vnni:
      return "avx512-vnni";
    case QGemmIsa::AvxVnni:
      return "avx-vnni";
    case QGemmIsa::NeonI8mm:
      return "neon-i8mm";
    case QGemmIsa::NeonDot:
      return "neon-dot";
    case QGemmIsa::Avx2:
      return "avx2";
    case QGemmIsa::Portable:
      break;
  }
  return "portable";
}

}  // namespace kiln::kernels
