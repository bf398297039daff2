#pragma once
// Private to the pooling kernels (pool.cpp, qpool.cpp): the checked geometry of a 2-d pool and
// PyTorch's average-pooling window.

#include <algorithm>
#include <cstdint>
#include <span>
#include <string_view>

#include "kiln/runtime/kernels/pool.h"

namespace kiln::kernels::pool_detail {

struct PoolGeom {
  int64_t planes = 0, H = 0, W = 0, Ho = 0, Wo = 0;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  Dims out_shape;
};

void check_pool_input(std::string_view op, std::span<const int64_t> in);
// The checked geometry of `p` on an input of shape `in` (dilation only for max pooling).
PoolGeom pool_geom(std::string_view op, std::span<const int64_t> in, const Pool2dParams& p,
                   bool max_pool);
// Planes per parallel chunk for `work_per_plane` element visits each.
int64_t plane_grain(int64_t work_per_plane);

// The input rows [hs, he) and columns [ws, we) one average-pooling output reads, and its divisor
// (PyTorch's rules: the window clipped to the padded input counts when count_include_pad).
struct AvgWin {
  int64_t hs, he, ws, we;
  int64_t divisor;
};
inline AvgWin avg_window(const PoolGeom& g, const Pool2dParams& p, int64_t oh, int64_t ow) {
  int64_t hs = oh * g.sh - g.ph, ws = ow * g.sw - g.pw;
  int64_t he = std::min(hs + g.kh, g.H + g.ph), we = std::min(ws + g.kw, g.W + g.pw);
  const int64_t pool_size = (he - hs) * (we - ws);
  hs = std::max<int64_t>(hs, 0), ws = std::max<int64_t>(ws, 0);
  he = std::min(he, g.H), we = std::min(we, g.W);
  int64_t div;
  if (p.divisor_override != 0) {
    div = p.divisor_override;
  } else if (p.count_include_pad) {
    div = pool_size;
  } else {
    div = (he - hs) * (we - ws);
  }
  return {hs, he, ws, we, div};
}

}  // namespace kiln::kernels::pool_detail
