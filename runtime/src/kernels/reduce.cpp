// Reductions over a set of dims. One driver serves every op:
// - dims of size 1 are dropped, kept and reduced dims are each sorted by stride and merged where
//   memory allows, so a reduction over several dims usually becomes one long run;
// - "inner" path: the innermost reduced dim is contiguous -> each output reduces contiguous runs
//   (vectorized pairwise sums, vectorized max/min);
// - "outer" path: the innermost kept dim is contiguous -> tiles of outputs accumulate whole input
//   rows at once (vectorized across columns), in blocks of rows for accuracy;
// - a long reduction with few outputs is split in fixed-size chunks whose partial results are
//   merged pairwise; chunking depends only on the shape, so results do not depend on the thread
//   count.
#include "kiln/runtime/kernels/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "kiln/runtime/cuda/eager.h"
#include "kiln/runtime/kernels/loop.h"
#include "kiln/runtime/thread_pool.h"
#include "kiln/runtime/views.h"
#include "reduce_common.h"

namespace kiln::kernels {

using namespace red;

namespace {

constexpr int64_t kChunk = 65536;  // elements per piece of a split reduction
// Outputs per tile on the outer path: about 4 KiB of accumulators, so that each input row
// contributes a long contiguous segment (prefetch-friendly) and the tile stays in L1.
template <typename A>
inline constexpr int64_t kTileOf = std::max<int64_t>(64, 4096 / static_cast<int64_t>(sizeof(A)));
constexpr int64_t kBlockRows = 128;  // rows accumulated before merging, outer path
constexpr int kMaxRank = 64;

uint64_t dims_mask(std::span<const int64_t> dims, int64_t rank, std::string_view op) {
  KILN_CHECK(rank <= kMaxRank, op, "expected a tensor of at most ", kMaxRank, " dims, got ", rank);
  if (dims.empty()) return rank == 64 ? ~uint64_t{0} : ((uint64_t{1} << rank) - 1);
  uint64_t m = 0;
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(d, rank, op);
    if (rank == 0) continue;
    KILN_CHECK(!(m >> w & 1), op, "dim ", d, " appears multiple times in the list of dims ",
               Dims(dims));
    m |= uint64_t{1} << w;
  }
  return m;
}

// Geometry of a reduction: kept dims (outer -> inner) with input and output strides, reduced dims
// (outer -> inner) with input strides. Never empty: a missing group is one dim of size 1.
struct Geom {
  Dims ksize, kin, kout0, kout1;
  Dims rsize, rin;
  int64_t nout = 1, nred = 1;
};

int64_t stride_key(int64_t s) {
  return s == 0 ? std::numeric_limits<int64_t>::max() : (s < 0 ? -s : s);
}

Geom make_geom(const TensorImpl& in, uint64_t mask, bool keepdim, const TensorImpl* out0,
               const TensorImpl* out1) {
  struct K {
    int64_t size, in, o0, o1;
  };
  K kept[kMaxRank], red[kMaxRank];
  int nk = 0, nr = 0;
  int64_t od = 0;
  for (int64_t d = 0; d < in.dim(); ++d) {
    const int64_t size = in.sizes()[d];
    if (mask >> d & 1) {
      if (size != 1) red[nr++] = {size, in.strides()[d], 0, 0};
      if (keepdim) ++od;
    } else {
      if (size != 1) {
        kept[nk++] = {size, in.strides()[d], out0 ? out0->strides()[od] : 0,
                      out1 ? out1->strides()[od] : 0};
      }
      ++od;
    }
  }
  auto by_stride = [](const K& a, const K& b) { return stride_key(a.in) > stride_key(b.in); };
  std::stable_sort(kept, kept + nk, by_stride);
  std::stable_sort(red, red + nr, by_stride);
  Geom g;
  // Merge from the inside out when every stride set steps over two dims as one.
  auto merge = [](K* v, int n, bool outputs) {
    int m = 0;
    for (int i = 0; i < n; ++i) {
      if (m > 0) {
        K& prev = v[m - 1];
        const K& cur = v[i];
        // prev is outer, cur inner: prev merges into cur if prev.stride == cur.stride * cur.size.
        if (prev.in == cur.in * cur.size &&
            (!outputs || (prev.o0 == cur.o0 * cur.size && prev.o1 == cur.o1 * cur.size))) {
          prev = {prev.size * cur.size, cur.in, cur.o0, cur.o1};
          continue;
        }
      }
      v[m++] = v[i];
    }
    return m;
  };
  nk = merge(kept, nk, true);
  nr = merge(red, nr, false);
  if (nk == 0) kept[nk++] = {1, 0, 0, 0};
  if (nr == 0) red[nr++] = {1, 0, 0, 0};
  g.nout = g.nred = 1;
  for (int i = 0; i < nk; ++i) {
    g.ksize.push_back(kept[i].size);
    g.kin.push_back(kept[i].in);
    g.kout0.push_back(kept[i].o0);
    g.kout1.push_back(kept[i].o1);
    g.nout *= kept[i].size;
  }
  for (int i = 0; i < nr; ++i) {
    g.rsize.push_back(red[i].size);
    g.rin.push_back(red[i].in);
    g.nred *= red[i].size;
  }
  return g;
}

// Odometer over the first n dims of `size` with up to three stride sets.
struct Odo {
  int n = 0;
  const int64_t* size = nullptr;
  const int64_t* st[3] = {nullptr, nullptr, nullptr};
  int64_t idx[kMaxRank];
  int64_t off[3] = {0, 0, 0};

  Odo(int n_, const int64_t* size_, const int64_t* s0, const int64_t* s1 = nullptr,
      const int64_t* s2 = nullptr)
      : n(n_), size(size_), st{s0, s1, s2} {}
  void init(int64_t flat) {
    off[0] = off[1] = off[2] = 0;
    for (int d = n - 1; d >= 0; --d) {
      idx[d] = flat % size[d];
      flat /= size[d];
      for (int k = 0; k < 3; ++k)
        if (st[k]) off[k] += idx[d] * st[k][d];
    }
  }
  void next() {
    for (int d = n - 1; d >= 0; --d) {
      for (int k = 0; k < 3; ++k)
        if (st[k]) off[k] += st[k][d];
      if (++idx[d] < size[d]) return;
      for (int k = 0; k < 3; ++k)
        if (st[k]) off[k] -= size[d] * st[k][d];
      idx[d] = 0;
    }
  }
};

template <typename Op, typename A, typename T>
inline void generic_run(const Op& op, A& acc, const T* p, int64_t s, int64_t n, int64_t i0) {
  if (s == 1) {
    for (int64_t i = 0; i < n; ++i) op.combine(acc, p[i], i0 + i);
  } else {
    for (int64_t i = 0; i < n; ++i) op.combine(acc, p[i * s], i0 + i);
  }
}

template <typename A, typename Op>
void tree_merge(const Op& op, A* p, int64_t n) {
  while (n > 1) {
    for (int64_t i = 0; i < n / 2; ++i) p[i] = op.merge(p[2 * i], p[2 * i + 1]);
    if (n % 2) p[n / 2] = p[n - 1];
    n = (n + 1) / 2;
  }
}

// Runs `op` over the geometry. Op provides in_t, acc_t, out_t, identity(), combine(acc, x, idx),
// run(acc, ptr, stride, n, idx0), merge(a, b) (a precedes b) and write(acc, count, out, index).
template <typename Op>
void drive(const Op& op, const TensorImpl& in, const Geom& g, TensorImpl* out0, TensorImpl* out1) {
  using T = typename Op::in_t;
  using A = typename Op::acc_t;
  using O = typename Op::out_t;
  if (g.nout == 0) return;
  const T* base = in.data_ptr<T>();
  O* o0 = out0->data_ptr<O>();
  int64_t* o1 = out1 ? out1->data_ptr<int64_t>() : nullptr;
  const int64_t R = g.nred;
  const int kr = static_cast<int>(g.ksize.size());
  const int rr = static_cast<int>(g.rsize.size());
  auto write_at = [&](const A& acc, int64_t off0, int64_t off1) {
    op.write(acc, R, o0 + off0, o1 ? o1 + off1 : nullptr);
  };

  if (R == 0) {
    const A id = op.identity();
    parallel_for(0, g.nout, kParallelGrain, [&](int64_t b, int64_t e) {
      Odo ko(kr, g.ksize.data(), g.kin.data(), g.kout0.data(), g.kout1.data());
      ko.init(b);
      for (int64_t o = b; o < e; ++o, ko.next()) write_at(id, ko.off[1], ko.off[2]);
    });
    return;
  }

  const bool outer = R > 1 && g.rin[rr - 1] != 1 && g.kin[kr - 1] == 1 && g.ksize[kr - 1] >= 8;
  if (outer) {
    constexpr int64_t kTile = kTileOf<A>;
    const int64_t W = g.ksize[kr - 1];
    const int64_t co0 = g.kout0[kr - 1], co1 = g.kout1[kr - 1];
    const int64_t nouter = g.nout / W;
    const int64_t ntiles = (W + kTile - 1) / kTile;
    const int64_t ntask = nouter * ntiles;
    const int64_t tw_max = std::min(W, kTile);
    // Split the rows too when there are few tiles (fixed by the shape, not the thread count).
    int64_t nrc = 1;
    if (ntask < 16 && R * tw_max >= 4 * kChunk) {
      nrc = std::min<int64_t>(64, R * tw_max / (2 * kChunk));
    }
    const int64_t rows_per = (R + nrc - 1) / nrc;
    nrc = (R + rows_per - 1) / rows_per;

    auto tile = [&](int64_t task, int64_t rb, int64_t re, A* acc) {
      const int64_t ot = task / ntiles, t = task % ntiles;
      const int64_t j0 = t * kTile, tw = std::min(kTile, W - j0);
      Odo ko(kr - 1, g.ksize.data(), g.kin.data());
      ko.init(ot);
      const T* p0 = base + ko.off[0] + j0;
      A blk[kTile];
      const A id = op.identity();
      for (int64_t j = 0; j < tw; ++j) acc[j] = id;
      Odo ro(rr, g.rsize.data(), g.rin.data());
      ro.init(rb);
      for (int64_t r = rb; r < re;) {
        const int64_t be = std::min(re, r + kBlockRows);
        for (int64_t j = 0; j < tw; ++j) blk[j] = id;
        if constexpr (requires(A & a, T x) { op.prime(a, x, int64_t{0}); }) {
          // Ops that start from their first element (var's shift) take it here, so that their
          // combine needs no branch.
          const T* p = p0 + ro.off[0];
          for (int64_t j = 0; j < tw; ++j) op.prime(blk[j], p[j], r);
          ++r;
          ro.next();
        }
        // Four rows per sweep: each accumulator is loaded and stored once per four inputs.
        for (; r + 4 <= be; r += 4) {
          const T* q0 = p0 + ro.off[0];
          ro.next();
          const T* q1 = p0 + ro.off[0];
          ro.next();
          const T* q2 = p0 + ro.off[0];
          ro.next();
          const T* q3 = p0 + ro.off[0];
          ro.next();
          for (int64_t j = 0; j < tw; ++j) {
            A a = blk[j];
            op.combine(a, q0[j], r);
            op.combine(a, q1[j], r + 1);
            op.combine(a, q2[j], r + 2);
            op.combine(a, q3[j], r + 3);
            blk[j] = a;
          }
        }
        for (; r < be; ++r, ro.next()) {
          const T* p = p0 + ro.off[0];
          for (int64_t j = 0; j < tw; ++j) op.combine(blk[j], p[j], r);
        }
        for (int64_t j = 0; j < tw; ++j) acc[j] = op.merge(acc[j], blk[j]);
      }
    };
    auto write_tile = [&](int64_t task, const A* acc) {
      const int64_t ot = task / ntiles, t = task % ntiles;
      const int64_t j0 = t * kTile, tw = std::min(kTile, W - j0);
      Odo ko(kr - 1, g.ksize.data(), nullptr, g.kout0.data(), g.kout1.data());
      ko.init(ot);
      for (int64_t j = 0; j < tw; ++j)
        write_at(acc[j], ko.off[1] + (j0 + j) * co0, ko.off[2] + (j0 + j) * co1);
    };
    if (nrc == 1) {
      const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, R * tw_max));
      parallel_for(0, ntask, grain, [&](int64_t b, int64_t e) {
        A acc[kTile];
        for (int64_t task = b; task < e; ++task) {
          tile(task, 0, R, acc);
          write_tile(task, acc);
        }
      });
    } else {
      std::unique_ptr<A[]> part(new A[static_cast<size_t>(ntask * nrc * kTile)]);
      parallel_for(0, ntask * nrc, 1, [&](int64_t b, int64_t e) {
        for (int64_t k = b; k < e; ++k) {
          const int64_t task = k / nrc, c = k % nrc;
          tile(task, c * rows_per, std::min(R, (c + 1) * rows_per), part.get() + k * kTile);
        }
      });
      for (int64_t task = 0; task < ntask; ++task) {
        A* first = part.get() + task * nrc * kTile;
        for (int64_t c = 1; c < nrc; ++c)
          for (int64_t j = 0; j < kTile; ++j) first[j] = op.merge(first[j], first[c * kTile + j]);
        write_tile(task, first);
      }
    }
    return;
  }

  // Per-output path: each output reduces runs along the innermost reduced dim.
  const int64_t inner = g.rsize[rr - 1], istride = g.rin[rr - 1];
  auto reduce_one = [&](int64_t in_off, int64_t rb, int64_t re) {
    A acc = op.identity();
    if (rr == 1) {  // one reduced dim: a single run
      op.run(acc, base + in_off + rb * istride, istride, re - rb, rb);
      return acc;
    }
    Odo rows(rr - 1, g.rsize.data(), g.rin.data());
    rows.init(rb / inner);
    int64_t col = rb % inner;
    for (int64_t r = rb; r < re; rows.next()) {
      const int64_t n = std::min(inner - col, re - r);
      op.run(acc, base + in_off + rows.off[0] + col * istride, istride, n, r);
      r += n;
      col = 0;
    }
    return acc;
  };
  if (R >= 2 * kChunk && g.nout <= 16) {
    const int64_t nch = (R + kChunk - 1) / kChunk;
    std::unique_ptr<A[]> part(new A[static_cast<size_t>(g.nout * nch)]);
    parallel_for(0, g.nout * nch, 1, [&](int64_t b, int64_t e) {
      Odo ko(kr, g.ksize.data(), g.kin.data());
      for (int64_t k = b; k < e; ++k) {
        const int64_t o = k / nch, c = k % nch;
        ko.init(o);
        part[k] = reduce_one(ko.off[0], c * kChunk, std::min(R, (c + 1) * kChunk));
      }
    });
    Odo ko(kr, g.ksize.data(), nullptr, g.kout0.data(), g.kout1.data());
    ko.init(0);
    for (int64_t o = 0; o < g.nout; ++o, ko.next()) {
      tree_merge(op, part.get() + o * nch, nch);
      write_at(part[o * nch], ko.off[1], ko.off[2]);
    }
    return;
  }
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / R);
  parallel_for(0, g.nout, grain, [&](int64_t b, int64_t e) {
    Odo ko(kr, g.ksize.data(), g.kin.data(), g.kout0.data(), g.kout1.data());
    ko.init(b);
    for (int64_t o = b; o < e; ++o, ko.next()) {
      write_at(reduce_one(ko.off[0], 0, R), ko.off[1], ko.off[2]);
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Ops

template <typename T, bool Mean>
struct SumOp {
  using in_t = T;
  using acc_t = sum_acc_t<T>;
  using out_t = sum_out_t<T>;
  acc_t identity() const { return acc_t(0); }
  void combine(acc_t& a, T x, int64_t) const { a += to<acc_t>(x); }
  void run(acc_t& a, const T* p, int64_t s, int64_t n, int64_t i0) const {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      if (s == 1) {
        a += pairwise_sum(p, n, Ident{});
        return;
      }
    }
    generic_run(*this, a, p, s, n, i0);
  }
  acc_t merge(acc_t a, acc_t b) const { return a + b; }
  void write(acc_t a, int64_t count, out_t* v, int64_t*) const {
    if constexpr (Mean) {
      *v = from<out_t>(static_cast<double>(a) / static_cast<double>(count));
    } else {
      *v = from<out_t>(a);
    }
  }
};

template <typename T>
struct ProdOp {
  using in_t = T;
  using acc_t =
      std::conditional_t<is_fp_v<T>, std::conditional_t<std::is_same_v<T, double>, double, float>,
                         int64_t>;
  using out_t = sum_out_t<T>;
  acc_t identity() const { return acc_t(1); }
  void combine(acc_t& a, T x, int64_t) const { a *= to<acc_t>(x); }
  void run(acc_t& a, const T* p, int64_t s, int64_t n, int64_t i0) const {
    generic_run(*this, a, p, s, n, i0);
  }
  acc_t merge(acc_t a, acc_t b) const { return a * b; }
  void write(acc_t a, int64_t, out_t* v, int64_t*) const { *v = from<out_t>(a); }
};

template <typename T, bool Max>
struct ExtremeOp {
  using in_t = T;
  using acc_t = compute_t<T>;
  using out_t = T;
  acc_t identity() const {
    if constexpr (is_fp_v<T>) {
      return Max ? -std::numeric_limits<acc_t>::infinity() : std::numeric_limits<acc_t>::infinity();
    } else {
      return Max ? std::numeric_limits<acc_t>::lowest() : std::numeric_limits<acc_t>::max();
    }
  }
  void combine(acc_t& a, T x, int64_t) const {
    if constexpr (is_fp_v<T>) {
      a = sticky_pick_scalar<Max>(a, to<acc_t>(x));
    } else {
      a = Max ? (x > a ? x : a) : (x < a ? x : a);
    }
  }
  void run(acc_t& a, const T* p, int64_t s, int64_t n, int64_t i0) const {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      if (s == 1) {
        a = vec_extreme<Max>(a, p, n, Ident{});
        return;
      }
    }
    generic_run(*this, a, p, s, n, i0);
  }
  acc_t merge(acc_t a, acc_t b) const {
    acc_t r = a;
    combine(r, from<T>(b), 0);
    return r;
  }
  void write(acc_t a, int64_t, out_t* v, int64_t*) const { *v = from<out_t>(a); }
};

// max/min with the index along the (single) reduced dim; Values: write the values to out0 and
// the indices to out1, else the indices to out0.
template <typename T, bool Max, bool Values>
struct ArgOp {
  using in_t = T;
  struct acc_t {
    compute_t<T> v;
    int64_t i;
  };
  using out_t = std::conditional_t<Values, T, int64_t>;
  static bool isnan_(compute_t<T> v) {
    if constexpr (is_fp_v<T>) {
      return v != v;
    } else {
      return false;
    }
  }
  static bool better(compute_t<T> x, compute_t<T> cur) { return Max ? x > cur : x < cur; }
  acc_t identity() const { return {compute_t<T>{}, -1}; }
  void combine(acc_t& a, T xin, int64_t idx) const {
    const compute_t<T> x = to<compute_t<T>>(xin);
    if (a.i < 0 || (!isnan_(a.v) && (better(x, a.v) || isnan_(x)))) a = {x, idx};
  }
  void run(acc_t& a, const T* p, int64_t s, int64_t n, int64_t i0) const {
    generic_run(*this, a, p, s, n, i0);
  }
  acc_t merge(const acc_t& a, const acc_t& b) const {
    if (b.i < 0) return a;
    if (a.i < 0) return b;
    if (isnan_(a.v)) return a;
    if (isnan_(b.v)) return b;
    return better(b.v, a.v) ? b : a;
  }
  void write(const acc_t& a, int64_t, out_t* v, int64_t* i) const {
    if constexpr (Values) {
      *v = from<T>(a.v);
      *i = a.i;
    } else {
      *v = a.i;
    }
  }
};

// Variance from sums of (x - K) and (x - K)^2 in float64, K = the first element seen: accurate
// when K is near the data (it is one of the samples) and cheap (no division per element).
template <typename T, bool Std>
struct VarOp {
  using in_t = T;
  struct acc_t {
    int64_t n;
    double k, s, s2;
  };
  using out_t = T;
  double correction = 1;
  acc_t identity() const { return {0, 0, 0, 0}; }
  // The outer path primes every accumulator with its first element; run() sets K itself.
  void prime(acc_t& a, T xin, int64_t) const { a = {1, to<double>(xin), 0, 0}; }
  void combine(acc_t& a, T xin, int64_t) const {
    const double x = to<double>(xin);
    const double d = x - a.k;
    a.s += d;
    a.s2 += d * d;
    ++a.n;
  }
  void run(acc_t& a, const T* p, int64_t s, int64_t n, int64_t i0) const {
    if (n == 0) return;
    if (a.n == 0) a.k = to<double>(p[0]);
    const double k = a.k;
    if constexpr (std::is_same_v<T, float>) {
      if (s == 1) {
        // Blocks of 1024 summed in float vectors (64 terms per lane), block totals in double.
        const float kf = static_cast<float>(k);  // exact: K is one of the samples
        const vf vk = vsplat<vf>(kf);
        constexpr int64_t L = kLanes<float>, kBlk = 1024;
        int64_t i = 0;
        while (i + 4 * L <= n) {
          const int64_t end = std::min(n, i + kBlk);
          vf s1[4] = {}, s2[4] = {};
          for (; i + 4 * L <= end; i += 4 * L) {
            for (int q = 0; q < 4; ++q) {
              const vf d = vload<vf>(p + i + q * L) - vk;
              s1[q] += d;
              s2[q] += d * d;
            }
          }
          const vf t1 = (s1[0] + s1[1]) + (s1[2] + s1[3]);
          const vf t2 = (s2[0] + s2[1]) + (s2[2] + s2[3]);
          for (int64_t q = 0; q < L; ++q) {
            a.s += t1[q];
            a.s2 += t2[q];
          }
        }
        for (; i < n; ++i) {
          const double d = static_cast<double>(p[i]) - k;
          a.s += d;
          a.s2 += d * d;
        }
        a.n += n;
        return;
      }
    }
    constexpr int L = 8;
    double ls[L] = {}, ls2[L] = {};
    int64_t i = 0;
    if (s == 1) {
      for (; i + L <= n; i += L) {
        for (int j = 0; j < L; ++j) {
          const double d = to<double>(p[i + j]) - k;
          ls[j] += d;
          ls2[j] += d * d;
        }
      }
    }
    for (; i < n; ++i) {
      const double d = to<double>(p[i * s]) - k;
      ls[0] += d;
      ls2[0] += d * d;
    }
    for (int j = 0; j < L; ++j) {
      a.s += ls[j];
      a.s2 += ls2[j];
    }
    a.n += n;
  }
  acc_t merge(const acc_t& a, const acc_t& b) const {
    if (b.n == 0) return a;
    if (a.n == 0) return b;
    const double dk = b.k - a.k;
    const double bn = static_cast<double>(b.n);
    return {a.n + b.n, a.k, a.s + b.s + bn * dk, a.s2 + b.s2 + 2 * dk * b.s + bn * dk * dk};
  }
  void write(const acc_t& a, int64_t, out_t* v, int64_t*) const {
    double var = std::numeric_limits<double>::quiet_NaN();
    if (a.n > 0) {
      const double n = static_cast<double>(a.n);
      double m2 = a.s2 - a.s * a.s / n;
      if (m2 < 0) m2 = 0;
      var = m2 / std::max(0.0, n - correction);
    }
    *v = from<T>(Std ? std::sqrt(var) : var);
  }
};

enum class NormKind { L2, L1, Inf, NegInf, Zero, P };

template <typename T, NormKind Kind>
struct NormOp {
  using in_t = T;
  using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;
  using out_t = T;
  double p = 2;
  acc_t identity() const {
    if constexpr (Kind == NormKind::Inf) return 0;
    if constexpr (Kind == NormKind::NegInf) return std::numeric_limits<acc_t>::infinity();
    return 0;
  }
  void combine(acc_t& a, T xin, int64_t) const {
    const acc_t x = to<acc_t>(xin);
    const acc_t ax = std::fabs(x);
    if constexpr (Kind == NormKind::L2) a += x * x;
    if constexpr (Kind == NormKind::L1) a += ax;
    if constexpr (Kind == NormKind::Inf) a = sticky_pick_scalar<true>(a, ax);
    if constexpr (Kind == NormKind::NegInf) a = sticky_pick_scalar<false>(a, ax);
    if constexpr (Kind == NormKind::Zero) a += (x != 0);
    if constexpr (Kind == NormKind::P) a += static_cast<acc_t>(std::pow(ax, static_cast<acc_t>(p)));
  }
  void run(acc_t& a, const T* ptr, int64_t s, int64_t n, int64_t i0) const {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      if (s == 1) {
        if constexpr (Kind == NormKind::L2) {
          a += pairwise_sum(ptr, n, Square{});
          return;
        }
        if constexpr (Kind == NormKind::L1) {
          a += pairwise_sum(ptr, n, Abs{});
          return;
        }
        if constexpr (Kind == NormKind::Inf) {
          a = vec_extreme<true>(a, ptr, n, Abs{});
          return;
        }
        if constexpr (Kind == NormKind::NegInf) {
          a = vec_extreme<false>(a, ptr, n, Abs{});
          return;
        }
      }
    }
    generic_run(*this, a, ptr, s, n, i0);
  }
  acc_t merge(acc_t a, acc_t b) const {
    if constexpr (Kind == NormKind::Inf) return sticky_pick_scalar<true>(a, b);
    if constexpr (Kind == NormKind::NegInf) return sticky_pick_scalar<false>(a, b);
    return a + b;
  }
  void write(acc_t a, int64_t, out_t* v, int64_t*) const {
    if constexpr (Kind == NormKind::L2) {
      *v = from<T>(std::sqrt(a));
    } else if constexpr (Kind == NormKind::P) {
      *v = from<T>(std::pow(a, static_cast<acc_t>(1.0 / p)));
    } else {
      *v = from<T>(a);
    }
  }
};

template <typename T>
struct LseOp {
  using in_t = T;
  using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
  struct acc_t {
    C m, s;
  };
  using out_t = T;
  acc_t identity() const { return {-std::numeric_limits<C>::infinity(), 0}; }
  void combine(acc_t& a, T xin, int64_t) const {
    const C x = to<C>(xin);
    if (x != x) {
      a.m = x;
      return;
    }
    if (x == -std::numeric_limits<C>::infinity()) return;
    if (x > a.m) {
      a.s = a.s * std::exp(a.m - x) + 1;
      a.m = x;
    } else {
      a.s += x == a.m ? C(1) : std::exp(x - a.m);
    }
  }
  void run(acc_t& a, const T* p, int64_t s, int64_t n, int64_t i0) const {
    generic_run(*this, a, p, s, n, i0);
  }
  acc_t merge(const acc_t& a, const acc_t& b) const {
    if (a.m != a.m) return a;
    if (b.m != b.m) return b;
    if (b.s == 0) return a;
    if (a.s == 0) return b;
    if (a.m == b.m) return {a.m, a.s + b.s};
    if (a.m > b.m) return {a.m, a.s + b.s * std::exp(b.m - a.m)};
    return {b.m, b.s + a.s * std::exp(a.m - b.m)};
  }
  void write(const acc_t& a, int64_t, out_t* v, int64_t*) const {
    if (a.m != a.m) {
      *v = from<T>(a.m);
    } else if (a.s == 0) {
      *v = from<T>(-std::numeric_limits<C>::infinity());
    } else {
      *v = from<T>(a.m + std::log(a.s));
    }
  }
};

// ---------------------------------------------------------------------------------------------
// Entry points

void check_out(const TensorImpl& out, const Dims& shape, DType dtype, std::string_view op,
               const char* what = "out") {
  KILN_CHECK(out.sizes() == shape, op, "expected ", what, " of shape ", shape, ", got ",
             out.sizes());
  KILN_CHECK(out.dtype() == dtype, op, "expected ", what, " of dtype ", dtype_name(dtype), ", got ",
             dtype_name(out.dtype()));
}

void check_floating(const TensorImpl& self, std::string_view op) {
  KILN_CHECK(is_floating(self.dtype()), op, "expected a floating point input, got ",
             dtype_name(self.dtype()));
}

int64_t reduced_count(const TensorImpl& self, uint64_t mask) {
  int64_t n = 1;
  for (int64_t d = 0; d < self.dim(); ++d)
    if (mask >> d & 1) n *= self.sizes()[d];
  return n;
}

template <typename Fn>
void reduce_with(const TensorImpl& self, std::span<const int64_t> dims, bool keepdim,
                 TensorImpl& out, DType out_dtype, std::string_view op, bool nonempty, Fn&& fn) {
  const uint64_t mask = dims_mask(dims, self.dim(), op);
  check_out(out, reduce_shape(self.sizes(), dims, keepdim, op), out_dtype, op);
  if (nonempty) {
    KILN_CHECK(reduced_count(self, mask) > 0, op,
               "expected a non-empty reduction (the operation has no identity), got input ",
               describe(self), " reduced over dims ", Dims(dims));
  }
  const Geom g = make_geom(self, mask, keepdim, &out, nullptr);
  fn(g);
}

}  // namespace

Dims reduce_shape(std::span<const int64_t> sizes, std::span<const int64_t> dims, bool keepdim,
                  std::string_view op) {
  const int64_t rank = static_cast<int64_t>(sizes.size());
  const uint64_t mask = dims_mask(dims, rank, op);
  Dims out;
  for (int64_t d = 0; d < rank; ++d) {
    if (mask >> d & 1) {
      if (keepdim) out.push_back(1);
    } else {
      out.push_back(sizes[d]);
    }
  }
  return out;
}

DType sum_result_dtype(DType in) {
  return is_floating(in) ? in : DType::Int64;
}

void sum_out(const TensorImpl& self, std::span<const int64_t> dims, bool keepdim, TensorImpl& out) {
  if (self.device() != Device::CPU || out.device() != Device::CPU) [[unlikely]] {
    return cuda::reduce_out("sum", self, dims, false, out);
  }
  reduce_with(self, dims, keepdim, out, sum_result_dtype(self.dtype()), "sum", false,
              [&](const Geom& g) {
                visit_dtype(self.dtype(), [&](auto tag) {
                  drive(SumOp<decltype(tag), false>{}, self, g, &out, nullptr);
                });
              });
}

void mean_out(const TensorImpl& self, std::span<const int64_t> dims, bool keepdim,
              TensorImpl& out) {
  check_floating(self, "mean");
  if (self.device() != Device::CPU || out.device() != Device::CPU) [[unlikely]] {
    return cuda::reduce_out("mean", self, dims, true, out);
  }
  reduce_with(self, dims, keepdim, out, self.dtype(), "mean", false, [&](const Geom& g) {
    visit_dtype(self.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (is_fp_v<T>) drive(SumOp<T, true>{}, self, g, &out, nullptr);
    });
  });
}

void prod_out(const TensorImpl& self, std::span<const int64_t> dims, bool keepdim,
              TensorImpl& out) {
  reduce_with(
      self, dims, keepdim, out, sum_result_dtype(self.dtype()), "prod", false, [&](const Geom& g) {
        visit_dtype(self.dtype(),
                    [&](auto tag) { drive(ProdOp<decltype(tag)>{}, self, g, &out, nullptr); });
      });
}

namespace {
template <bool Max>
void extreme_out(const TensorImpl& self, std::span<const int64_t> dims, bool keepdim,
                 TensorImpl& out, std::string_view op) {
  reduce_with(self, dims, keepdim, out, self.dtype(), op, true, [&](const Geom& g) {
    visit_dtype(self.dtype(),
                [&](auto tag) { drive(ExtremeOp<decltype(tag), Max>{}, self, g, &out, nullptr); });
  });
}

template <bool Max>
void arg_out(const TensorImpl& self, int64_t dim, bool keepdim, TensorImpl* values,
             TensorImpl& indices, std::string_view op) {
  const int64_t d = wrap_dim(dim, self.dim(), op);
  const Dims one{d};
  const Dims shape = reduce_shape(self.sizes(), one, keepdim, op);
  if (values) check_out(*values, shape, self.dtype(), op, "values");
  check_out(indices, shape, DType::Int64, op, "indices");
  const uint64_t mask = dims_mask(one, self.dim(), op);
  KILN_CHECK(reduced_count(self, mask) > 0, op, "expected reduction dim ", dim,
             " to have non-zero size, got input ", describe(self));
  visit_dtype(self.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (values) {
      const Geom g = make_geom(self, mask, keepdim, values, &indices);
      drive(ArgOp<T, Max, true>{}, self, g, values, &indices);
    } else {
      const Geom g = make_geom(self, mask, keepdim, &indices, nullptr);
      drive(ArgOp<T, Max, false>{}, self, g, &indices, nullptr);
    }
  });
}

template <bool Max>
void arg_all_out(const TensorImpl& self, bool keepdim, TensorImpl& out, std::string_view op) {
  check_out(out, reduce_shape(self.sizes(), {}, keepdim, op), DType::Int64, op);
  KILN_CHECK(self.numel() > 0, op, "expected a non-empty input, got ", describe(self));
  auto c = views::contiguous(self);
  const Dims flat{self.numel()};
  auto f = views::view(*c, flat);
  auto o = from_blob(out.data(), Dims{}, DType::Int64);
  const Geom g = make_geom(*f, 1, false, o.get(), nullptr);
  visit_dtype(self.dtype(), [&](auto tag) {
    drive(ArgOp<decltype(tag), Max, false>{}, *f, g, o.get(), nullptr);
  });
}
}  // namespace

void amax_out(const TensorImpl& self, std::span<const int64_t> dims, bool keepdim,
              TensorImpl& out) {
  extreme_out<true>(self, dims, keepdim, out, "amax");
}
void amin_out(const TensorImpl& self, std::span<const int64_t> dims, bool keepdim,
              TensorImpl& out) {
  extreme_out<false>(self, dims, keepdim, out, "amin");
}
void max_all_out(const TensorImpl& self, TensorImpl& out) {
  KILN_CHECK(out.numel() == 1, "max", "expected out of one element, got ", out.sizes());
  auto o = views::reshape(out, Dims{});
  KILN_CHECK(o->data() == out.data(), "max", "expected a writable out");
  extreme_out<true>(self, {}, false, *o, "max");
}
void min_all_out(const TensorImpl& self, TensorImpl& out) {
  KILN_CHECK(out.numel() == 1, "min", "expected out of one element, got ", out.sizes());
  auto o = views::reshape(out, Dims{});
  extreme_out<false>(self, {}, false, *o, "min");
}
void max_out(const TensorImpl& self, int64_t dim, bool keepdim, TensorImpl& values,
             TensorImpl& indices) {
  arg_out<true>(self, dim, keepdim, &values, indices, "max");
}
void min_out(const TensorImpl& self, int64_t dim, bool keepdim, TensorImpl& values,
             TensorImpl& indices) {
  arg_out<false>(self, dim, keepdim, &values, indices, "min");
}
void argmax_out(const TensorImpl& self, std::optional<int64_t> dim, bool keepdim, TensorImpl& out) {
  if (dim) {
    arg_out<true>(self, *dim, keepdim, nullptr, out, "argmax");
  } else {
    arg_all_out<true>(self, keepdim, out, "argmax");
  }
}
void argmin_out(const TensorImpl& self, std::optional<int64_t> dim, bool keepdim, TensorImpl& out) {
  if (dim) {
    arg_out<false>(self, *dim, keepdim, nullptr, out, "argmin");
  } else {
    arg_all_out<false>(self, keepdim, out, "argmin");
  }
}

namespace {
template <bool Std>
void var_impl(const TensorImpl& self, std::span<const int64_t> dims, double correction,
              bool keepdim, TensorImpl& out, std::string_view op) {
  check_floating(self, op);
  reduce_with(self, dims, keepdim, out, self.dtype(), op, false, [&](const Geom& g) {
    visit_dtype(self.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (is_fp_v<T>) {
        VarOp<T, Std> vop;
        vop.correction = correction;
        drive(vop, self, g, &out, nullptr);
      }
    });
  });
}
}  // namespace

void var_out(const TensorImpl& self, std::span<const int64_t> dims, double correction, bool keepdim,
             TensorImpl& out) {
  var_impl<false>(self, dims, correction, keepdim, out, "var");
}
void std_out(const TensorImpl& self, std::span<const int64_t> dims, double correction, bool keepdim,
             TensorImpl& out) {
  var_impl<true>(self, dims, correction, keepdim, out, "std");
}

void norm_out(const TensorImpl& self, double p, std::span<const int64_t> dims, bool keepdim,
              TensorImpl& out) {
  constexpr std::string_view op = "norm";
  check_floating(self, op);
  KILN_CHECK(p == p, op, "expected p to be a number, got nan");
  const bool inf = std::isinf(p);
  reduce_with(self, dims, keepdim, out, self.dtype(), op, inf, [&](const Geom& g) {
    visit_dtype(self.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (is_fp_v<T>) {
        if (p == 2) {
          drive(NormOp<T, NormKind::L2>{}, self, g, &out, nullptr);
        } else if (p == 1) {
          drive(NormOp<T, NormKind::L1>{}, self, g, &out, nullptr);
        } else if (inf && p > 0) {
          drive(NormOp<T, NormKind::Inf>{}, self, g, &out, nullptr);
        } else if (inf) {
          drive(NormOp<T, NormKind::NegInf>{}, self, g, &out, nullptr);
        } else if (p == 0) {
          drive(NormOp<T, NormKind::Zero>{}, self, g, &out, nullptr);
        } else {
          NormOp<T, NormKind::P> nop;
          nop.p = p;
          drive(nop, self, g, &out, nullptr);
        }
      }
    });
  });
}

void logsumexp_out(const TensorImpl& self, std::span<const int64_t> dims, bool keepdim,
                   TensorImpl& out) {
  check_floating(self, "logsumexp");
  reduce_with(self, dims, keepdim, out, self.dtype(), "logsumexp", false, [&](const Geom& g) {
    visit_dtype(self.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (is_fp_v<T>) drive(LseOp<T>{}, self, g, &out, nullptr);
    });
  });
}

}  // namespace kiln::kernels
