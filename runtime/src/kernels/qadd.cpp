// kiln.qadd (kernels/quantize.h): dequantize -> add (-> relu) -> quantize in one pass over the
// bytes, with the float32 operations of those kernels in their order (dequantize_from's
// (q - zp) * scale, the add, quantize_to's x / scale rounded half to even), so folding the three
// ops into this one changes no byte. Built with -ffp-contract=off (runtime/CMakeLists.txt): a
// multiply-add fusing one dequantized value into the sum would round once where the three
// kernels round twice.
#include <algorithm>
#include <cmath>

#include "kiln/runtime/kernels/quantize.h"
#include "kiln/runtime/thread_pool.h"
#include "quant_internal.h"

namespace kiln::kernels {
namespace quant_detail {
namespace {

template <bool kRelu, typename A, typename B, typename Y>
void add_bytes(const A* a, const B* b, Y* y, int64_t n, const AddConstants& k) {
  // Locals: a byte store may alias anything, the constants included. `a` may be `y` (the fused
  // convolution's add runs in place), so only b is restrict.
  const B* __restrict bp = b;
  const AddConstants c = k;
  for (int64_t i = 0; i < n; ++i) {
    const float fa = static_cast<float>(static_cast<int32_t>(a[i]) - c.a_zp) * c.a_scale;
    const float fb = static_cast<float>(static_cast<int32_t>(bp[i]) - c.b_zp) * c.b_scale;
    float v = fa + fb;
    if constexpr (kRelu) v = v > 0.0f ? v : 0.0f;
    float q = std::nearbyint(v / c.y_scale) + c.y_zp;
    q = q < c.lo ? c.lo : q;
    q = q > c.hi ? c.hi : q;
    y[i] = static_cast<Y>(static_cast<int32_t>(q));
  }
}

}  // namespace

AddConstants add_constants(std::string_view op, DType a, const TensorImpl* a_scale,
                           const TensorImpl* a_zero_point, DType b, const TensorImpl* b_scale,
                           const TensorImpl* b_zero_point, DType y, const TensorImpl* y_scale,
                           const TensorImpl* y_zero_point, bool relu) {
  const Range ar = int8_range(op, a, "input");
  const Range br = int8_range(op, b, "other");
  const Range yr = int8_range(op, y, "out");
  AddConstants k{};
  k.a = a, k.b = b, k.y = y;
  k.a_scale = scalar_scale(op, a_scale, "input scale");
  k.a_zp = scalar_zero_point(op, a_zero_point, ar, "input zero point");
  k.b_scale = scalar_scale(op, b_scale, "other scale");
  k.b_zp = scalar_zero_point(op, b_zero_point, br, "other zero point");
  k.y_scale = scalar_scale(op, y_scale, "output scale");
  k.y_zp = static_cast<float>(scalar_zero_point(op, y_zero_point, yr, "output zero point"));
  k.lo = static_cast<float>(yr.lo);
  k.hi = static_cast<float>(yr.hi);
  k.relu = relu;
  return k;
}

void add_span(const void* a, const void* b, void* y, int64_t n, const AddConstants& k) {
  with_byte_type(k.a, [&](auto ta) {
    with_byte_type(k.b, [&](auto tb) {
      with_byte_type(k.y, [&](auto ty) {
        using A = decltype(ta);
        using B = decltype(tb);
        using Y = decltype(ty);
        const auto* ap = static_cast<const A*>(a);
        const auto* bp = static_cast<const B*>(b);
        auto* yp = static_cast<Y*>(y);
        if (k.relu)
          add_bytes<true>(ap, bp, yp, n, k);
        else
          add_bytes<false>(ap, bp, yp, n, k);
      });
    });
  });
}

void ResidualAdd::apply_planes(void* out, int64_t first, int64_t count, int64_t plane) const {
  parallel_for(
      0, count, std::max<int64_t>(1, 16384 / std::max<int64_t>(plane, 1)),
      [&](int64_t p0, int64_t p1) { apply(out, (first + p0) * plane, (p1 - p0) * plane); });
}

}  // namespace quant_detail

void qadd_out(const TensorImpl& input, const TensorImpl& other, const QAddOperands& q,
              TensorImpl& out) {
  constexpr std::string_view op = "qadd";
  using namespace quant_detail;
  const AddConstants k = add_constants(op, input.dtype(), q.input_scale, q.input_zero_point,
                                       other.dtype(), q.other_scale, q.other_zero_point,
                                       out.dtype(), q.output_scale, q.output_zero_point, q.relu);
  KILN_CHECK(std::ranges::equal(input.sizes(), other.sizes()), op,
             "expected other of input's shape ", dims_str(input.sizes()), ", got ",
             dims_str(other.sizes()));
  nn_detail::check_shape(op, out, input.sizes(), "out");
  auto a = views::contiguous(input);
  auto b = views::contiguous(other);
  nn_detail::OutTarget y(&out);
  const auto* ap = static_cast<const uint8_t*>(a->data());
  const auto* bp = static_cast<const uint8_t*>(b->data());
  auto* yp = static_cast<uint8_t*>(y.ptr);
  parallel_for(0, input.numel(), 16384, [&](int64_t i0, int64_t i1) {
    add_span(ap + i0, bp + i0, yp + i0, i1 - i0, k);  // one byte per element
  });
  y.finish();
}

}  // namespace kiln::kernels
