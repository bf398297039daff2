// kiln.qavg_pool2d (kernels/quantize.h): average pooling on the bytes. Per output, the exact
// int32 sum of (q - input zero point) over the window (padding adds 0, as the float pool reads
// the dequantized zero point as 0), requantized by the integer layers' epilogue
// (quant_detail::requantize_value) at input_scale / (output_scale * divisor).
#include "kiln/runtime/kernels/quantize.h"
#include "kiln/runtime/thread_pool.h"
#include "pool_internal.h"
#include "quant_internal.h"

namespace kiln::kernels {
namespace {

using namespace nn_detail;
using namespace pool_detail;
using namespace quant_detail;

// The most values one window may sum: 255 each, so the int32 sum cannot overflow.
constexpr int64_t kMaxWindow = std::numeric_limits<int32_t>::max() / 255;

struct PoolConstants {
  int32_t x_zp, y_zp;
  double ratio;  // input_scale / output_scale
  float lo, hi;  // the output range minus its zero point
};

template <typename X, typename Y>
void avg_bytes(const PoolGeom& g, const Pool2dParams& p, const X* x, Y* y, const PoolConstants& k) {
  const int64_t HW = g.H * g.W, howo = g.Ho * g.Wo;
  const bool global = g.Ho == 1 && g.Wo == 1 && g.ph == 0 && g.pw == 0 && g.kh >= g.H &&
                      g.kw >= g.W && p.divisor_override == 0;
  parallel_for(
      0, g.planes, plane_grain(global ? HW : howo * g.kh * g.kw), [&](int64_t p0, int64_t p1) {
        const PoolConstants c = k;
        for (int64_t plane = p0; plane < p1; ++plane) {
          const X* __restrict xp = x + plane * HW;
          Y* __restrict yp = y + plane * howo;
          if (global) {  // one contiguous sum per plane (ResNet's and MobileNet's classifier pool)
            int32_t s = 0;
            for (int64_t i = 0; i < HW; ++i) s += static_cast<int32_t>(xp[i]);
            const float mult = static_cast<float>(c.ratio / static_cast<double>(HW));
            yp[0] = static_cast<Y>(
                requantize_value(s, -c.x_zp * static_cast<int32_t>(HW), mult, c.lo, c.hi, c.y_zp));
            continue;
          }
          for (int64_t oh = 0; oh < g.Ho; ++oh)
            for (int64_t ow = 0; ow < g.Wo; ++ow) {
              const AvgWin w = avg_window(g, p, oh, ow);
              int32_t s = 0;
              for (int64_t ih = w.hs; ih < w.he; ++ih)
                for (int64_t iw = w.ws; iw < w.we; ++iw)
                  s += static_cast<int32_t>(xp[ih * g.W + iw]) - c.x_zp;
              const float mult = static_cast<float>(c.ratio / static_cast<double>(w.divisor));
              yp[oh * g.Wo + ow] = static_cast<Y>(requantize_value(s, 0, mult, c.lo, c.hi, c.y_zp));
            }
        }
      });
}

}  // namespace

void qavg_pool2d_out(const TensorImpl& input, const QPoolOperands& q, const Pool2dParams& p,
                     TensorImpl& out) {
  constexpr std::string_view op = "qavg_pool2d";
  const Range xr = int8_range(op, input.dtype(), "input");
  const Range yr = int8_range(op, out.dtype(), "out");
  const PoolGeom g = pool_geom(op, input.sizes(), p, false);
  check_shape(op, out, g.out_shape, "out");
  KILN_CHECK(p.divisor_override >= 0, op, "expected divisor_override >= 0, got ",
             p.divisor_override);
  KILN_CHECK(std::min(g.kh, g.H) * std::min(g.kw, g.W) <= kMaxWindow, op,
             "expected a window of at most ", kMaxWindow, " values (an int32 sum), got ",
             std::min(g.kh, g.H), "x", std::min(g.kw, g.W));
  PoolConstants k{};
  const float xs = scalar_scale(op, q.input_scale, "input scale");
  k.x_zp = scalar_zero_point(op, q.input_zero_point, xr, "input zero point");
  const float ys = scalar_scale(op, q.output_scale, "output scale");
  k.y_zp = scalar_zero_point(op, q.output_zero_point, yr, "output zero point");
  k.ratio = static_cast<double>(xs) / static_cast<double>(ys);
  k.lo = static_cast<float>(yr.lo - k.y_zp);
  k.hi = static_cast<float>(yr.hi - k.y_zp);
  auto x = views::contiguous(input);
  OutTarget y(&out);
  with_byte_type(input.dtype(), [&](auto tx) {
    with_byte_type(out.dtype(), [&](auto ty) {
      using X = decltype(tx);
      using Y = decltype(ty);
      avg_bytes<X, Y>(g, p, x->data_ptr<X>(), static_cast<Y*>(y.ptr), k);
    });
  });
  y.finish();
}

}  // namespace kiln::kernels
