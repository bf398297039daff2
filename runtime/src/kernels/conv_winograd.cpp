// Winograd F(4x4, 3x3) for 3x3 stride-1 convolutions (Lavin & Gray, "Fast Algorithms for
// Convolutional Neural Networks", CVPR 2016), on a weight transformed once (prepared weights).
//
// Every 4x4 output tile is Y = Aᵀ [ Σ_c U[o, c] ⊙ V[c] ] A with U = G g Gᵀ (the 6x6 transformed
// 3x3 filter) and V = Bᵀ d B (the 6x6 input tile d). For each of the 36 positions ξ of the 6x6
// tile the sum over channels is a GEMM, M_ξ[O, tiles] = U_ξ[O, C] · V_ξ[C, tiles], which runs
// on the sgemm microkernels with U_ξ packed at prepare time: 36 * C * O multiply-adds per 16
// outputs instead of 144 * C * O.
//
// Tiles are numbered (image, tile row, tile column) and processed in blocks of whole tile rows:
//   1. input transform, parallel over channels: V_ξ[c, block tiles] (row-major, ldv), each 6x6
//      transform done as rows then columns on 8 tiles at once (AVX2 vectors; the stride-4
//      columns come out of a 4-way deinterleave);
//   2. per sliver of MR output channels, parallel: the 36 GEMMs into a per-thread M buffer, then
//      the output transform, bias, residual and activation straight into y.
// Tile edges past the output (Ho, Wo not multiples of 4) are computed on zero padding and never
// stored.
#include "simd_compat.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "conv_internal.h"
#include "gemm_internal.h"
#include "kiln/runtime/error.h"
#include "kiln/runtime/target.h"
#include "kiln/runtime/thread_pool.h"

namespace kiln::kernels::conv_detail {
namespace {

constexpr int kXi = 36;  // 6x6 transformed tile
constexpr int64_t kV = 8;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
int64_t round_up(int64_t a, int64_t b) {
  return ceil_div(a, b) * b;
}

// ---- 1D transforms (6 -> 6, 6 -> 4), applied to rows then columns --------------------------

// Bᵀ d for the interpolation points 0, ±1, ±2 (and ∞).
struct InputT {
  __m256 v[6];
  InputT(const __m256 d[6]) {
    const __m256 four = _mm256_set1_ps(4.0f), five = _mm256_set1_ps(5.0f);
    const __m256 two = _mm256_set1_ps(2.0f);
    // v0 = 4 d0 - 5 d2 + d4;  v5 = 4 d1 - 5 d3 + d5
    v[0] = _mm256_fmadd_ps(four, d[0], _mm256_fnmadd_ps(five, d[2], d[4]));
    v[5] = _mm256_fmadd_ps(four, d[1], _mm256_fnmadd_ps(five, d[3], d[5]));
    // v1,2 = ∓(4 d1 + 4 d2 ... ): a = d4 - 4 d2, b = d3 - 4 d1 -> v1 = a + b, v2 = a - b
    const __m256 a = _mm256_fnmadd_ps(four, d[2], d[4]);
    const __m256 b = _mm256_fnmadd_ps(four, d[1], d[3]);
    v[1] = _mm256_add_ps(a, b);
    v[2] = _mm256_sub_ps(a, b);
    // v3,4: c = d4 - d2, e = 2 (d3 - d1) -> v3 = c + e, v4 = c - e
    const __m256 c = _mm256_sub_ps(d[4], d[2]);
    const __m256 e = _mm256_mul_ps(two, _mm256_sub_ps(d[3], d[1]));
    v[3] = _mm256_add_ps(c, e);
    v[4] = _mm256_sub_ps(c, e);
  }
};

// Aᵀ m: y0 = m0 + (m1 + m2) + (m3 + m4), y1 = (m1 - m2) + 2 (m3 - m4),
//       y2 = (m1 + m2) + 4 (m3 + m4),    y3 = (m1 - m2) + 8 (m3 - m4) + m5.
inline void output_t(const __m256 m[6], __m256 y[4]) {
  const __m256 s12 = _mm256_add_ps(m[1], m[2]), d12 = _mm256_sub_ps(m[1], m[2]);
  const __m256 s34 = _mm256_add_ps(m[3], m[4]), d34 = _mm256_sub_ps(m[3], m[4]);
  y[0] = _mm256_add_ps(_mm256_add_ps(m[0], s12), s34);
  y[1] = _mm256_fmadd_ps(_mm256_set1_ps(2.0f), d34, d12);
  y[2] = _mm256_fmadd_ps(_mm256_set1_ps(4.0f), s34, s12);
  y[3] = _mm256_add_ps(_mm256_fmadd_ps(_mm256_set1_ps(8.0f), d34, d12), m[5]);
}

// d[j][k] = row[4k + j] for j < 6, k < 8 (row holds 40 readable floats): tiles k = 0..7 of a row
// whose tiles start every 4 columns and span 6.
inline void deinterleave6(const float* row, __m256 d[6]) {
  const __m256 x0 = _mm256_loadu_ps(row);       // tiles 0, 1
  const __m256 x1 = _mm256_loadu_ps(row + 8);   // 2, 3
  const __m256 x2 = _mm256_loadu_ps(row + 16);  // 4, 5
  const __m256 x3 = _mm256_loadu_ps(row + 24);  // 6, 7
  const __m256 x4 = _mm256_loadu_ps(row + 32);  // 8, 9
  // q_i = [tile i | tile i + 4] (4 floats each)
  const __m256 q0 = _mm256_permute2f128_ps(x0, x2, 0x20);
  const __m256 q1 = _mm256_permute2f128_ps(x0, x2, 0x31);
  const __m256 q2 = _mm256_permute2f128_ps(x1, x3, 0x20);
  const __m256 q3 = _mm256_permute2f128_ps(x1, x3, 0x31);
  const __m256 q4 = _mm256_permute2f128_ps(x2, x4, 0x20);  // [tile 4 | tile 8]
  // 4x4 transposes within 128-bit lanes: column j of tiles (0..3 | 4..7).
  const __m256 t0 = _mm256_unpacklo_ps(q0, q1), t1 = _mm256_unpackhi_ps(q0, q1);
  const __m256 t2 = _mm256_unpacklo_ps(q2, q3), t3 = _mm256_unpackhi_ps(q2, q3);
  d[0] = _mm256_shuffle_ps(t0, t2, 0x44);
  d[1] = _mm256_shuffle_ps(t0, t2, 0xEE);
  d[2] = _mm256_shuffle_ps(t1, t3, 0x44);
  d[3] = _mm256_shuffle_ps(t1, t3, 0xEE);
  // Columns 4, 5 are columns 0, 1 of the next tile: the same from q1..q4.
  const __m256 s0 = _mm256_unpacklo_ps(q1, q2), s1 = _mm256_unpacklo_ps(q3, q4);
  d[4] = _mm256_shuffle_ps(s0, s1, 0x44);
  d[5] = _mm256_shuffle_ps(s0, s1, 0xEE);
}

// The inverse for 4 columns: out[4k + j] = y[j][k] for k < 8 (32 floats).
inline void interleave4(const __m256 y[4], __m256 out[4]) {
  const __m256 u0 = _mm256_unpacklo_ps(y[0], y[1]), u1 = _mm256_unpackhi_ps(y[0], y[1]);
  const __m256 u2 = _mm256_unpacklo_ps(y[2], y[3]), u3 = _mm256_unpackhi_ps(y[2], y[3]);
  const __m256 w0 = _mm256_shuffle_ps(u0, u2, 0x44);  // [tile 0 | tile 4]
  const __m256 w1 = _mm256_shuffle_ps(u0, u2, 0xEE);  // [1 | 5]
  const __m256 w2 = _mm256_shuffle_ps(u1, u3, 0x44);  // [2 | 6]
  const __m256 w3 = _mm256_shuffle_ps(u1, u3, 0xEE);  // [3 | 7]
  out[0] = _mm256_permute2f128_ps(w0, w1, 0x20);
  out[1] = _mm256_permute2f128_ps(w2, w3, 0x20);
  out[2] = _mm256_permute2f128_ps(w0, w1, 0x31);
  out[3] = _mm256_permute2f128_ps(w2, w3, 0x31);
}

inline __m256i lane_mask(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// ---- Geometry and blocking -------------------------------------------------------------------

struct Plan {
  int64_t tiles_h, tiles_w;  // per image
  int64_t rows_per_block;    // tile rows per block (a block never splits a tile row)
  int64_t tb;                // tiles per full block
  int64_t ldv;               // row stride of V_ξ and of the M buffer (floats)
  int64_t wbuf;              // floats per band row (padded input row + deinterleave overrun)
};

Plan make_plan(const ConvGeom& g, const gemm_detail::KernelSet& ks) {
  Plan p;
  p.tiles_h = ceil_div(g.Ho, 4);
  p.tiles_w = ceil_div(g.Wo, 4);
  // V (36 * C * tb floats, shared) and the per-thread M buffer (36 * MR * tb) sized by the
  // target description.
  const rt::TargetParams& params = rt::target_params();
  const int64_t by_v = params.winograd_v_bytes / (kXi * 4 * std::max<int64_t>(g.C, 1));
  const int64_t by_m = params.winograd_m_bytes / (kXi * 4 * ks.mr);
  const int64_t target = std::max<int64_t>(std::min(by_v, by_m), p.tiles_w);
  p.rows_per_block = std::max<int64_t>(1, target / p.tiles_w);
  p.rows_per_block = std::min(p.rows_per_block, g.N * p.tiles_h);
  p.tb = p.rows_per_block * p.tiles_w;
  // Room for the last panel's ragged columns and an 8-tile vector past the last tile; rows whose
  // byte stride is a multiple of 4 KB would alias in L1 (the microkernel walks down columns).
  p.ldv = round_up(p.tb + kV, ks.nr);
  if ((p.ldv * 4) % 4096 == 0) p.ldv += ks.nr;
  p.wbuf = 4 * round_up(p.tiles_w, kV) + 16;
  return p;
}

// Transformed 3x3 filter G g Gᵀ in double (then rounded once).
void transform_filter(const float* g3, double u[6][6]) {
  static const double G[6][3] = {{1.0 / 4, 0, 0},
                                 {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                 {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                 {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                 {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                 {0, 0, 1}};
  double t[6][3];
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 3; ++j)
      t[i][j] = G[i][0] * g3[0 * 3 + j] + G[i][1] * g3[1 * 3 + j] + G[i][2] * g3[2 * 3 + j];
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 6; ++j) u[i][j] = t[i][0] * G[j][0] + t[i][1] * G[j][1] + t[i][2] * G[j][2];
}

// ---- Stage 1: input transform of one channel over the block's tile rows ----------------------

void input_transform(const ConvGeom& g, const Plan& p, const float* xc, int64_t row0, int64_t rows,
                     float* vc, int64_t v_xi_stride, float* band) {
  float* bandrow[6];
  float* rrow[6];
  for (int r = 0; r < 6; ++r) {
    bandrow[r] = band + r * p.wbuf;
    rrow[r] = band + (6 + r) * p.wbuf;
  }
  for (int64_t k = 0; k < rows; ++k) {
    const int64_t tr = row0 + k, n = tr / p.tiles_h, th = tr % p.tiles_h;
    const float* plane = xc + n * g.C * g.HW();
    // The tile row's 6 zero-padded input rows.
    for (int r = 0; r < 6; ++r) {
      float* dst = bandrow[r];
      const int64_t ih = 4 * th - g.ph + r;
      if (ih < 0 || ih >= g.H) {
        std::memset(dst, 0, sizeof(float) * p.wbuf);
        continue;
      }
      std::memset(dst, 0, sizeof(float) * g.pw);
      std::memcpy(dst + g.pw, plane + ih * g.W, sizeof(float) * g.W);
      std::memset(dst + g.pw + g.W, 0, sizeof(float) * (p.wbuf - g.pw - g.W));
    }
    // Rows: R_ξh = (Bᵀ band)_ξh, 8 columns at a time.
    for (int64_t x = 0; x < p.wbuf; x += kV) {
      __m256 d[6];
      for (int r = 0; r < 6; ++r) d[r] = _mm256_loadu_ps(bandrow[r] + x);
      const InputT t(d);
      for (int r = 0; r < 6; ++r) _mm256_storeu_ps(rrow[r] + x, t.v[r]);
    }
    // Columns, 8 tiles at a time, into V_ξ[c, tile].
    float* vrow = vc + k * p.tiles_w;
    for (int64_t tw = 0; tw < p.tiles_w; tw += kV) {
      const int64_t lanes = std::min<int64_t>(kV, p.tiles_w - tw);
      const __m256i mask = lane_mask(lanes);
      for (int xh = 0; xh < 6; ++xh) {
        __m256 d[6];
        deinterleave6(rrow[xh] + 4 * tw, d);
        const InputT t(d);
        for (int xw = 0; xw < 6; ++xw) {
          float* dst = vrow + (xh * 6 + xw) * v_xi_stride + tw;
          if (lanes == kV)
            _mm256_storeu_ps(dst, t.v[xw]);
          else
            _mm256_maskstore_ps(dst, mask, t.v[xw]);
        }
      }
    }
  }
}

// ---- Stage 2 epilogue: output transform of one output channel ---------------------------------

inline __m256 activate(__m256 v, const ConvEpilogue& ep) {
  switch (ep.activation) {
    case Activation::Relu:
      return _mm256_max_ps(v, _mm256_setzero_ps());
    case Activation::Relu6:
      return _mm256_min_ps(_mm256_set1_ps(6.0f), _mm256_max_ps(_mm256_setzero_ps(), v));
    case Activation::Clamp:
      return _mm256_min_ps(_mm256_set1_ps(ep.clamp_max),
                           _mm256_max_ps(_mm256_set1_ps(ep.clamp_min), v));
    default:
      return v;
  }
}

bool vector_activation(Activation a) {
  return a == Activation::None || a == Activation::Relu || a == Activation::Relu6 ||
         a == Activation::Clamp;
}

// m: this channel's 36 rows of the M buffer (row ξ at m + ξ * m_stride), tile 0 = the block's
// first; writes y (and reads the residual) of output channel o.
void output_transform(const ConvGeom& g, const Plan& p, const float* m, int64_t m_stride,
                      int64_t row0, int64_t rows, int64_t o, const float* bias, const float* res,
                      float* y, const ConvEpilogue& ep) {
  const __m256 vbias = _mm256_set1_ps(bias ? bias[o] : 0.0f);
  const bool vec_act = vector_activation(ep.activation);
  for (int64_t k = 0; k < rows; ++k) {
    const int64_t tr = row0 + k, n = tr / p.tiles_h, th = tr % p.tiles_h;
    const int64_t plane = (n * g.O + o) * g.HoWo();
    for (int64_t tw = 0; tw < p.tiles_w; tw += kV) {
      const float* mt = m + k * p.tiles_w + tw;
      // Columns of the 6x6 (ξh) first: T[i][ξw] for output row i of the tile.
      __m256 t[4][6];
      for (int xw = 0; xw < 6; ++xw) {
        __m256 col[6], yc[4];
        for (int xh = 0; xh < 6; ++xh) col[xh] = _mm256_loadu_ps(mt + (xh * 6 + xw) * m_stride);
        output_t(col, yc);
        for (int i = 0; i < 4; ++i) t[i][xw] = yc[i];
      }
      const int64_t ow0 = 4 * tw, cols = std::min<int64_t>(4 * kV, g.Wo - ow0);
      for (int i = 0; i < 4; ++i) {
        const int64_t oh = 4 * th + i;
        if (oh >= g.Ho) break;
        __m256 yr[4], out[4];
        output_t(t[i], yr);
        interleave4(yr, out);
        float* dst = y + plane + oh * g.Wo + ow0;
        const float* rr = res ? res + plane + oh * g.Wo + ow0 : nullptr;
        for (int q = 0; q < 4 && q * kV < cols; ++q) {
          const int64_t lanes = std::min<int64_t>(kV, cols - q * kV);
          const __m256i mask = lane_mask(lanes);
          __m256 v = _mm256_add_ps(out[q], vbias);
          if (rr)
            v = _mm256_add_ps(v, lanes == kV ? _mm256_loadu_ps(rr + q * kV)
                                             : _mm256_maskload_ps(rr + q * kV, mask));
          if (vec_act) v = activate(v, ep);
          if (lanes == kV)
            _mm256_storeu_ps(dst + q * kV, v);
          else
            _mm256_maskstore_ps(dst + q * kV, mask, v);
        }
        if (!vec_act) {
          Epilogue e;
          e.activation = ep.activation;
          for (int64_t j = 0; j < cols; ++j) dst[j] = apply_activation(dst[j], e);
        }
      }
    }
    // The generated epilogue on the tile row's output rows of this channel, still in cache.
    const int64_t oh0 = 4 * th;
    ep.block.apply(y + plane + oh0 * g.Wo, g.Wo, std::min<int64_t>(4, g.Ho - oh0), g.Wo);
  }
}

}  // namespace

bool winograd_applicable(const ConvGeom& g) {
  return g.KH == 3 && g.KW == 3 && g.sh == 1 && g.sw == 1 && g.dh == 1 && g.dw == 1 && g.G == 1;
}

bool winograd_profitable(const ConvGeom& g) {
  static const int forced = [] {
    const char* e = std::getenv("KILN_CONV_WINOGRAD");
    if (e && std::strcmp(e, "always") == 0) return 1;
    if (e && std::strcmp(e, "never") == 0) return 0;
    return -1;
  }();
  if (forced >= 0) return forced == 1;
  const int64_t tiles = g.N * ceil_div(g.Ho, 4) * ceil_div(g.Wo, 4);
  return g.C >= 8 && g.O >= 8 && tiles >= 16;
}

size_t WinogradWeight::nbytes() const {
  size_t n = 0;
  for (const auto& u : xi) n += u->nbytes();
  return n;
}

std::shared_ptr<const WinogradWeight> winograd_prepare(const ConvGeom& g, const float* w) {
  auto out = std::make_shared<WinogradWeight>();
  out->O = g.O;
  out->C = g.C;
  // U_ξ[o, c] for the 36 ξ, written straight into the microkernel's packed layout of each [O, C]
  // matrix (PackedView): sliver s holds rows s*MR.., a K block's element (o, c) sits at
  // p0 * Mp + s * MR * kb + (c - p0) * MR + o % MR. Rows past O are zero.
  const gemm_detail::KernelSet& ks = gemm_detail::active_kernel_set();
  float* data[kXi];
  out->xi.resize(kXi);
  for (int x = 0; x < kXi; ++x)
    out->xi[x] = gemm_detail::allocate_packed(ks, false, g.O, g.C, &data[x]);
  const gemm_detail::PackedView v = gemm_detail::packed_view(*out->xi[0]);
  const int64_t MR = ks.mr, slivers = v.padded / MR;
  parallel_for(0, slivers, 1, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      for (int64_t p0 = 0; p0 < g.C; p0 += v.kc) {
        const int64_t kb = std::min(v.kc, g.C - p0);
        const int64_t base = p0 * v.padded + s * MR * kb;
        for (int64_t c = p0; c < p0 + kb; ++c) {
          for (int64_t r = 0; r < MR; ++r) {
            const int64_t o = s * MR + r, at = base + (c - p0) * MR + r;
            double t[6][6] = {};
            if (o < g.O) transform_filter(w + (o * g.C + c) * 9, t);
            for (int x = 0; x < kXi; ++x) data[x][at] = static_cast<float>(t[x / 6][x % 6]);
          }
        }
      }
    }
  });
  return out;
}

void winograd_conv2d_f32(const ConvGeom& g, const WinogradWeight& wt, const float* x,
                         const float* bias, const float* res, float* y, const ConvEpilogue& ep) {
  KILN_CHECK(winograd_applicable(g) && wt.O == g.O && wt.C == g.C, "conv2d",
             "expected a Winograd weight prepared for [", g.O, ", ", g.C,
             ", 3, 3] stride 1, got one for [", wt.O, ", ", wt.C, ", 3, 3]");
  if (g.N == 0 || g.O == 0) return;
  gemm_detail::PackedView u[kXi];
  for (int i = 0; i < kXi; ++i) u[i] = gemm_detail::packed_view(*wt.xi[i]);
  const gemm_detail::KernelSet& ks = *u[0].ks;
  const Plan p = make_plan(g, ks);
  const int64_t total_rows = g.N * p.tiles_h;
  const int64_t MR = ks.mr, NR = ks.nr, slivers = ceil_div(g.O, MR);
  const int64_t v_xi_stride = g.C * p.ldv;  // floats between V_ξ and V_ξ+1

  ConvScratch<float> v(kXi * v_xi_stride);
  const int nth = in_parallel_region() ? 1 : num_threads();
  for (int64_t row0 = 0; row0 < total_rows; row0 += p.rows_per_block) {
    const int64_t rows = std::min(p.rows_per_block, total_rows - row0);
    const int64_t tiles = rows * p.tiles_w;
    // 1. V_ξ[c, tiles] for every channel.
    parallel_for(0, g.C, std::max<int64_t>(1, g.C / (4 * nth)), [&](int64_t c0, int64_t c1) {
      ConvScratch<float> band(12 * p.wbuf);
      for (int64_t c = c0; c < c1; ++c)
        input_transform(g, p, x + c * g.HW(), row0, rows, v.get() + c * p.ldv, v_xi_stride,
                        band.get());
    });
    // 2. Per sliver of output channels: the 36 products, then the output transform.
    parallel_for(0, slivers, 1, [&](int64_t s0, int64_t s1) {
      ConvScratch<float> mbuf(kXi * MR * p.ldv);
      for (int64_t s = s0; s < s1; ++s) {
        const int m = static_cast<int>(std::min<int64_t>(MR, g.O - s * MR));
        for (int xi = 0; xi < kXi; ++xi) {
          const gemm_detail::PackedView& uv = u[xi];
          float* mx = mbuf.get() + xi * MR * p.ldv;
          for (int64_t p0 = 0; p0 < g.C; p0 += uv.kc) {
            const int64_t kb = std::min(uv.kc, g.C - p0);
            const float* a = uv.data + p0 * uv.padded + s * MR * kb;
            const float* b = v.get() + xi * v_xi_stride + p0 * p.ldv;
            for (int64_t j = 0; j < tiles; j += NR) {
              const int n = static_cast<int>(std::min(NR, tiles - j));
              ks.kernel(kb, a, b + j, p.ldv, mx + j, p.ldv, m, n, 1.0f, p0 == 0 ? 0.0f : 1.0f,
                        nullptr);
            }
          }
        }
        for (int r = 0; r < m; ++r)
          output_transform(g, p, mbuf.get() + r * p.ldv, MR * p.ldv, row0, rows, s * MR + r, bias,
                           res, y, ep);
      }
    });
  }
}

}  // namespace kiln::kernels::conv_detail
