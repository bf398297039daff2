#include "kiln/runtime/kernels/copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kiln/runtime/cuda/eager.h"
#include "kiln/runtime/kernels/loop.h"
#include "kiln/runtime/thread_pool.h"
#include "transpose_bytes.h"

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
template <typename T>
void copy_tile(char* dst, const char* src, int64_t rows, int64_t cols, int64_t dst_row,
               int64_t src_col) {
  // dst[a * dst_row + c] = src[a + c * src_col] (elements): src is contiguous along a.
  auto* d = reinterpret_cast<T*>(dst);
  const auto* x = reinterpret_cast<const T*>(src);
  for (int64_t a = 0; a < rows; ++a)
    for (int64_t c = 0; c < cols; ++c) d[a * dst_row + c] = x[a + c * src_col];
}

// A permutation that moves the source's unit-stride dim away from the innermost one (a
// transpose: K^T in attention, NCHW <-> NHWC) copied element by element walks the source with a
// large stride, a cache line per element. Copied in square tiles instead, each source line read
// feeds a whole tile (16 x 16 elements, at most 2 KiB: an L1-sized block on any CPU, the
// classic blocked transpose), over the thread pool.
bool copy_transposed(TensorImpl& dst, const TensorImpl& src, const Dims& src_strides) {
  if (dst.dim() < 2 || dst.dtype() != src.dtype() || !dst.is_contiguous()) return false;
  // Dims that are one run in both tensors merged (NCHW <-> NHWC is then a transpose of [C][HW]
  // per image, however small H, W or C), size-1 dims dropped.
  Dims sizes, dst_strides, strides;
  for (int64_t d = 0; d < dst.dim(); ++d) {
    const int64_t n = dst.sizes()[d];
    if (n == 1) continue;
    const size_t k = sizes.size();
    if (k > 0 && dst_strides[k - 1] == dst.strides()[d] * n &&
        strides[k - 1] == src_strides[d] * n) {
      sizes[k - 1] *= n;
      dst_strides[k - 1] = dst.strides()[d];
      strides[k - 1] = src_strides[d];
      continue;
    }
    sizes.push_back(n);
    dst_strides.push_back(dst.strides()[d]);
    strides.push_back(src_strides[d]);
  }
  const int64_t r = static_cast<int64_t>(sizes.size());
  if (r < 2 || strides[r - 1] == 1) return false;
  int64_t j = -1;  // the dim along which the source is contiguous
  for (int64_t d = r - 2; d >= 0 && j < 0; --d)
    if (strides[d] == 1) j = d;
  constexpr int64_t kTile = 16;
  if (j < 0 || sizes[j] * sizes[r - 1] < kTile * kTile) return false;
  const int64_t item = static_cast<int64_t>(dst.itemsize());
  if (item != 1 && item != 2 && item != 4 && item != 8) return false;
  Dims outer, outer_dst, outer_src;  // every dim but j and the innermost
  for (int64_t d = 0; d < r - 1; ++d) {
    if (d == j) continue;
    outer.push_back(sizes[d]);
    outer_dst.push_back(dst_strides[d]);
    outer_src.push_back(strides[d]);
  }
  int64_t n_outer = 1;
  for (int64_t n : outer) n_outer *= n;
  const int64_t rows = sizes[j], cols = sizes[r - 1];
  const int64_t dst_row = dst_strides[j], src_col = strides[r - 1];
  const int64_t row_tiles = (rows + kTile - 1) / kTile;
  char* const dbase = static_cast<char*>(dst.data());
  const char* const sbase = static_cast<const char*>(src.data());
  auto run = [&](auto type_tag) {
    using T = decltype(type_tag);
    // Units of one tile row (kTile x cols elements), chunked by the kernels' shared grain.
    const int64_t grain = std::max<int64_t>(1, kParallelGrain / (kTile * cols));
    parallel_for(0, n_outer * row_tiles, grain, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        int64_t rest = t / row_tiles, doff = 0, soff = 0;
        for (size_t k = outer.size(); k-- > 0;) {
          const int64_t i = rest % outer[k];
          rest /= outer[k];
          doff += i * outer_dst[k];
          soff += i * outer_src[k];
        }
        const int64_t a0 = (t % row_tiles) * kTile, a1 = std::min(rows, a0 + kTile);
        for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
          const int64_t c1 = std::min(cols, c0 + kTile);
          if constexpr (sizeof(T) == 1) {  // bytes (int8 activations): in registers
            transpose_bytes(reinterpret_cast<const uint8_t*>(sbase) + soff + a0 + c0 * src_col,
                            src_col, reinterpret_cast<uint8_t*>(dbase) + doff + a0 * dst_row + c0,
                            dst_row, c1 - c0, a1 - a0, 0);
          } else {
            copy_tile<T>(dbase + (doff + a0 * dst_row + c0) * item,
                         sbase + (soff + a0 + c0 * src_col) * item, a1 - a0, c1 - c0, dst_row,
                         src_col);
          }
        }
      }
    });
  };
  switch (item) {
    case 1:
      run(uint8_t{});
      break;
    case 2:
      run(uint16_t{});
      break;
    case 4:
      run(uint32_t{});
      break;
    default:
      run(uint64_t{});
      break;
  }
  return true;
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
  if (copy_transposed(dst, src, src_strides)) return;
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
