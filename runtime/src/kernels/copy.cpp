#include "kiln/runtime/kernels/copy.h"

#include <cstring>

#include "kiln/runtime/cuda/eager.h"
#include "kiln/runtime/kernels/loop.h"

namespace kiln::kernels {

Dims broadcast_shapes(std::span<const int64_t> a, std::span<const int64_t> b, std::string_view op) {
  const size_t r = std::max(a.size(), b.size());
  Dims out(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    KILN_CHECK(da == db || da == 1 || db == 1, op, "shapes ", Dims(a), " and ", Dims(b),
               " do not broadcast (dim ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Dims broadcast_strides(const TensorImpl& t, std::span<const int64_t> shape, std::string_view op) {
  const size_t r = shape.size();
  KILN_CHECK(static_cast<size_t>(t.dim()) <= r, op, "cannot broadcast ", t.sizes(), " to ",
             Dims(shape));
  Dims strides(r);
  const size_t lead = r - t.dim();
  for (size_t i = 0; i < r; ++i) {
    if (i < lead) {
      strides[i] = 0;
      continue;
    }
    const int64_t s = t.sizes()[i - lead];
    KILN_CHECK(s == shape[i] || s == 1, op, "cannot broadcast ", t.sizes(), " to ", Dims(shape));
    strides[i] = s == 1 ? 0 : t.strides()[i - lead];
  }
  return strides;
}

namespace {
template <typename To, typename From>
inline To convert(From v) {
  if constexpr (std::is_same_v<To, bool>) {
    return static_cast<float>(v) != 0.0f;
  } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) {
    return To(static_cast<float>(v));
  } else if constexpr (std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>) {
    return static_cast<To>(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}
}  // namespace

void copy_(TensorImpl& dst, const TensorImpl& src) {
  if (dst.device() != Device::CPU || src.device() != Device::CPU) [[unlikely]] {
    return cuda::copy_out(dst, src);
  }
  Dims src_strides = broadcast_strides(src, dst.sizes(), "copy_");
  if (dst.numel() == 0) return;
  // The same elements (an update kernel given its input's buffer as its output): nothing to do.
  if (dst.data() == src.data() && dst.dtype() == src.dtype() && dst.strides() == src_strides) {
    return;
  }
  const int64_t ds = static_cast<int64_t>(dst.itemsize());
  const int64_t ss = static_cast<int64_t>(src.itemsize());
  std::array<Dims, 2> bytes{dst.strides(), src_strides};
  for (auto& v : bytes[0]) v *= ds;
  for (auto& v : bytes[1]) v *= ss;
  auto plan = plan_loop<2>(dst.sizes(),
                           {static_cast<char*>(dst.data()), static_cast<char*>(src.data())}, bytes);
  if (dst.dtype() == src.dtype()) {
    const int64_t item = ds;
    for_each_strided(plan, [item](char** p, const int64_t* s, int64_t n) {
      if (s[0] == item && s[1] == item) {
        std::memcpy(p[0], p[1], static_cast<size_t>(n * item));
        return;
      }
      for (int64_t i = 0; i < n; ++i) std::memcpy(p[0] + i * s[0], p[1] + i * s[1], item);
    });
    return;
  }
  visit_dtype(dst.dtype(), [&](auto d) {
    using D = decltype(d);
    visit_dtype(src.dtype(), [&](auto sv) {
      using S = decltype(sv);
      for_each_strided(plan, [](char** p, const int64_t* s, int64_t n) {
        for (int64_t i = 0; i < n; ++i) {
          *reinterpret_cast<D*>(p[0] + i * s[0]) =
              convert<D>(*reinterpret_cast<const S*>(p[1] + i * s[1]));
        }
      });
    });
  });
}

}  // namespace kiln::kernels
