// Depthwise int8 convolution (groups == in channels == out channels): each output channel reads
// one input plane, so there is no GEMM to speak of; as a grouped GEMM it would run one 1-row
// product per channel. Each output is the sum of KH x KW taps of (x - x_zp) times the weights
// minus their zero point, requantized by requantize_value. The arithmetic is float32 (FMA, where
// int32 multiplies are several times slower) and still exact: every value is an integer, each
// product at most 255 x 255 and the sum of at most kMaxDepthwiseTaps (256) of them below 2^24,
// so the result equals qconv2d_reference_out bit for bit.
//
// Where the float kernel's channel-interleaved path takes the geometry (MobileNet's 3x3 layers),
// it runs that path: 8 channels across the vector lanes, the bytes converted on the way into its
// band buffer, its sums requantized in registers on the way out (QuantSink). Otherwise, per
// (image, channel) plane: the plane minus its zero point with the padding as zeros, then
// vectorized loops over the plane.

#include <algorithm>
#include <cstring>

#include "conv_internal.h"
#include "kiln/runtime/thread_pool.h"
#include "quant_internal.h"
#if defined(__x86_64__) || defined(_M_X64)
#include "qgemm_avx2_epilogue.h"
#endif

namespace kiln::kernels::quant_detail {
namespace {

// Requantizes sums[0, n) into bytes y[0, n) (through a[], a loop the compiler vectorizes; byte
// stores may alias anything, so they get a loop of their own). One call per plane: rows of a
// small plane are too short for vectors of their own.
void requantize_block(const float* __restrict sums, int32_t* __restrict a, int64_t n, int64_t c,
                      const Requant& rq, uint8_t* __restrict y) {
  const int32_t bias = rq.bias[c], zp = rq.y_zp;
  const float mult = rq.mult[c], lo = rq.lo, hi = rq.hi;
  for (int64_t i = 0; i < n; ++i)
    a[i] = requantize_value(static_cast<int32_t>(sums[i]), bias, mult, lo, hi, zp);
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<uint8_t>(a[i]);  // int8 too: two's complement
}

// The channel-interleaved path's sums (exact integers in float) requantized into the output
// planes. On x86 per 8 pixels: requantize_value's steps on each pixel's 8 channel lanes (the
// channel constants loaded once per block), the 64 results narrowed to bytes and transposed to 8
// bytes per channel in registers (packs, one byte shuffle, unpacks), 8 stores.
class QuantSink final : public conv_detail::DepthwiseSink {
 public:
  QuantSink(const conv_detail::ConvGeom& g, const Requant& rq, void* out, const ResidualAdd* add)
      : howo_(g.HoWo()), rq_(rq), out_(static_cast<uint8_t*>(out)), add_(add) {}
  void store(int64_t plane0, int64_t c0, int cb, int64_t off, int64_t count,
             const float* O) const override {
    uint8_t* const y = out_ + plane0 * howo_ + off;
#if defined(__x86_64__) || defined(_M_X64)
    alignas(32) int32_t bias[8] = {};
    alignas(32) float mult[8] = {};
    for (int j = 0; j < cb; ++j) bias[j] = rq_.bias[c0 + j], mult[j] = rq_.mult[c0 + j];
    const __m256i vbias = _mm256_load_si256(reinterpret_cast<const __m256i*>(bias));
    const __m256 vmult = _mm256_load_ps(mult), lo = _mm256_set1_ps(rq_.lo),
                 hi = _mm256_set1_ps(rq_.hi);
    const __m256i zp = _mm256_set1_epi32(rq_.y_zp);
    const bool out_signed = rq_.out_signed;
    // Within each 128-bit lane, 4 pixels x 4 channels of bytes -> 4 channels x 4 pixels.
    const __m256i to_channels =
        _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15, 0, 4, 8, 12, 1, 5, 9,
                         13, 2, 6, 10, 14, 3, 7, 11, 15);
    for (int64_t p = 0; p < count; p += 8) {
      __m256i q[8];
      for (int k = 0; k < 8; ++k)
        q[k] = requantize8(_mm256_cvtps_epi32(_mm256_loadu_ps(O + (p + k) * 8)), vbias, vmult, lo,
                           hi, zp);
      // int16 [pixel k, k+1] per 128-bit lane: channels 0-3 in the low lane, 4-7 in the high.
      const __m256i w01 = _mm256_packs_epi32(q[0], q[1]), w23 = _mm256_packs_epi32(q[2], q[3]);
      const __m256i w45 = _mm256_packs_epi32(q[4], q[5]), w67 = _mm256_packs_epi32(q[6], q[7]);
      // Bytes of pixels 0-3 (a) and 4-7 (b), each lane 4 pixels x 4 channels.
      __m256i a = out_signed ? _mm256_packs_epi16(w01, w23) : _mm256_packus_epi16(w01, w23);
      __m256i b = out_signed ? _mm256_packs_epi16(w45, w67) : _mm256_packus_epi16(w45, w67);
      a = _mm256_shuffle_epi8(a, to_channels);
      b = _mm256_shuffle_epi8(b, to_channels);
      // Channel j's 8 pixels as the 8-byte word j of `rows`: 0-1, 2-3 low lane; 4-7 high lane.
      const __m256i lo_pair = _mm256_unpacklo_epi32(a, b), hi_pair = _mm256_unpackhi_epi32(a, b);
      const __m256i rows03 = _mm256_permute2x128_si256(lo_pair, hi_pair, 0x20);
      const __m256i rows47 = _mm256_permute2x128_si256(lo_pair, hi_pair, 0x31);
      const int64_t n = std::min<int64_t>(8, count - p);
      if (n == 8 && cb == 8) {  // straight from the registers: no round trip through memory
        const __m128i pairs[4] = {
            _mm256_castsi256_si128(rows03), _mm256_extracti128_si256(rows03, 1),
            _mm256_castsi256_si128(rows47), _mm256_extracti128_si256(rows47, 1)};
        for (int k = 0; k < 4; ++k) {
          _mm_storel_epi64(reinterpret_cast<__m128i*>(y + 2 * k * howo_ + p), pairs[k]);
          _mm_storeh_pd(reinterpret_cast<double*>(y + (2 * k + 1) * howo_ + p),
                        _mm_castsi128_pd(pairs[k]));
        }
        continue;
      }
      alignas(32) uint64_t rows[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(rows), rows03);
      _mm256_store_si256(reinterpret_cast<__m256i*>(rows + 4), rows47);
      for (int j = 0; j < cb; ++j) std::memcpy(y + j * howo_ + p, rows + j, n);
    }
#else
    for (int64_t p = 0; p < count; p += 8) {
      const int64_t n = std::min<int64_t>(8, count - p);
      for (int64_t k = 0; k < n; ++k)
        for (int j = 0; j < cb; ++j) {
          const int64_t c = c0 + j;
          y[j * howo_ + p + k] = static_cast<uint8_t>(
              requantize_value(static_cast<int32_t>(O[(p + k) * 8 + j]), rq_.bias[c], rq_.mult[c],
                               rq_.lo, rq_.hi, rq_.y_zp));
        }
    }
#endif
    if (add_)
      for (int j = 0; j < cb; ++j) add_->apply(out_, (plane0 + j) * howo_ + off, count);
  }

 private:
  int64_t howo_;
  const Requant& rq_;
  uint8_t* out_;
  const ResidualAdd* add_;
};

// The channel-interleaved path, if it takes g: weights minus their zero points as float32.
bool depthwise_interleaved(const conv_detail::ConvGeom& g, const TensorImpl& x, const int8_t* w,
                           const Requant& rq, void* out, const ResidualAdd* add) {
  if (!conv_detail::depthwise_narrow_fits(g)) return false;
  const int64_t KK = g.KH * g.KW;
  conv_detail::ConvScratch<float> wf(g.C * KK);
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t t = 0; t < KK; ++t)
      wf.get()[c * KK + t] = static_cast<float>(w[c * KK + t] - rq.w_zp[c]);
  conv_detail::DepthwiseInput in;
  if (x.dtype() == DType::Int8) {
    in.s8 = x.data_ptr<int8_t>();
  } else {
    in.u8 = x.data_ptr<uint8_t>();
  }
  in.zero_point = rq.x_zp;
  in.plane = g.HW();
  in.width = g.W;
  in.count = x.numel();
  return conv_detail::depthwise_narrow_to(g, in, wf.get(), nullptr, QuantSink(g, rq, out, add));
}

template <typename X>
void depthwise_planes(const conv_detail::ConvGeom& g, const X* x, const int8_t* w,
                      const Requant& rq, void* out, const ResidualAdd* add) {
  const int64_t Hp = g.H + 2 * g.ph, Wp = g.W + 2 * g.pw, HoWo = g.HoWo();
  // Stride and dilation 1: each tap is one loop over the whole plane, output rows laid out at
  // the padded width (columns past Wo are computed and dropped), instead of KH x KW short loops
  // per output row, which dominate small planes.
  const bool flat = g.sh == 1 && g.sw == 1 && g.dh == 1 && g.dw == 1;
  const int64_t flat_len = (g.Ho - 1) * Wp + g.Wo;
  // Rows shorter than 16 floats (one AVX-512 vector, two AVX2 ones): converted and requantized
  // as whole planes (one loop each, through a buffer), where per-row loops would run mostly as
  // scalar remainders.
  const bool short_rows = g.W < 16;
  parallel_for(0, g.N * g.C, 1, [&](int64_t p0, int64_t p1) {
    // From the scratch pool (the executor's arena when it lends one): no allocation per call.
    const int64_t n = flat ? g.Ho * Wp : HoWo;
    conv_detail::ConvScratch<float> plane_buf(Hp * Wp + (short_rows ? g.HW() : 0)), acc_buf(n);
    conv_detail::ConvScratch<int32_t> requantized_buf(n);
    conv_detail::ConvScratch<uint8_t> bytes_buf(n);
    float* const plane_data = plane_buf.get();
    float* const converted = plane_data + Hp * Wp;  // short rows: the plane minus x_zp, unpadded
    uint8_t* const bytes = bytes_buf.get();
    auto one_plane = [&](int64_t p) {
      const int64_t c = p % g.C;
      uint8_t* const y = static_cast<uint8_t*>(out) + p * HoWo;
      std::fill(plane_data, plane_data + Hp * Wp, 0.0f);
      const X* src = x + p * g.HW();
      const int32_t x_zp = rq.x_zp;  // a local: the stores below would make the loop reload it
      if (short_rows) {  // one loop over the plane, then rows into the zero-padded plane
        float* __restrict dst = converted;
        const X* __restrict all = src;
        for (int64_t i = 0, e = g.HW(); i < e; ++i)
          dst[i] = static_cast<float>(static_cast<int32_t>(all[i]) - x_zp);
        for (int64_t h = 0; h < g.H; ++h)
          std::copy(converted + h * g.W, converted + (h + 1) * g.W,
                    plane_data + (h + g.ph) * Wp + g.pw);
      } else {
        for (int64_t h = 0; h < g.H; ++h) {
          float* __restrict dst = plane_data + (h + g.ph) * Wp + g.pw;
          const X* __restrict row = src + h * g.W;
          for (int64_t i = 0; i < g.W; ++i)
            dst[i] = static_cast<float>(static_cast<int32_t>(row[i]) - x_zp);
        }
      }
      const int8_t* wc = w + c * g.KH * g.KW;
      float* __restrict a = acc_buf.get();
      int32_t* const q = requantized_buf.get();
      if (flat) {
        if (g.KH == 3 && g.KW == 3) {
          // The common 3x3: all nine taps per output in one pass, the sum in registers.
          float k[9];
          for (int t = 0; t < 9; ++t) k[t] = static_cast<float>(wc[t] - rq.w_zp[c]);
          const float* __restrict r0 = plane_data;
          const float* __restrict r1 = r0 + Wp;
          const float* __restrict r2 = r1 + Wp;
          for (int64_t i = 0; i < flat_len; ++i)
            a[i] = k[0] * r0[i] + k[1] * r0[i + 1] + k[2] * r0[i + 2] + k[3] * r1[i] +
                   k[4] * r1[i + 1] + k[5] * r1[i + 2] + k[6] * r2[i] + k[7] * r2[i + 1] +
                   k[8] * r2[i + 2];
        } else {
          std::fill(a, a + flat_len, 0.0f);
          for (int64_t kh = 0; kh < g.KH; ++kh) {
            for (int64_t kw = 0; kw < g.KW; ++kw) {
              const float wv = static_cast<float>(wc[kh * g.KW + kw] - rq.w_zp[c]);
              const float* __restrict r = plane_data + kh * Wp + kw;
              for (int64_t i = 0; i < flat_len; ++i) a[i] += wv * r[i];
            }
          }
        }
        if (short_rows) {  // one requantize over the padded rows, then their bytes
          requantize_block(a, q, flat_len, c, rq, bytes);
          for (int64_t oh = 0; oh < g.Ho; ++oh)
            std::copy(bytes + oh * Wp, bytes + oh * Wp + g.Wo, y + oh * g.Wo);
        } else {
          for (int64_t oh = 0; oh < g.Ho; ++oh)
            requantize_block(a + oh * Wp, q, g.Wo, c, rq, y + oh * g.Wo);
        }
        return;
      }
      if (g.sw == 2 && g.sh == 2 && g.dh == 1 && g.dw == 1 && g.KH == 3 && g.KW == 3) {
        float k[9];
        for (int t = 0; t < 9; ++t) k[t] = static_cast<float>(wc[t] - rq.w_zp[c]);
        for (int64_t oh = 0; oh < g.Ho; ++oh) {
          const float* __restrict r0 = plane_data + 2 * oh * Wp;
          const float* __restrict r1 = r0 + Wp;
          const float* __restrict r2 = r1 + Wp;
          float* __restrict ar = a + oh * g.Wo;
          for (int64_t ow = 0; ow < g.Wo; ++ow) {
            const int64_t i = 2 * ow;
            ar[ow] = k[0] * r0[i] + k[1] * r0[i + 1] + k[2] * r0[i + 2] + k[3] * r1[i] +
                     k[4] * r1[i + 1] + k[5] * r1[i + 2] + k[6] * r2[i] + k[7] * r2[i + 1] +
                     k[8] * r2[i + 2];
          }
        }
        requantize_block(a, q, HoWo, c, rq, y);
        return;
      }
      std::fill(a, a + HoWo, 0.0f);
      for (int64_t oh = 0; oh < g.Ho; ++oh) {
        float* __restrict ar = a + oh * g.Wo;
        for (int64_t kh = 0; kh < g.KH; ++kh) {
          const float* row = plane_data + (oh * g.sh + kh * g.dh) * Wp;
          for (int64_t kw = 0; kw < g.KW; ++kw) {
            const float wv = static_cast<float>(wc[kh * g.KW + kw] - rq.w_zp[c]);
            const float* __restrict r = row + kw * g.dw;
            if (g.sw == 1) {
              for (int64_t ow = 0; ow < g.Wo; ++ow) ar[ow] += wv * r[ow];
            } else if (g.sw == 2) {  // a constant stride vectorizes (MobileNet's downsampling)
              for (int64_t ow = 0; ow < g.Wo; ++ow) ar[ow] += wv * r[2 * ow];
            } else {
              for (int64_t ow = 0; ow < g.Wo; ++ow) ar[ow] += wv * r[ow * g.sw];
            }
          }
        }
      }
      requantize_block(a, q, HoWo, c, rq, y);
    };
    for (int64_t p = p0; p < p1; ++p) {
      one_plane(p);
      if (add) add->apply(out, p * HoWo, HoWo);
    }
  });
}

}  // namespace

void qconv2d_depthwise(const conv_detail::ConvGeom& g, const TensorImpl& x, const int8_t* w,
                       const Requant& rq, void* out, const ResidualAdd* add) {
  if (depthwise_interleaved(g, x, w, rq, out, add)) return;
  if (x.dtype() == DType::Int8)
    depthwise_planes(g, x.data_ptr<int8_t>(), w, rq, out, add);
  else
    depthwise_planes(g, x.data_ptr<uint8_t>(), w, rq, out, add);
}

}  // namespace kiln::kernels::quant_detail
