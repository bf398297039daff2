// quantize / dequantize / fake_quantize and its straight-through gradient: the reference kernels
// of the int8 path (per tensor and per channel).
#include "kiln/runtime/kernels/quantize.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kiln/runtime/thread_pool.h"
#include "kiln/runtime/views.h"
#include "nn_common.h"
#include "quant_internal.h"

namespace kiln::kernels {
namespace {

using namespace nn_detail;
using namespace quant_detail;

// round_half_even(x / s) + zp before clamping (NaN for a NaN input): the one formula of the
// quantized value, for the value itself and for the gradient's range test.
inline double unclamped(float x, float s, int64_t zp) {
  return std::nearbyint(static_cast<double>(x / s)) + static_cast<double>(zp);
}

// unclamped() within the range (NaN: zp).
inline int64_t quantize_value(float x, float s, int64_t zp, Range r) {
  const double q = unclamped(x, s, zp);
  if (std::isnan(q)) return zp;
  return q <= double(r.lo) ? r.lo : q >= double(r.hi) ? r.hi : static_cast<int64_t>(q);
}

// fn(i, channel) for every element, blocks of `inner` in parallel.
template <typename Fn>
void for_each_element(const Channels& c, Fn&& fn) {
  const int64_t blocks = c.outer * c.channels;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(c.inner, 1));
  parallel_for(0, blocks, grain, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t ch = b % c.channels;
      for (int64_t i = b * c.inner, e = i + c.inner; i < e; ++i) fn(i, ch);
    }
  });
}

// fn(begin, end, channel) over runs of at most kRun contiguous elements of one channel, in
// parallel: a per-tensor quantize of one large activation splits as well as a per-channel one.
template <typename Fn>
void for_each_run(const Channels& c, Fn&& fn) {
  constexpr int64_t kRun = 16384;
  const int64_t inner = std::max<int64_t>(c.inner, 1);
  const int64_t pieces = (inner + kRun - 1) / kRun;  // per block of one channel
  const int64_t grain = std::max<int64_t>(1, kRun / inner);
  parallel_for(0, c.outer * c.channels * pieces, grain, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / pieces, begin = b * c.inner + (t % pieces) * kRun;
      fn(begin, std::min(b * c.inner + c.inner, begin + kRun), b % c.channels);
    }
  });
}

template <typename Q>
void quantize_to(const float* x, const Channels& c, Range r, Q* q) {
  if constexpr (sizeof(Q) == 1) {
    // quantize_value() in float, so that the loop vectorizes: x / s is the same float, its
    // rounding (half to even) is exact in float, and every sum that can land in the 8-bit range
    // is exact too; NaN gives the zero point.
    for_each_run(c, [&](int64_t i0, int64_t i1, int64_t ch) {
      const float s = c.scale[ch], zp = static_cast<float>(c.zero_point[ch]);
      const float lo = static_cast<float>(r.lo), hi = static_cast<float>(r.hi);
      // Local restrict pointers: a byte store may alias anything, captured pointers included.
      const float* __restrict xp = x;
      Q* __restrict qp = q;
      for (int64_t i = i0; i < i1; ++i) {
        const float v = xp[i] / s;
        float y = std::nearbyint(v) + zp;
        y = y < lo ? lo : y;
        y = y > hi ? hi : y;
        qp[i] = static_cast<Q>(static_cast<int32_t>(v == v ? y : zp));
      }
    });
  } else {
    for_each_element(c, [&](int64_t i, int64_t ch) {
      q[i] = static_cast<Q>(quantize_value(x[i], c.scale[ch], c.zero_point[ch], r));
    });
  }
}

template <typename Q>
void dequantize_from(const Q* q, const Channels& c, float* y) {
  for_each_run(c, [&](int64_t i0, int64_t i1, int64_t ch) {
    const float s = c.scale[ch];
    const int32_t zp = static_cast<int32_t>(c.zero_point[ch]);  // in Q's range (checked)
    const Q* __restrict qp = q;
    float* __restrict yp = y;
    if constexpr (sizeof(Q) == 1) {
      for (int64_t i = i0; i < i1; ++i)
        yp[i] = static_cast<float>(static_cast<int32_t>(qp[i]) - zp) * s;
    } else {
      for (int64_t i = i0; i < i1; ++i)
        yp[i] = static_cast<float>(static_cast<int64_t>(qp[i]) - c.zero_point[ch]) * s;
    }
  });
}

Range fake_range(std::string_view op, const FakeQuantParams& p) {
  KILN_CHECK(p.quant_min < p.quant_max && p.quant_min >= std::numeric_limits<int32_t>::min() &&
                 p.quant_max <= std::numeric_limits<int32_t>::max(),
             op, "expected quant_min < quant_max within int32, got [", p.quant_min, ", ",
             p.quant_max, "]");
  return {p.quant_min, p.quant_max};
}

void check_float32(std::string_view op, const TensorImpl& t, std::string_view what) {
  KILN_CHECK(t.dtype() == DType::Float32, op, "expected ", what, " of dtype float32, got ",
             dtype_name(t.dtype()));
}

}  // namespace

AffineParams affine_qparams(float min, float max, int64_t qmin, int64_t qmax) {
  const float neg = std::min(min, 0.0f), pos = std::max(max, 0.0f);
  AffineParams p;
  p.scale = std::max((pos - neg) / static_cast<float>(qmax - qmin),
                     std::numeric_limits<float>::epsilon());
  p.zero_point = std::clamp(qmin - static_cast<int64_t>(std::nearbyint(neg / p.scale)), qmin, qmax);
  return p;
}

namespace quant_detail {
void quantize_bytes(const float* x, int64_t n, float scale, int32_t zero_point, uint8_t* q) {
  Channels c;
  c.inner = n;
  c.scale = {scale};
  c.zero_point = {zero_point};
  quantize_to(x, c, Range{0, 255}, q);
}
}  // namespace quant_detail

void quantize_out(const TensorImpl& input, const TensorImpl& scale, const TensorImpl& zero_point,
                  QuantParams p, TensorImpl& out) {
  constexpr std::string_view op = "quantize";
  check_float32(op, input, "input");
  const Range r = range_of(op, out.dtype(), "out");
  check_shape(op, out, input.sizes(), "out");
  const Channels c = channels_of(op, input, scale, zero_point, p.axis, r);
  auto x = views::contiguous(input);
  OutTarget y(&out);
  const float* xp = x->data_ptr<float>();
  switch (out.dtype()) {
    case DType::Int8:
      quantize_to(xp, c, r, static_cast<int8_t*>(y.ptr));
      break;
    case DType::UInt8:
      quantize_to(xp, c, r, static_cast<uint8_t*>(y.ptr));
      break;
    default:
      quantize_to(xp, c, r, static_cast<int32_t*>(y.ptr));
      break;
  }
  y.finish();
}

void dequantize_out(const TensorImpl& input, const TensorImpl& scale, const TensorImpl& zero_point,
                    QuantParams p, TensorImpl& out) {
  constexpr std::string_view op = "dequantize";
  const Range r = range_of(op, input.dtype(), "input");
  check_float32(op, out, "out");
  check_shape(op, out, input.sizes(), "out");
  const Channels c = channels_of(op, input, scale, zero_point, p.axis, r);
  auto q = views::contiguous(input);
  OutTarget y(&out);
  float* yp = static_cast<float*>(y.ptr);
  switch (input.dtype()) {
    case DType::Int8:
      dequantize_from(q->data_ptr<int8_t>(), c, yp);
      break;
    case DType::UInt8:
      dequantize_from(q->data_ptr<uint8_t>(), c, yp);
      break;
    default:
      dequantize_from(q->data_ptr<int32_t>(), c, yp);
      break;
  }
  y.finish();
}

void fake_quantize_out(const TensorImpl& input, const TensorImpl& scale,
                       const TensorImpl& zero_point, FakeQuantParams p, TensorImpl& out) {
  constexpr std::string_view op = "fake_quantize";
  check_float32(op, input, "input");
  check_float32(op, out, "out");
  check_shape(op, out, input.sizes(), "out");
  const Range r = fake_range(op, p);
  const Channels c = channels_of(op, input, scale, zero_point, p.axis, r);
  auto x = views::contiguous(input);
  OutTarget y(&out);
  const float* xp = x->data_ptr<float>();
  float* yp = static_cast<float*>(y.ptr);
  for_each_element(c, [&](int64_t i, int64_t ch) {
    const int64_t zp = c.zero_point[ch];
    const int64_t q = quantize_value(xp[i], c.scale[ch], zp, r);
    yp[i] = static_cast<float>(q - zp) * c.scale[ch];
  });
  y.finish();
}

void fake_quantize_backward_out(const TensorImpl& grad, const TensorImpl& input,
                                const TensorImpl& scale, const TensorImpl& zero_point,
                                FakeQuantParams p, TensorImpl& grad_input) {
  constexpr std::string_view op = "fake_quantize_backward";
  check_float32(op, input, "input");
  check_float32(op, grad, "grad");
  check_float32(op, grad_input, "grad_input");
  check_shape(op, grad, input.sizes(), "grad");
  check_shape(op, grad_input, input.sizes(), "grad_input");
  const Range r = fake_range(op, p);
  const Channels c = channels_of(op, input, scale, zero_point, p.axis, r);
  auto x = views::contiguous(input);
  auto g = views::contiguous(grad);
  OutTarget y(&grad_input);
  const float* xp = x->data_ptr<float>();
  const float* gp = g->data_ptr<float>();
  float* yp = static_cast<float*>(y.ptr);
  for_each_element(c, [&](int64_t i, int64_t ch) {
    // In range before clamping (a NaN input gets no gradient: the comparisons are false).
    const double q = unclamped(xp[i], c.scale[ch], c.zero_point[ch]);
    yp[i] = q >= double(r.lo) && q <= double(r.hi) ? gp[i] : 0.0f;
  });
  y.finish();
}

}  // namespace kiln::kernels
