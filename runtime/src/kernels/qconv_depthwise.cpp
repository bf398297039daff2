// Depthwise int8 convolution (groups == in channels == out channels): each output channel reads
// one input plane, so there is no GEMM to speak of; as a grouped GEMM it would run one 1-row
// product per channel. Instead, per (image, channel) plane, in parallel: the plane minus its zero
// point as int16 with the padding as zeros (padding reads x_zp, which is 0 after the subtraction),
// then each output row is int32 sums of KH x KW shifted rows times the int16 weights minus their
// zero point (a loop the compiler vectorizes), requantized by requantize_value. The sums are
// exact, so the result equals qconv2d_reference_out bit for bit.

#include <algorithm>
#include <vector>

#include "conv_internal.h"
#include "kiln/runtime/thread_pool.h"
#include "quant_internal.h"

namespace kiln::kernels::quant_detail {
namespace {

template <typename X>
void depthwise_planes(const conv_detail::ConvGeom& g, const X* x, const int8_t* w,
                      const Requant& rq, void* out) {
  const int64_t Hp = g.H + 2 * g.ph, Wp = g.W + 2 * g.pw;
  parallel_for(0, g.N * g.C, 1, [&](int64_t p0, int64_t p1) {
    std::vector<int16_t> plane(static_cast<size_t>(Hp * Wp));
    std::vector<int32_t> acc(static_cast<size_t>(g.Wo));
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t c = p % g.C;
      const X* src = x + p * g.HW();
      std::fill(plane.begin(), plane.end(), int16_t{0});
      for (int64_t h = 0; h < g.H; ++h) {
        int16_t* dst = plane.data() + (h + g.ph) * Wp + g.pw;
        for (int64_t i = 0; i < g.W; ++i)
          dst[i] = static_cast<int16_t>(static_cast<int32_t>(src[h * g.W + i]) - rq.x_zp);
      }
      const int8_t* wc = w + c * g.KH * g.KW;
      for (int64_t oh = 0; oh < g.Ho; ++oh) {
        int32_t* __restrict a = acc.data();
        std::fill(acc.begin(), acc.end(), 0);
        for (int64_t kh = 0; kh < g.KH; ++kh) {
          const int16_t* row = plane.data() + (oh * g.sh + kh * g.dh) * Wp;
          for (int64_t kw = 0; kw < g.KW; ++kw) {
            const int32_t wv = static_cast<int32_t>(wc[kh * g.KW + kw]) - rq.w_zp[c];
            const int16_t* __restrict r = row + kw * g.dw;
            if (g.sw == 1) {
              for (int64_t ow = 0; ow < g.Wo; ++ow) a[ow] += wv * r[ow];
            } else if (g.sw == 2) {  // a constant stride vectorizes (MobileNet's downsampling)
              for (int64_t ow = 0; ow < g.Wo; ++ow) a[ow] += wv * r[2 * ow];
            } else {
              for (int64_t ow = 0; ow < g.Wo; ++ow) a[ow] += wv * r[ow * g.sw];
            }
          }
        }
        // Requantized in place (a loop the compiler vectorizes), then narrowed: byte stores may
        // alias anything, so they get a loop of their own.
        const int32_t bias = rq.bias[c], zp = rq.y_zp;
        const float mult = rq.mult[c], lo = rq.lo, hi = rq.hi;
        for (int64_t ow = 0; ow < g.Wo; ++ow)
          a[ow] = requantize_value(a[ow], bias, mult, lo, hi, zp);
        const int64_t o = (p * g.Ho + oh) * g.Wo;
        if (rq.out_signed) {
          int8_t* __restrict y = static_cast<int8_t*>(out) + o;
          for (int64_t ow = 0; ow < g.Wo; ++ow) y[ow] = static_cast<int8_t>(a[ow]);
        } else {
          uint8_t* __restrict y = static_cast<uint8_t*>(out) + o;
          for (int64_t ow = 0; ow < g.Wo; ++ow) y[ow] = static_cast<uint8_t>(a[ow]);
        }
      }
    }
  });
}

}  // namespace

void qconv2d_depthwise(const conv_detail::ConvGeom& g, const TensorImpl& x, const int8_t* w,
                       const Requant& rq, void* out) {
  if (x.dtype() == DType::Int8)
    depthwise_planes(g, x.data_ptr<int8_t>(), w, rq, out);
  else
    depthwise_planes(g, x.data_ptr<uint8_t>(), w, rq, out);
}

}  // namespace kiln::kernels::quant_detail
