// where(cond, a, b) and clamp(x, lo, hi): three operands, 3-way broadcasting.
#include <cmath>
#include <limits>

#include "elementwise_engine.h"

namespace kiln::kernels {

namespace {

// Scalar operands of where (a or b given as numbers).
struct Operand3 {
  const TensorImpl* t = nullptr;
  Scalar s;
};

void where_impl(const TensorImpl& cond, const Operand3& a, const Operand3& b, TensorImpl& out) {
  constexpr std::string_view name = "where";
  DType result;
  if (a.t && b.t) {
    result = result_type(*a.t, *b.t);
  } else if (a.t) {
    result = result_type(*a.t, b.s);
  } else if (b.t) {
    result = result_type(*b.t, a.s);
  } else {
    // Two numbers: PyTorch promotes the two wrapped scalars between themselves.
    result = promote_types(a.s.default_dtype(), b.s.default_dtype());
  }
  const Dims shape =
      broadcast_shape(cond.sizes(), a.t ? a.t->sizes() : Dims{}, b.t ? b.t->sizes() : Dims{}, name);
  const TensorImpl* inputs[] = {&cond, a.t, b.t};
  ew::check_out(name, out, shape, result, inputs);
  if (out.numel() == 0) return;
  ew::visit_compute(ew::opmath_dtype(result), [&](auto tag) {
    using T = decltype(tag);
    T sa{}, sb{};
    const std::array<ew::In, 3> ins{
        ew::make_in(cond, shape, name),
        a.t ? ew::make_in(*a.t, shape, name)
            : (sa = ew::scalar_as<T>(a.s), ew::make_scalar_in(&sa, shape.size())),
        b.t ? ew::make_in(*b.t, shape, name)
            : (sb = ew::scalar_as<T>(b.s), ew::make_scalar_in(&sb, shape.size()))};
    ew::run_typed<T, false, bool, T, T>(out, ins,
                                        [](T* o, const void* const* in, const bool*, int64_t n) {
                                          const bool* c = static_cast<const bool*>(in[0]);
                                          const T* x = static_cast<const T*>(in[1]);
                                          const T* y = static_cast<const T*>(in[2]);
                                          for (int64_t i = 0; i < n; ++i) o[i] = c[i] ? x[i] : y[i];
                                        });
  });
}

template <typename T>
inline T clamp_one(T x, T lo, T hi) {
  // NaN-propagating max then min (NaN bounds give NaN).
  T r = x;
  if constexpr (std::is_floating_point_v<T>) {
    r = (r < lo || lo != lo) ? lo : r;
    r = (r > hi || hi != hi) ? hi : r;
    return x != x ? x : r;
  } else {
    r = r < lo ? lo : r;
    return r > hi ? hi : r;
  }
}

}  // namespace

void where_out(const TensorImpl& cond, const TensorImpl& a, const TensorImpl& b, TensorImpl& out) {
  where_impl(cond, Operand3{&a, {}}, Operand3{&b, {}}, out);
}
void where_out(const TensorImpl& cond, const TensorImpl& a, const Scalar& b, TensorImpl& out) {
  where_impl(cond, Operand3{&a, {}}, Operand3{nullptr, b}, out);
}
void where_out(const TensorImpl& cond, const Scalar& a, const Scalar& b, TensorImpl& out) {
  where_impl(cond, Operand3{nullptr, a}, Operand3{nullptr, b}, out);
}
TensorImplPtr where(const TensorImpl& cond, const TensorImpl& a, const TensorImpl& b) {
  const Dims shape = broadcast_shape(cond.sizes(), a.sizes(), b.sizes(), "where");
  auto out = empty(shape, result_type(a, b));
  where_out(cond, a, b, *out);
  return out;
}

void clamp_out(const TensorImpl& x, std::optional<Scalar> lo, std::optional<Scalar> hi,
               TensorImpl& out) {
  constexpr std::string_view name = "clamp";
  KILN_CHECK(lo || hi, name, "at least one of 'min' or 'max' must be given");
  Scalar bounds[2];
  size_t nb = 0;
  if (lo) bounds[nb++] = *lo;
  if (hi) bounds[nb++] = *hi;
  const DType result = ew::result_type_with_scalars(x, std::span<const Scalar>(bounds, nb));
  const TensorImpl* inputs[] = {&x};
  ew::check_out(name, out, x.sizes(), result, inputs);
  if (out.numel() == 0) return;
  ew::visit_compute(ew::opmath_dtype(result), [&](auto tag) {
    using T = decltype(tag);
    using L = std::numeric_limits<T>;
    const T l = lo ? ew::scalar_as<T>(*lo) : (L::has_infinity ? -L::infinity() : L::lowest());
    const T h = hi ? ew::scalar_as<T>(*hi) : (L::has_infinity ? L::infinity() : L::max());
    const std::array<ew::In, 1> ins{ew::make_in(x, out.sizes(), name)};
    ew::run<1, T, T, false>(out, ins, [l, h](T* o, const T* const* in, const bool*, int64_t n) {
      const T* v = in[0];
      for (int64_t i = 0; i < n; ++i) o[i] = clamp_one(v[i], l, h);
    });
  });
}

void clamp_out(const TensorImpl& x, const TensorImpl* lo, const TensorImpl* hi, TensorImpl& out) {
  constexpr std::string_view name = "clamp";
  KILN_CHECK(lo || hi, name, "at least one of 'min' or 'max' must be given");
  if (!hi) return binary_out(BinaryOp::Maximum, x, *lo, out);
  if (!lo) return binary_out(BinaryOp::Minimum, x, *hi, out);
  const DType result = result_type(x, *lo, *hi);
  const Dims shape = broadcast_shape(x.sizes(), lo->sizes(), hi->sizes(), name);
  const TensorImpl* inputs[] = {&x, lo, hi};
  ew::check_out(name, out, shape, result, inputs);
  if (out.numel() == 0) return;
  ew::visit_compute(ew::opmath_dtype(result), [&](auto tag) {
    using T = decltype(tag);
    const std::array<ew::In, 3> ins{ew::make_in(x, shape, name), ew::make_in(*lo, shape, name),
                                    ew::make_in(*hi, shape, name)};
    ew::run<3, T, T, false>(out, ins, [](T* o, const T* const* in, const bool*, int64_t n) {
      const T* v = in[0];
      const T* l = in[1];
      const T* h = in[2];
      for (int64_t i = 0; i < n; ++i) o[i] = clamp_one(v[i], l[i], h[i]);
    });
  });
}

void clamp_(TensorImpl& x, std::optional<Scalar> lo, std::optional<Scalar> hi) {
  clamp_out(x, lo, hi, x);
}

}  // namespace kiln::kernels
