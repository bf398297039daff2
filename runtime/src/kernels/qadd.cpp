// kiln.qadd (kernels/quantize.h): dequantize -> add (-> relu) -> quantize in one pass over the
// bytes, with the float32 operations of those kernels in their order (dequantize_from's
// (q - zp) * scale, the add, quantize_to's x / scale rounded half to even), so folding the three
// ops into this one changes no byte. Built with -ffp-contract=off (runtime/CMakeLists.txt): a
// multiply-add fusing one dequantized value into the sum would round once where the three
// kernels round twice.
#include <cmath>

#include "kiln/runtime/kernels/quantize.h"
#include "kiln/runtime/thread_pool.h"
#include "quant_internal.h"

namespace kiln::kernels {
namespace {

using namespace nn_detail;
using namespace quant_detail;

struct AddConstants {
  float a_scale, b_scale, y_scale;
  int32_t a_zp, b_zp;
  float y_zp, lo, hi;
};

template <bool kRelu, typename A, typename B, typename Y>
void add_bytes(const A* a, const B* b, Y* y, int64_t n, const AddConstants& k) {
  parallel_for(0, n, 16384, [&](int64_t i0, int64_t i1) {
    // Local restrict pointers: a byte store may alias anything, captured pointers included.
    const A* __restrict ap = a;
    const B* __restrict bp = b;
    Y* __restrict yp = y;
    const AddConstants c = k;
    for (int64_t i = i0; i < i1; ++i) {
      const float fa = static_cast<float>(static_cast<int32_t>(ap[i]) - c.a_zp) * c.a_scale;
      const float fb = static_cast<float>(static_cast<int32_t>(bp[i]) - c.b_zp) * c.b_scale;
      float v = fa + fb;
      if constexpr (kRelu) v = v > 0.0f ? v : 0.0f;
      float q = std::nearbyint(v / c.y_scale) + c.y_zp;
      q = q < c.lo ? c.lo : q;
      q = q > c.hi ? c.hi : q;
      yp[i] = static_cast<Y>(static_cast<int32_t>(q));
    }
  });
}

}  // namespace

void qadd_out(const TensorImpl& input, const TensorImpl& other, const QAddOperands& q,
              TensorImpl& out) {
  constexpr std::string_view op = "qadd";
  const Range ar = int8_range(op, input.dtype(), "input");
  const Range br = int8_range(op, other.dtype(), "other");
  const Range yr = int8_range(op, out.dtype(), "out");
  KILN_CHECK(std::ranges::equal(input.sizes(), other.sizes()), op,
             "expected other of input's shape ", dims_str(input.sizes()), ", got ",
             dims_str(other.sizes()));
  check_shape(op, out, input.sizes(), "out");
  AddConstants k{};
  k.a_scale = scalar_scale(op, q.input_scale, "input scale");
  k.a_zp = scalar_zero_point(op, q.input_zero_point, ar, "input zero point");
  k.b_scale = scalar_scale(op, q.other_scale, "other scale");
  k.b_zp = scalar_zero_point(op, q.other_zero_point, br, "other zero point");
  k.y_scale = scalar_scale(op, q.output_scale, "output scale");
  k.y_zp = static_cast<float>(scalar_zero_point(op, q.output_zero_point, yr, "output zero point"));
  k.lo = static_cast<float>(yr.lo);
  k.hi = static_cast<float>(yr.hi);
  auto a = views::contiguous(input);
  auto b = views::contiguous(other);
  OutTarget y(&out);
  with_byte_type(input.dtype(), [&](auto ta) {
    with_byte_type(other.dtype(), [&](auto tb) {
      with_byte_type(out.dtype(), [&](auto ty) {
        using A = decltype(ta);
        using B = decltype(tb);
        using Y = decltype(ty);
        const int64_t n = input.numel();
        if (q.relu)
          add_bytes<true>(a->data_ptr<A>(), b->data_ptr<B>(), static_cast<Y*>(y.ptr), n, k);
        else
          add_bytes<false>(a->data_ptr<A>(), b->data_ptr<B>(), static_cast<Y*>(y.ptr), n, k);
      });
    });
  });
  y.finish();
}

}  // namespace kiln::kernels
