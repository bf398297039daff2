// Promotion, broadcasting and output checks shared by the elementwise kernels.
#include <algorithm>
#include <cstdlib>
#include <optional>

#include "elementwise_engine.h"
#include "kiln/runtime/kernels/copy.h"

namespace kiln::kernels {

DType Scalar::default_dtype() const {
  switch (kind) {
    case Kind::Bool:
      return DType::Bool;
    case Kind::Int:
      return DType::Int64;
    case Kind::Float:
      return DType::Float32;
  }
  return DType::Float32;
}

namespace {

enum class Category { Bool = 0, Integral = 1, Floating = 2 };
Category category(DType t) {
  if (t == DType::Bool) return Category::Bool;
  return is_floating(t) ? Category::Floating : Category::Integral;
}

// PyTorch's ResultTypeState: three tiers, each promoted within itself, then combined so that a
// lower tier only contributes when it is of a higher category.
struct ResultState {
  std::optional<DType> dim, zero, wrapped;
  static void update(std::optional<DType>& slot, DType t) {
    slot = slot ? promote_types(*slot, t) : t;
  }
  void add(const TensorImpl& t) { update(t.dim() == 0 ? zero : dim, t.dtype()); }
  void add(const Scalar& s) { update(wrapped, s.default_dtype()); }

  static std::optional<DType> combine(std::optional<DType> higher, std::optional<DType> lower) {
    if (!higher) return lower;
    if (!lower) return higher;
    if (is_floating(*higher)) return higher;
    if (*higher == DType::Bool || category(*lower) > category(*higher)) {
      return promote_types(*higher, *lower);
    }
    return higher;
  }
  DType result() const {
    auto r = combine(combine(dim, zero), wrapped);
    return r ? *r : DType::Float32;
  }
};

}  // namespace

DType result_type(DType a, DType b) {
  return promote_types(a, b);
}

DType result_type(const TensorImpl& a, const TensorImpl& b) {
  ResultState s;
  s.add(a);
  s.add(b);
  return s.result();
}

DType result_type(const TensorImpl& a, const TensorImpl& b, const TensorImpl& c) {
  ResultState s;
  s.add(a);
  s.add(b);
  s.add(c);
  return s.result();
}

DType result_type(const TensorImpl& a, const Scalar& b) {
  ResultState s;
  s.add(a);
  s.add(b);
  return s.result();
}

DType ew::result_type_with_scalars(const TensorImpl& x, std::span<const Scalar> scalars) {
  ResultState s;
  s.add(x);
  for (const Scalar& v : scalars) s.add(v);
  return s.result();
}

bool can_cast(DType from, DType to) {
  if (is_floating(from) && is_integral(to, /*include_bool=*/true)) return false;
  if (from != DType::Bool && to == DType::Bool) return false;
  return true;
}

Dims broadcast_shape(std::span<const int64_t> a, std::span<const int64_t> b, std::string_view op) {
  return broadcast_shapes(a, b, op);
}

Dims broadcast_shape(std::span<const int64_t> a, std::span<const int64_t> b,
                     std::span<const int64_t> c, std::string_view op) {
  const Dims ab = broadcast_shapes(a, b, op);
  const size_t r = std::max(ab.size(), c.size());
  Dims out(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i < r - ab.size() ? 1 : ab[i - (r - ab.size())];
    const int64_t dc = i < r - c.size() ? 1 : c[i - (r - c.size())];
    KILN_CHECK(da == dc || da == 1 || dc == 1, op, "shapes ", Dims(a), ", ", Dims(b), " and ",
               Dims(c), " do not broadcast (dim ", i, ": ", da, " vs ", dc, ")");
    out[i] = da == 1 ? dc : da;
  }
  return out;
}

namespace ew {

bool streaming_disabled() {
  static const bool off = [] {
    const char* v = std::getenv("KILN_EW_NO_STREAM");
    return v && *v && *v != '0';
  }();
  return off;
}

namespace {

// Byte range [lo, hi) covered by a tensor's elements.
std::pair<const char*, const char*> byte_range(const TensorImpl& t) {
  const char* p = static_cast<const char*>(t.data());
  const int64_t item = static_cast<int64_t>(t.itemsize());
  int64_t lo = 0, hi = 0;
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t ext = (t.sizes()[d] - 1) * t.strides()[d];
    if (ext < 0)
      lo += ext;
    else
      hi += ext;
  }
  return {p + lo * item, p + hi * item + item};
}

}  // namespace

void check_out(std::string_view op, const TensorImpl& out, std::span<const int64_t> shape,
               DType result, std::span<const TensorImpl* const> inputs) {
  KILN_CHECK(out.sizes() == Dims(shape), op, "expected out of shape ", Dims(shape), ", got ",
             out.sizes());
  KILN_CHECK(can_cast(result, out.dtype()), op, "result type ", result,
             " can't be cast to the desired output type ", out.dtype());
  if (out.numel() <= 1) return;
  for (int64_t d = 0; d < out.dim(); ++d) {
    KILN_CHECK(out.sizes()[d] == 1 || out.strides()[d] != 0, op,
               "expected an out whose elements do not overlap, got ", describe(out),
               " with strides ", out.strides());
  }
  const auto [olo, ohi] = byte_range(out);
  for (const TensorImpl* in : inputs) {
    if (in == nullptr || in->numel() == 0 || in == &out) continue;
    if (in->storage().get() != out.storage().get()) continue;
    const auto [ilo, ihi] = byte_range(*in);
    if (ihi <= olo || ohi <= ilo) continue;
    bool exact =
        in->data() == out.data() && in->dtype() == out.dtype() && in->sizes() == out.sizes();
    for (int64_t d = 0; exact && d < out.dim(); ++d) {
      exact = out.sizes()[d] == 1 || in->strides()[d] == out.strides()[d];
    }
    KILN_CHECK(exact, op, "expected out to alias an input exactly or not at all, got out ",
               describe(out), " partially overlapping input ", describe(*in));
  }
}

}  // namespace ew
}  // namespace kiln::kernels
