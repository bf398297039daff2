#pragma once
// Overflow-checked integer arithmetic for every size, stride, offset and byte count that comes
// from user or file input (tensor shapes, views, .npy/.safetensors/.kiln headers, kernel
// geometry). Signed overflow is undefined behaviour, so the check must come before the
// arithmetic, never after it: these helpers compute with __builtin_*_overflow and either report
// the overflow (`*_ok`, for callers that fold it into one message) or throw a kiln::Error naming
// the op, the quantity and both operands (`checked_*`).

#include <cstdint>
#include <span>
#include <string_view>

#include "kiln/runtime/error.h"

namespace kiln {

// out = a * b, a + b, a - b computed exactly; false when the result does not fit out's type
// (out is then unspecified). The operands may have other integer types than out.
template <typename A, typename B, typename T>
[[nodiscard]] constexpr bool mul_ok(A a, B b, T& out) {
  return !__builtin_mul_overflow(a, b, &out);
}
template <typename A, typename B, typename T>
[[nodiscard]] constexpr bool add_ok(A a, B b, T& out) {
  return !__builtin_add_overflow(a, b, &out);
}
template <typename A, typename B, typename T>
[[nodiscard]] constexpr bool sub_ok(A a, B b, T& out) {
  return !__builtin_sub_overflow(a, b, &out);
}

// a * b and a + b in int64; throws "op: <what> overflows int64 (a * b)".
inline int64_t checked_mul(int64_t a, int64_t b, std::string_view op, std::string_view what) {
  int64_t r;
  if (!mul_ok(a, b, r)) [[unlikely]]
    fail(op, what, " overflows int64 (", a, " * ", b, ")");
  return r;
}
inline int64_t checked_add(int64_t a, int64_t b, std::string_view op, std::string_view what) {
  int64_t r;
  if (!add_ok(a, b, r)) [[unlikely]]
    fail(op, what, " overflows int64 (", a, " + ", b, ")");
  return r;
}

// The element range [lo, hi] (inclusive, relative to the storage) that a view of `sizes` and
// `strides` starting at `offset` touches; false on overflow. An empty view (a zero size) touches
// nothing: lo = hi = offset and `empty` is set.
struct ViewExtent {
  int64_t lo = 0, hi = 0;
  bool empty = false;
};
[[nodiscard]] inline bool view_extent_ok(std::span<const int64_t> sizes,
                                         std::span<const int64_t> strides, int64_t offset,
                                         ViewExtent& out) {
  out = ViewExtent{offset, offset, false};
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) out.empty = true;
    if (sizes[i] <= 1) continue;
    int64_t span;
    if (!mul_ok(sizes[i] - 1, strides[i], span)) return false;
    int64_t& edge = span < 0 ? out.lo : out.hi;
    if (!add_ok(edge, span, edge)) return false;
  }
  if (out.empty) out.lo = out.hi = offset;
  return true;
}

}  // namespace kiln
