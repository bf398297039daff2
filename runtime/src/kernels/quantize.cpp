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

namespace kiln::kernels {
namespace {

using namespace nn_detail;

struct Range {
  int64_t lo, hi;
};

Range range_of(std::string_view op, DType d, std::string_view what) {
  switch (d) {
    case DType::Int8:
      return {-128, 127};
    case DType::UInt8:
      return {0, 255};
    case DType::Int32:
      return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
    default:
      fail(op, "expected ", what, " of dtype int8, uint8 or int32, got ", dtype_name(d));
  }
}

// The quantization parameters per channel, checked: element i of a contiguous input belongs to
// channel (i / inner) % channels.
struct Channels {
  int64_t outer = 1, channels = 1, inner = 1;
  std::vector<float> scale;
  std::vector<int64_t> zero_point;
};

Channels channels_of(std::string_view op, const TensorImpl& input, const TensorImpl& scale,
                     const TensorImpl& zero_point, int64_t axis, Range range) {
  KILN_CHECK(scale.dtype() == DType::Float32, op, "expected scale of dtype float32, got ",
             dtype_name(scale.dtype()));
  KILN_CHECK(is_integral(zero_point.dtype(), false), op,
             "expected zero_point of an integer dtype, got ", dtype_name(zero_point.dtype()));
  KILN_CHECK(scale.dim() <= 1, op, "expected scale of 0 dims (per tensor) or 1 (per channel), got ",
             dims_str(scale.sizes()));
  KILN_CHECK(std::ranges::equal(zero_point.sizes(), scale.sizes()), op,
             "expected zero_point of scale's shape ", dims_str(scale.sizes()), ", got ",
             dims_str(zero_point.sizes()));
  Channels c;
  const int64_t rank = input.dim();
  if (scale.dim() == 1) {
    KILN_CHECK(axis >= -rank && axis < rank, op, "expected axis in [", -rank, ", ", rank,
               ") for an input of ", rank, " dims, got ", axis);
    const int64_t a = axis < 0 ? axis + rank : axis;
    KILN_CHECK(scale.size(0) == input.size(a), op, "expected ", input.size(a),
               " scales (input's size along axis ", a, "), got ", scale.size(0));
    c.channels = input.size(a);
    for (int64_t d = 0; d < a; ++d) c.outer *= input.size(d);
    for (int64_t d = a + 1; d < rank; ++d) c.inner *= input.size(d);
  } else {
    c.inner = input.numel();
  }
  auto s = views::contiguous(scale);
  auto z = zero_point.dtype() == DType::Int64 ? views::contiguous(zero_point)
                                              : to_dtype(&zero_point, DType::Int64);
  const float* sp = s->data_ptr<float>();
  const int64_t* zp = z->data_ptr<int64_t>();
  c.scale.assign(sp, sp + s->numel());
  c.zero_point.assign(zp, zp + z->numel());
  for (size_t k = 0; k < c.scale.size(); ++k) {
    KILN_CHECK(std::isfinite(c.scale[k]) && c.scale[k] > 0.0f, op,
               "expected positive finite scales, got ", c.scale[k], " (channel ", k, ")");
    KILN_CHECK(c.zero_point[k] >= range.lo && c.zero_point[k] <= range.hi, op,
               "expected zero points in [", range.lo, ", ", range.hi, "], got ", c.zero_point[k],
               " (channel ", k, ")");
  }
  return c;
}

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

template <typename Q>
void quantize_to(const float* x, const Channels& c, Range r, Q* q) {
  for_each_element(c, [&](int64_t i, int64_t ch) {
    q[i] = static_cast<Q>(quantize_value(x[i], c.scale[ch], c.zero_point[ch], r));
  });
}

template <typename Q>
void dequantize_from(const Q* q, const Channels& c, float* y) {
  for_each_element(c, [&](int64_t i, int64_t ch) {
    y[i] = static_cast<float>(static_cast<int64_t>(q[i]) - c.zero_point[ch]) * c.scale[ch];
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
