#pragma once
// The strided N-d loop under every elementwise kernel: operands share one iteration shape (already
// broadcast: stride 0 on broadcast dims); dims that are contiguous for every operand are merged so
// the inner loop is as long as possible, then `inner(ptrs, byte_strides, n)` runs once per
// innermost row. Parallel over the outer rows above a size threshold.

#include <array>
#include <cstdint>
#include <span>

#include "kiln/runtime/small_vector.h"
#include "kiln/runtime/thread_pool.h"

namespace kiln::kernels {

// Elements per task below which a loop stays on one thread (a few microseconds of work).
inline constexpr int64_t kParallelGrain = 32768;

template <size_t N>
struct LoopPlan {
  Dims shape;                              // collapsed, innermost last
  std::array<Dims, N> strides;             // byte strides per operand, collapsed
  std::array<char*, N> base{};
};

// Merges dim i-1 into dim i when every operand steps over them as one dim.
template <size_t N>
LoopPlan<N> plan_loop(std::span<const int64_t> shape, const std::array<char*, N>& base,
                      const std::array<Dims, N>& byte_strides) {
  LoopPlan<N> p;
  p.base = base;
  // Drop size-1 dims (their stride is irrelevant).
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    p.shape.push_back(shape[d]);
    for (size_t k = 0; k < N; ++k) p.strides[k].push_back(byte_strides[k][d]);
  }
  if (p.shape.empty()) {
    p.shape.push_back(1);
    for (size_t k = 0; k < N; ++k) p.strides[k].push_back(0);
    return p;
  }
  // Merge from the inside out.
  Dims shape_out{p.shape.back()};
  std::array<Dims, N> strides_out;
  for (size_t k = 0; k < N; ++k) strides_out[k].push_back(p.strides[k].back());
  for (size_t d = p.shape.size() - 1; d-- > 0;) {
    bool mergeable = true;
    for (size_t k = 0; k < N; ++k) {
      if (p.strides[k][d] != strides_out[k][0] * shape_out[0]) mergeable = false;
    }
    if (mergeable) {
      shape_out[0] *= p.shape[d];
    } else {
      shape_out.insert(0, p.shape[d]);
      for (size_t k = 0; k < N; ++k) strides_out[k].insert(0, p.strides[k][d]);
    }
  }
  p.shape = std::move(shape_out);
  p.strides = std::move(strides_out);
  return p;
}

// Runs inner over rows [row_begin, row_end) of the plan (a row = one pass of the innermost dim).
template <size_t N, typename Inner>
void run_rows(const LoopPlan<N>& p, int64_t row_begin, int64_t row_end, Inner&& inner) {
  const size_t rank = p.shape.size();
  const int64_t n = p.shape[rank - 1];
  std::array<int64_t, N> inner_strides;
  for (size_t k = 0; k < N; ++k) inner_strides[k] = p.strides[k][rank - 1];
  // Decompose row_begin into an index over the outer dims.
  Dims idx(rank > 0 ? rank - 1 : 0);
  int64_t r = row_begin;
  for (size_t d = rank - 1; d-- > 0;) {
    idx[d] = r % p.shape[d];
    r /= p.shape[d];
  }
  std::array<char*, N> ptrs;
  for (size_t k = 0; k < N; ++k) {
    ptrs[k] = p.base[k];
    for (size_t d = 0; d + 1 < rank; ++d) ptrs[k] += idx[d] * p.strides[k][d];
  }
  for (int64_t row = row_begin; row < row_end; ++row) {
    inner(ptrs.data(), inner_strides.data(), n);
    // Odometer increment over outer dims.
    for (size_t d = rank - 1; d-- > 0;) {
      for (size_t k = 0; k < N; ++k) ptrs[k] += p.strides[k][d];
      if (++idx[d] < p.shape[d]) break;
      for (size_t k = 0; k < N; ++k) ptrs[k] -= p.shape[d] * p.strides[k][d];
      idx[d] = 0;
    }
  }
}

// The whole loop; parallel over rows (or over the single row's elements) when large enough.
template <size_t N, typename Inner>
void for_each_strided(const LoopPlan<N>& p, Inner&& inner) {
  const size_t rank = p.shape.size();
  const int64_t n = p.shape[rank - 1];
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < rank; ++d) rows *= p.shape[d];
  if (rows == 0 || n == 0) return;
  if (rows == 1) {
    // One long row: split it.
    std::array<int64_t, N> s;
    for (size_t k = 0; k < N; ++k) s[k] = p.strides[k][rank - 1];
    parallel_for(0, n, kParallelGrain, [&](int64_t b, int64_t e) {
      std::array<char*, N> ptrs;
      for (size_t k = 0; k < N; ++k) ptrs[k] = p.base[k] + b * s[k];
      inner(ptrs.data(), s.data(), e - b);
    });
    return;
  }
  const int64_t grain_rows = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(n, 1));
  parallel_for(0, rows, grain_rows,
               [&](int64_t b, int64_t e) { run_rows(p, b, e, inner); });
}

}  // namespace kiln::kernels
