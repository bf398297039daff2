// Depthwise int8 convolution on channels-last activations (x [N, H, W, C], out [N, Ho, Wo, C]):
// each pixel's channels are consecutive bytes, so 8 channels are one vector's lanes as they lie,
// with no transpose in or out (the NCHW kernel, qconv_depthwise.cpp, transposes 8 x 8 blocks
// both ways). Per thread and run of output rows, the input rows a window reaches are converted
// once into a ring of float32 rows (bytes minus x_zp, the padding columns 0: what x_zp reads
// as), each row read by up to KH output rows and laid out block major (each block of 8
// channels one contiguous run of pixels, as the NCHW kernel's band buffer); per block the
// taps' weights (minus their zero points) stay in registers while the output row's sums are
// computed, then four pixels at a time are requantized and stored together. The arithmetic is
// exact, as in the NCHW kernel: integer products of at most 255 x 255, at most
// kMaxDepthwiseTaps of them, below 2^24.

#include <algorithm>
#include <cstring>

#include "conv_internal.h"
#include "kiln/runtime/checked_math.h"
#include "kiln/runtime/thread_pool.h"
#include "quant_internal.h"
#include "simd_compat.h"
#include "simd_util.h"
#if defined(__x86_64__) || defined(_M_X64)
#include "qgemm_avx2_epilogue.h"
#endif

namespace kiln::kernels::quant_detail {
namespace {

constexpr int64_t kLanes = 8;

// The requantize constants every block shares, broadcast once (locals: the byte stores would
// otherwise make the compiler reload them from the Requant per pixel).
struct Epilogue8 {
  float lo, hi;
  int32_t zp;
  bool out_signed;
#if defined(__x86_64__) || defined(_M_X64)
  __m256 vlo, vhi;
  __m256i vzp;
#endif
  explicit Epilogue8(const Requant& rq)
      : lo(rq.lo), hi(rq.hi), zp(rq.y_zp), out_signed(rq.out_signed) {
#if defined(__x86_64__) || defined(_M_X64)
    vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi), vzp = _mm256_set1_epi32(zp);
#endif
  }
};

// One output pixel's sums of channels [c0, c0 + cb) into its cb bytes. bias / mult: the
// channels' constants padded to whole blocks.
inline void store_block(const Epilogue8& e, const int32_t* bias, const float* mult, int64_t c0,
                        int cb, __m256 sums, uint8_t* y) {
#if defined(__x86_64__) || defined(_M_X64)
  const __m256i q = requantize8(_mm256_cvtps_epi32(sums),
                                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bias + c0)),
                                _mm256_loadu_ps(mult + c0), e.vlo, e.vhi, e.vzp);
  const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
  const __m128i b = e.out_signed ? _mm_packs_epi16(w, w) : _mm_packus_epi16(w, w);
  if (cb == kLanes) {
    _mm_storel_epi64(reinterpret_cast<__m128i*>(y), b);
  } else {
    const auto bytes = static_cast<uint64_t>(_mm_cvtsi128_si64(b));
    std::memcpy(y, &bytes, static_cast<size_t>(cb));  // little-endian: the first cb lanes
  }
#else
  alignas(32) float s[8];
  _mm256_storeu_ps(s, sums);
  for (int j = 0; j < cb; ++j)
    y[j] = static_cast<uint8_t>(
        requantize_value(static_cast<int32_t>(s[j]), bias[c0 + j], mult[c0 + j], e.lo, e.hi, e.zp));
#endif
}

// Four output pixels' sums of channels [c0, c0 + 8) into their 8 bytes each (y, y + C, ...):
// requantized, narrowed in two rounds of packs for all four, put in pixel order by one
// permute.
inline void store_4_blocks(const Epilogue8& e, const int32_t* bias, const float* mult, int64_t c0,
                           const __m256 (&sums)[4], uint8_t* y, int64_t C) {
#if defined(__x86_64__) || defined(_M_X64)
  const __m256i vb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bias + c0));
  const __m256 vm = _mm256_loadu_ps(mult + c0);
  __m256i q[4];
  for (int k = 0; k < 4; ++k)
    q[k] = requantize8(_mm256_cvtps_epi32(sums[k]), vb, vm, e.vlo, e.vhi, e.vzp);
  const __m256i w01 = _mm256_packs_epi32(q[0], q[1]), w23 = _mm256_packs_epi32(q[2], q[3]);
  // Per 128-bit lane: pixels 0-3's channels 0-3 (low lane) or 4-7 (high lane), 4 bytes each.
  __m256i b = e.out_signed ? _mm256_packs_epi16(w01, w23) : _mm256_packus_epi16(w01, w23);
  b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  const __m128i p01 = _mm256_castsi256_si128(b), p23 = _mm256_extracti128_si256(b, 1);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(y), p01);
  _mm_storeh_pd(reinterpret_cast<double*>(y + C), _mm_castsi128_pd(p01));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(y + 2 * C), p23);
  _mm_storeh_pd(reinterpret_cast<double*>(y + 3 * C), _mm_castsi128_pd(p23));
#else
  for (int k = 0; k < 4; ++k) store_block(e, bias, mult, c0, kLanes, sums[k], y + k * C);
#endif
}

// Row `row` of the image (W pixels of C bytes, within x[0, count)) as floats minus zp, block
// major: channel c of pixel iw at dst[(c / 8 * Wp + iw) * 8 + c % 8], so each block of 8 channels
// is one run of pixels (the pixels' other channels elsewhere).
template <typename Byte>
void convert_row(const Byte* x, int64_t row, int64_t W, int64_t C, int64_t Wp, int64_t count,
                 int32_t zp, float* dst) {
  const int64_t at = row * W * C;
  // Whole blocks lie within their pixel's bytes: loaded as they are (bytes_minus_zero_point, for
  // a last partial block, decides where its bytes may end: a branch and a copy per block).
  const int64_t whole = C / kLanes * kLanes;
#if defined(__x86_64__) || defined(_M_X64)
  const __m256i vzp = _mm256_set1_epi32(zp);
#endif
  for (int64_t iw = 0; iw < W; ++iw) {
    int64_t c0 = 0;
#if defined(__x86_64__) || defined(_M_X64)
    for (; c0 < whole; c0 += kLanes)
      _mm256_storeu_ps(
          dst + (c0 / kLanes * Wp + iw) * kLanes,
          simd::widen_minus_zero_point<Byte>(
              _mm_loadl_epi64(reinterpret_cast<const __m128i*>(x + at + iw * C + c0)), vzp));
#endif
    for (; c0 < C; c0 += kLanes)
      _mm256_storeu_ps(dst + (c0 / kLanes * Wp + iw) * kLanes,
                       simd::bytes_minus_zero_point(x, at + iw * C + c0,
                                                    std::min<int64_t>(kLanes, C - c0), count, zp));
  }
}

// One output row: per block of 8 channels (outer), its taps' weights in registers (3 x 3) and
// the block's rows read as contiguous runs of pixels, the row's sums into `sums_buf` (Wo x 8
// floats); then four pixels at a time requantized and stored together. Two passes: the nine
// weights, four accumulators and the requantize constants would not fit AVX2's 16 registers
// at once (the constants were spilled and reloaded per pixel).
template <int kTaps>
void output_row(const conv_detail::ConvGeom& g, const float* const* rows, int64_t Wp,
                const float* wf, int64_t Cp, const Requant& rq, const int32_t* bias,
                const float* mult, float* sums_buf, uint8_t* y) {
  const Epilogue8 e(rq);
  const int64_t C = g.C, KW = g.KW, taps = g.KH * g.KW, step = g.sw * kLanes, dil = g.dw * kLanes,
                block = Wp * kLanes;
  for (int64_t c0 = 0; c0 < C; c0 += kLanes) {
    const int64_t off = c0 / kLanes * block;  // the block's run within each row
    const int cb = static_cast<int>(std::min<int64_t>(kLanes, C - c0));
    __m256 k[9];
    if constexpr (kTaps == 9)
      for (int t = 0; t < 9; ++t) k[t] = _mm256_loadu_ps(wf + t * Cp + c0);
    const float *r0 = rows[0] + off, *r1 = kTaps == 9 ? rows[1] + off : nullptr,
                *r2 = kTaps == 9 ? rows[2] + off : nullptr;
    auto sums = [&](int64_t ow) {
      const int64_t o = ow * step;
      if constexpr (kTaps == 9) {
        __m256 a = _mm256_mul_ps(k[0], _mm256_loadu_ps(r0 + o));
        a = _mm256_fmadd_ps(k[1], _mm256_loadu_ps(r0 + o + dil), a);
        a = _mm256_fmadd_ps(k[2], _mm256_loadu_ps(r0 + o + 2 * dil), a);
        a = _mm256_fmadd_ps(k[3], _mm256_loadu_ps(r1 + o), a);
        a = _mm256_fmadd_ps(k[4], _mm256_loadu_ps(r1 + o + dil), a);
        a = _mm256_fmadd_ps(k[5], _mm256_loadu_ps(r1 + o + 2 * dil), a);
        a = _mm256_fmadd_ps(k[6], _mm256_loadu_ps(r2 + o), a);
        a = _mm256_fmadd_ps(k[7], _mm256_loadu_ps(r2 + o + dil), a);
        return _mm256_fmadd_ps(k[8], _mm256_loadu_ps(r2 + o + 2 * dil), a);
      } else {
        __m256 a = _mm256_setzero_ps();
        for (int64_t t = 0; t < taps; ++t)
          a = _mm256_fmadd_ps(_mm256_loadu_ps(wf + t * Cp + c0),
                              _mm256_loadu_ps(rows[t / KW] + off + o + t % KW * dil), a);
        return a;
      }
    };
    for (int64_t ow = 0; ow < g.Wo; ++ow) _mm256_storeu_ps(sums_buf + ow * kLanes, sums(ow));
    int64_t ow = 0;
    for (; ow + 4 <= g.Wo; ow += 4) {
      const float* p = sums_buf + ow * kLanes;
      const __m256 a[4] = {_mm256_loadu_ps(p), _mm256_loadu_ps(p + kLanes),
                           _mm256_loadu_ps(p + 2 * kLanes), _mm256_loadu_ps(p + 3 * kLanes)};
      if (cb == kLanes) {
        store_4_blocks(e, bias, mult, c0, a, y + ow * C + c0, C);
      } else {
        for (int j = 0; j < 4; ++j) store_block(e, bias, mult, c0, cb, a[j], y + (ow + j) * C + c0);
      }
    }
    for (; ow < g.Wo; ++ow)
      store_block(e, bias, mult, c0, cb, _mm256_loadu_ps(sums_buf + ow * kLanes), y + ow * C + c0);
  }
}

template <typename Byte>
void depthwise_nhwc(const conv_detail::ConvGeom& g, const Byte* x, int64_t count, const int8_t* w,
                    const Requant& rq, uint8_t* out) {
  const int64_t C = g.C, Cp = (C + kLanes - 1) / kLanes * kLanes, KK = g.KH * g.KW;
  const int64_t Wp = g.W + 2 * g.pw, span = (g.KH - 1) * g.dh + 1;  // rows one window spans
  // wf[t * Cp + c]: tap t's weight of channel c minus its zero point; bias / mult per channel;
  // all 0 past C.
  conv_detail::ConvScratch<float> wf_buf(KK * Cp), mult_buf(Cp);
  conv_detail::ConvScratch<int32_t> bias_buf(Cp);
  float* const wf = wf_buf.get();
  std::fill(wf, wf + KK * Cp, 0.0f);
  std::fill(mult_buf.get(), mult_buf.get() + Cp, 0.0f);
  std::fill(bias_buf.get(), bias_buf.get() + Cp, 0);
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t t = 0; t < KK; ++t)
      wf[t * Cp + c] = static_cast<float>(w[c * KK + t] - rq.w_zp[c]);
    mult_buf.get()[c] = rq.mult[c];
    bias_buf.get()[c] = rq.bias[c];
  }
  const int32_t* const bias = bias_buf.get();
  const float* const mult = mult_buf.get();
  const bool k3x3 = g.KH == 3 && g.KW == 3;
  const int64_t grain = std::max<int64_t>(1, 8192 / std::max<int64_t>(g.Wo * C * KK, 1));
  parallel_for(0, g.N * g.Ho, grain, [&](int64_t r0, int64_t r1) {
    // The ring: `span` rows of Cp x Wp floats (block major), slot s holding input row held[s]
    // (-1: none), then one row of zeros (a padding row). The padding columns stay 0.
    const int64_t row_floats = Wp * Cp;
    conv_detail::ConvScratch<float> ring_buf((span + 1) * row_floats);
    float* const ring = ring_buf.get();
    std::fill(ring, ring + (span + 1) * row_floats, 0.0f);
    const float* const zeros = ring + span * row_floats;
    conv_detail::ConvScratch<int64_t> held_buf(span);
    int64_t* const held = held_buf.get();
    std::fill(held, held + span, int64_t(-1));
    conv_detail::ConvScratch<const float*> rows_buf(g.KH);  // per kh: its row at padded column 0
    const float** const rows = rows_buf.get();
    conv_detail::ConvScratch<float> sums_buf(g.Wo * kLanes);
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / g.Ho, oh = r % g.Ho;
      for (int64_t kh = 0; kh < g.KH; ++kh) {
        const int64_t ih = oh * g.sh - g.ph + kh * g.dh;
        const float* row = zeros;  // a padding row reads x_zp: adds 0
        if (ih >= 0 && ih < g.H) {
          const int64_t key = n * g.H + ih, slot = ih % span;
          float* slot_row = ring + slot * row_floats;
          if (held[slot] != key) {
            convert_row(x, key, g.W, C, Wp, count, rq.x_zp, slot_row + g.pw * kLanes);
            held[slot] = key;
          }
          row = slot_row;
        }
        rows[kh] = row;
      }
      uint8_t* y = out + r * g.Wo * C;
      if (k3x3)
        output_row<9>(g, rows, Wp, wf, Cp, rq, bias, mult, sums_buf.get(), y);
      else
        output_row<0>(g, rows, Wp, wf, Cp, rq, bias, mult, sums_buf.get(), y);
    }
  });
}

}  // namespace

bool qconv2d_depthwise_channels_last(const conv_detail::ConvGeom& g, const TensorImpl& x,
                                     const int8_t* w, const Requant& rq, void* out,
                                     const ResidualAdd* add) {
  // The ring's floats, bounded like the NCHW kernel's plane buffers: padding and dilation from
  // an artifact could make it far larger than the image (or wrap its byte count).
  const int64_t span = (g.KH - 1) * g.dh + 1, Cp = (g.C + kLanes - 1) / kLanes * kLanes;
  int64_t ring = 0, image = 0;
  if (!mul_ok(span, g.W + 2 * g.pw, ring) || !mul_ok(ring, Cp, ring) ||
      !mul_ok(g.HW(), g.C, image) || ring > std::max<int64_t>(4 * image, int64_t(1) << 24))
    return false;
  auto* y = static_cast<uint8_t*>(out);
  if (x.dtype() == DType::Int8)
    depthwise_nhwc(g, x.data_ptr<int8_t>(), x.numel(), w, rq, y);
  else
    depthwise_nhwc(g, x.data_ptr<uint8_t>(), x.numel(), w, rq, y);
  if (add) add->apply_planes(out, 0, g.N, g.C * g.HoWo());  // the same layout: one span per image
  return true;
}

}  // namespace kiln::kernels::quant_detail
