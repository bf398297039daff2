// Reductions against naive float64 references: every op over every dim subset, keepdim, negative
// dims, contiguous / transposed / strided inputs, empty and 0-dim tensors, every claimed dtype.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <numeric>
#include <string>

#include "kiln/runtime/kernels/reduce.h"
#include "kiln/runtime/thread_pool.h"
#include "reduce_test_util.h"

using namespace kiln;
using namespace kiln::testutil;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

struct Ref {
  double v;
  double scale;  // magnitude the tolerance is relative to
};
using RefFn = std::function<Ref(const std::vector<double>&)>;
using Kern = std::function<void(const TensorImpl&, std::span<const int64_t>, bool, TensorImpl&)>;

// Values of `t` grouped by output position (row-major over the keepdim shape), each group in
// row-major order of the reduced dims.
std::vector<std::vector<double>> groups(const TensorImpl& t, uint64_t mask) {
  const int64_t r = t.dim();
  int64_t nout = 1;
  for (int64_t d = 0; d < r; ++d)
    if (!(mask >> d & 1)) nout *= t.sizes()[d];
  std::vector<std::vector<double>> g(static_cast<size_t>(nout));
  for (int64_t i = 0; i < t.numel(); ++i) {
    int64_t rem = i, o = 0, mul = 1;
    for (int64_t d = r - 1; d >= 0; --d) {
      const int64_t s = t.sizes()[d];
      const int64_t id = rem % s;
      rem /= s;
      if (!(mask >> d & 1)) {
        o += id * mul;
        mul *= s;
      }
    }
    g[o].push_back(get(t, i));
  }
  return g;
}

double rtol_for(DType dt) {
  switch (dt) {
    case DType::Float32:
      return 2e-5;
    case DType::Float64:
      return 1e-12;
    case DType::Float16:
      return 2e-3;
    case DType::BFloat16:
      return 1e-2;
    default:
      return 0;
  }
}

std::vector<Dims> small_shapes() {
  return {Dims{},           Dims{1},    Dims{7},    Dims{3, 5},   Dims{4, 1, 6},
          Dims{2, 3, 4, 5}, Dims{0, 3}, Dims{3, 0}, Dims{33, 65}, Dims{65, 33}};
}

std::string case_name(const Dims& shape, DType dt, Layout layout, const Dims& dims, bool keepdim) {
  std::ostringstream os;
  os << "shape " << shape << " " << dtype_name(dt) << " layout " << static_cast<int>(layout)
     << " dims " << dims << " keepdim " << keepdim;
  return os.str();
}

// Runs `k` on one input and compares with `ref` group by group.
void check_one(const std::string& name, const Kern& k, const RefFn& ref, const TensorImpl& x,
               const Dims& dims, bool keepdim, DType out_dt, bool nonempty, double rtol,
               const std::string& what) {
  uint64_t mask = 0;
  const int64_t r = x.dim();
  if (dims.empty()) {
    mask = r ? ((uint64_t{1} << r) - 1) : 0;
  } else {
    for (int64_t d : dims) mask |= r ? uint64_t{1} << (d < 0 ? d + r : d) : 0;
  }
  int64_t count = 1;
  for (int64_t d = 0; d < r; ++d)
    if (mask >> d & 1) count *= x.sizes()[d];
  Dims oshape = kernels::reduce_shape(x.sizes(), dims, keepdim);
  auto out = empty(oshape, out_dt);
  if (nonempty && count == 0) {
    try {
      k(x, dims, keepdim, *out);
      ADD_FAILURE() << name << ": expected an error for an empty reduction, " << what;
    } catch (const Error& e) {
      EXPECT_EQ(e.op(), name) << what;
    }
    return;
  }
  k(x, dims, keepdim, *out);
  auto g = groups(x, mask);
  ASSERT_EQ(static_cast<int64_t>(g.size()), out->numel()) << what;
  for (int64_t o = 0; o < out->numel(); ++o) {
    Ref want = ref(g[o]);
    // Beyond float16's range the rounded result is inf, as in PyTorch.
    if (out_dt == DType::Float16 && std::fabs(want.v) >= 65520) want.v = want.v > 0 ? kInf : -kInf;
    const double got = get(*out, o);
    const double tol = rtol * want.scale;
    if (std::isnan(want.v) || std::isinf(want.v)) {
      ASSERT_TRUE(close(got, want.v, 0, 0))
          << name << " " << what << " at " << o << ": got " << got << ", want " << want.v;
    } else {
      ASSERT_NEAR(got, want.v, tol) << name << " " << what << " at " << o;
    }
  }
}

// Every small shape x layout x dim subset x keepdim.
void check_reduction(const std::string& name, const Kern& k, const RefFn& ref, DType dt,
                     DType out_dt, bool nonempty, double lo = -2, double hi = 2) {
  std::mt19937 rng(1234);
  for (const Dims& shape : small_shapes()) {
    const int64_t r = static_cast<int64_t>(shape.size());
    for (Layout layout : {Layout::Contiguous, Layout::Transposed, Layout::Strided}) {
      auto x = make_tensor(shape, dt, layout, rng, lo, hi);
      std::vector<Dims> dim_lists{Dims{}};
      if (r == 0) {
        dim_lists.push_back(Dims{0});
        dim_lists.push_back(Dims{-1});
      }
      for (uint64_t m = 1; m < (uint64_t{1} << r); ++m) {
        Dims l;
        for (int64_t d = 0; d < r; ++d)
          if (m >> d & 1) l.push_back((rng() & 1) ? d : d - r);
        if (l.size() > 1 && (rng() & 1)) std::reverse(l.begin(), l.end());
        dim_lists.push_back(l);
      }
      for (const Dims& dims : dim_lists) {
        for (bool keepdim : {false, true}) {
          check_one(name, k, ref, *x, dims, keepdim, out_dt, nonempty, rtol_for(out_dt),
                    case_name(shape, dt, layout, dims, keepdim));
        }
      }
    }
  }
}

// Large shapes that take the vectorized, outer, split paths.
void check_large(const std::string& name, const Kern& k, const RefFn& ref, DType dt, DType out_dt,
                 double lo = -2, double hi = 2) {
  std::mt19937 rng(99);
  struct Case {
    Dims shape;
    Dims dims;
    Layout layout;
  };
  const std::vector<Case> cases = {
      {Dims{300000}, Dims{}, Layout::Contiguous},      // split, vectorized runs
      {Dims{3, 100000}, Dims{1}, Layout::Contiguous},  // split, few outputs
      {Dims{2000, 200}, Dims{0}, Layout::Contiguous},  // outer path, rows split
      {Dims{64, 3000}, Dims{0}, Layout::Contiguous},   // outer path, many tiles
      {Dims{64, 3000}, Dims{1}, Layout::Transposed},   // strided runs
      {Dims{50, 7, 300}, Dims{0, 2}, Layout::Contiguous},
      {Dims{50, 7, 300}, Dims{0, 1}, Layout::Strided},
      {Dims{5000, 9}, Dims{0}, Layout::Contiguous},
  };
  for (const Case& c : cases) {
    auto x = make_tensor(c.shape, dt, c.layout, rng, lo, hi);
    for (bool keepdim : {false, true}) {
      check_one(name, k, ref, *x, c.dims, keepdim, out_dt, false, rtol_for(out_dt),
                case_name(c.shape, dt, c.layout, c.dims, keepdim));
    }
  }
}

const std::vector<DType> kAll = {DType::Float32,  DType::Float64, DType::Float16,
                                 DType::BFloat16, DType::Int8,    DType::UInt8,
                                 DType::Int32,    DType::Int64,   DType::Bool};
const std::vector<DType> kFloats = {DType::Float32, DType::Float64, DType::Float16,
                                    DType::BFloat16};

Ref ref_sum(const std::vector<double>& v) {
  double s = 0, a = 0;
  for (double x : v) s += x, a += std::fabs(x);
  return {s, a};
}
Ref ref_mean(const std::vector<double>& v) {
  Ref r = ref_sum(v);
  const double n = static_cast<double>(v.size());
  return {v.empty() ? kNaN : r.v / n, r.scale / n};
}
Ref ref_prod(const std::vector<double>& v) {
  double p = 1;
  for (double x : v) p *= x;
  return {p, std::fabs(p)};
}
template <bool Max>
Ref ref_extreme(const std::vector<double>& v) {
  double m = Max ? -kInf : kInf;
  for (double x : v) {
    if (std::isnan(x)) return {kNaN, 0};
    m = Max ? std::max(m, x) : std::min(m, x);
  }
  return {m, 0};
}
Ref ref_var(const std::vector<double>& v, double corr, bool take_sqrt) {
  if (v.empty()) return {kNaN, 0};
  double mean = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  double m2 = 0;
  for (double x : v) m2 += (x - mean) * (x - mean);
  double var = m2 / std::max(0.0, static_cast<double>(v.size()) - corr);
  if (take_sqrt) var = std::sqrt(var);
  return {var, std::fabs(var) + 1e-300};
}
Ref ref_norm(const std::vector<double>& v, double p) {
  double r = 0;
  if (std::isinf(p)) {
    r = p > 0 ? 0 : kInf;
    for (double x : v) r = p > 0 ? std::max(r, std::fabs(x)) : std::min(r, std::fabs(x));
  } else if (p == 0) {
    for (double x : v) r += x != 0;
  } else {
    for (double x : v) r += std::pow(std::fabs(x), p);
    r = std::pow(r, 1 / p);
  }
  return {r, std::fabs(r)};
}
Ref ref_lse(const std::vector<double>& v) {
  double m = -kInf;
  for (double x : v) m = std::max(m, x);
  if (std::isinf(m)) return {m, 0};
  double s = 0;
  for (double x : v) s += std::exp(x - m);
  const double r = m + std::log(s);
  return {r, std::max(1.0, std::fabs(r))};
}

}  // namespace

TEST(Reduce, ReduceShape) {
  EXPECT_EQ(kernels::reduce_shape(Dims{2, 3, 4}, Dims{1}, false), (Dims{2, 4}));
  EXPECT_EQ(kernels::reduce_shape(Dims{2, 3, 4}, Dims{-1, 0}, true), (Dims{1, 3, 1}));
  EXPECT_EQ(kernels::reduce_shape(Dims{2, 3, 4}, Dims{}, false), (Dims{}));
  EXPECT_EQ(kernels::reduce_shape(Dims{2, 3, 4}, Dims{}, true), (Dims{1, 1, 1}));
  EXPECT_EQ(kernels::reduce_shape(Dims{}, Dims{0}, true), (Dims{}));
  EXPECT_THROW(kernels::reduce_shape(Dims{2, 3}, Dims{2}, false), Error);
  EXPECT_THROW(kernels::reduce_shape(Dims{2, 3}, Dims{1, -1}, false), Error);
}

TEST(Reduce, SumAllDtypes) {
  for (DType dt : kAll) {
    check_reduction("sum", kernels::sum_out, ref_sum, dt, kernels::sum_result_dtype(dt), false);
  }
  check_large("sum", kernels::sum_out, ref_sum, DType::Float32, DType::Float32);
  check_large("sum", kernels::sum_out, ref_sum, DType::Float64, DType::Float64);
  check_large("sum", kernels::sum_out, ref_sum, DType::Int32, DType::Int64);
}

TEST(Reduce, MeanFloats) {
  for (DType dt : kFloats) check_reduction("mean", kernels::mean_out, ref_mean, dt, dt, false);
  check_large("mean", kernels::mean_out, ref_mean, DType::Float32, DType::Float32);
}

TEST(Reduce, Prod) {
  for (DType dt : kFloats) {
    check_reduction("prod", kernels::prod_out, ref_prod, dt, dt, false, 0.95, 1.05);
  }
  for (DType dt : {DType::Int8, DType::Int32, DType::Int64, DType::Bool}) {
    check_reduction("prod", kernels::prod_out, ref_prod, dt, DType::Int64, false, -1, 1);
  }
}

TEST(Reduce, AmaxAmin) {
  for (DType dt : kAll) {
    check_reduction("amax", kernels::amax_out, ref_extreme<true>, dt, dt, true);
    check_reduction("amin", kernels::amin_out, ref_extreme<false>, dt, dt, true);
  }
  check_large("amax", kernels::amax_out, ref_extreme<true>, DType::Float32, DType::Float32);
  check_large("amin", kernels::amin_out, ref_extreme<false>, DType::Float64, DType::Float64);
}

TEST(Reduce, VarStd) {
  for (double corr : {0.0, 1.0, 2.0}) {
    for (DType dt : kFloats) {
      auto var = [corr](const TensorImpl& a, std::span<const int64_t> d, bool k, TensorImpl& o) {
        kernels::var_out(a, d, corr, k, o);
      };
      auto sd = [corr](const TensorImpl& a, std::span<const int64_t> d, bool k, TensorImpl& o) {
        kernels::std_out(a, d, corr, k, o);
      };
      check_reduction(
          "var", var, [corr](auto& v) { return ref_var(v, corr, false); }, dt, dt, false);
      check_reduction(
          "std", sd, [corr](auto& v) { return ref_var(v, corr, true); }, dt, dt, false);
    }
  }
  auto var1 = [](const TensorImpl& a, std::span<const int64_t> d, bool k, TensorImpl& o) {
    kernels::var_out(a, d, 1, k, o);
  };
  // Data far from zero: the shifted sums must not lose the variance.
  check_large(
      "var", var1, [](auto& v) { return ref_var(v, 1, false); }, DType::Float32, DType::Float32,
      1000, 1001);
  check_large(
      "var", var1, [](auto& v) { return ref_var(v, 1, false); }, DType::Float64, DType::Float64);
}

TEST(Reduce, Norms) {
  for (double p : {2.0, 1.0, kInf, -kInf, 0.0, 3.0, 0.5}) {
    auto k = [p](const TensorImpl& a, std::span<const int64_t> d, bool kd, TensorImpl& o) {
      kernels::norm_out(a, p, d, kd, o);
    };
    auto r = [p](const std::vector<double>& v) { return ref_norm(v, p); };
    const bool common = p == 2 || p == 1 || std::isinf(p);
    for (DType dt : kFloats) {
      if (common || dt == DType::Float32 || dt == DType::Float64) {
        check_reduction("norm", k, r, dt, dt, std::isinf(p));
      }
    }
    if (common) check_large("norm", k, r, DType::Float32, DType::Float32);
  }
}

TEST(Reduce, Logsumexp) {
  for (DType dt : kFloats) {
    check_reduction("logsumexp", kernels::logsumexp_out, ref_lse, dt, dt, false, -30, 30);
  }
  check_large("logsumexp", kernels::logsumexp_out, ref_lse, DType::Float32, DType::Float32, -50,
              50);
  // -inf everywhere, +inf, NaN.
  for (auto [vals, want] : std::vector<std::pair<std::vector<double>, double>>{
           {{-kInf, -kInf}, -kInf},
           {{kInf, 1.0}, kInf},
           {{1.0, kNaN, 2.0}, kNaN},
           {{-kInf, 0.0}, 0.0},
           {{1000.0, 1000.0}, 1000.0 + std::log(2.0)}}) {
    auto x = empty(Dims{static_cast<int64_t>(vals.size())}, DType::Float32);
    for (size_t i = 0; i < vals.size(); ++i) set(*x, i, vals[i]);
    auto out = empty(Dims{}, DType::Float32);
    kernels::logsumexp_out(*x, Dims{}, false, *out);
    EXPECT_TRUE(close(get(*out, 0), want, 1e-4, 1e-6)) << get(*out, 0) << " vs " << want;
  }
}

TEST(Reduce, MaxMinWithIndicesTiesFirst) {
  std::mt19937 rng(7);
  for (DType dt : kAll) {
    for (const Dims& shape : small_shapes()) {
      const int64_t r = static_cast<int64_t>(shape.size());
      for (Layout layout : {Layout::Contiguous, Layout::Transposed, Layout::Strided}) {
        // Integer-valued data in a small range: plenty of ties.
        auto x = make_tensor(shape, dt, layout, rng, -2, 2);
        for (int64_t d = -std::max<int64_t>(r, 1); d < std::max<int64_t>(r, 1); ++d) {
          for (bool keepdim : {false, true}) {
            const Dims dims{d};
            const int64_t wd = r == 0 ? 0 : (d < 0 ? d + r : d);
            const int64_t len = r == 0 ? 1 : shape[wd];
            const Dims oshape = kernels::reduce_shape(shape, dims, keepdim);
            auto v = empty(oshape, dt);
            auto i = empty(oshape, DType::Int64);
            auto ai = empty(oshape, DType::Int64);
            if (len == 0) {
              EXPECT_THROW(kernels::max_out(*x, d, keepdim, *v, *i), Error);
              EXPECT_THROW(kernels::argmin_out(*x, d, keepdim, *ai), Error);
              continue;
            }
            const uint64_t mask = r == 0 ? 0 : uint64_t{1} << wd;
            auto g = groups(*x, mask);
            for (bool is_max : {true, false}) {
              if (is_max) {
                kernels::max_out(*x, d, keepdim, *v, *i);
                kernels::argmax_out(*x, d, keepdim, *ai);
              } else {
                kernels::min_out(*x, d, keepdim, *v, *i);
                kernels::argmin_out(*x, d, keepdim, *ai);
              }
              for (int64_t o = 0; o < v->numel(); ++o) {
                int64_t best = 0;
                for (int64_t k = 1; k < len; ++k) {
                  if (is_max ? g[o][k] > g[o][best] : g[o][k] < g[o][best]) best = k;
                }
                const std::string what = case_name(shape, dt, layout, dims, keepdim);
                ASSERT_EQ(get(*v, o), g[o][best]) << what;
                ASSERT_EQ(get(*i, o), best) << what;
                ASSERT_EQ(get(*ai, o), best) << what;
              }
            }
          }
        }
      }
    }
  }
}

TEST(Reduce, ArgmaxFlattenedAndMaxAll) {
  std::mt19937 rng(3);
  for (DType dt : {DType::Float32, DType::Int32, DType::BFloat16}) {
    for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
      auto x = make_tensor(Dims{6, 7, 5}, dt, layout, rng, -3, 3);
      const auto vals = values(*x);
      const int64_t amax = std::max_element(vals.begin(), vals.end()) - vals.begin();
      const int64_t amin = std::min_element(vals.begin(), vals.end()) - vals.begin();
      auto o = empty(Dims{}, DType::Int64);
      kernels::argmax_out(*x, std::nullopt, false, *o);
      EXPECT_EQ(get(*o, 0), amax);
      auto ok = empty(Dims{1, 1, 1}, DType::Int64);
      kernels::argmin_out(*x, std::nullopt, true, *ok);
      EXPECT_EQ(get(*ok, 0), amin);
      auto m = empty(Dims{}, dt);
      kernels::max_all_out(*x, *m);
      EXPECT_EQ(get(*m, 0), vals[amax]);
      kernels::min_all_out(*x, *m);
      EXPECT_EQ(get(*m, 0), vals[amin]);
    }
  }
  auto e = empty(Dims{0, 4}, DType::Float32);
  auto m = empty(Dims{}, DType::Float32);
  try {
    kernels::max_all_out(*e, *m);
    ADD_FAILURE() << "max of an empty tensor must fail";
  } catch (const Error& err) {
    EXPECT_EQ(err.op(), "max");
    EXPECT_NE(std::string(err.what()).find("non-empty"), std::string::npos) << err.what();
  }
  auto o = empty(Dims{}, DType::Int64);
  EXPECT_THROW(kernels::argmax_out(*e, std::nullopt, false, *o), Error);
}

TEST(Reduce, NaNPropagates) {
  for (DType dt : kFloats) {
    for (int64_t n : {5, 100, 1000}) {
      for (int64_t pos : {int64_t{0}, n / 2, n - 1}) {
        auto x = empty(Dims{2, n}, dt);
        std::mt19937 rng(static_cast<unsigned>(n + pos));
        fill_random(*x, rng);
        set(*x, pos, kNaN);      // row 0
        set(*x, n + pos, kNaN);  // row 1: two NaNs, the first one wins
        if (pos + 1 < n) set(*x, n + n - 1, kNaN);
        auto v = empty(Dims{2}, dt);
        auto i = empty(Dims{2}, DType::Int64);
        kernels::amax_out(*x, Dims{1}, false, *v);
        EXPECT_TRUE(std::isnan(get(*v, 0)) && std::isnan(get(*v, 1)));
        kernels::amin_out(*x, Dims{1}, false, *v);
        EXPECT_TRUE(std::isnan(get(*v, 0)) && std::isnan(get(*v, 1)));
        kernels::max_out(*x, 1, false, *v, *i);
        EXPECT_TRUE(std::isnan(get(*v, 0)));
        EXPECT_EQ(get(*i, 0), pos);
        EXPECT_EQ(get(*i, 1), pos);
        kernels::argmin_out(*x, 1, false, *i);
        EXPECT_EQ(get(*i, 0), pos);
        auto s = empty(Dims{}, dt);
        kernels::max_all_out(*x, *s);
        EXPECT_TRUE(std::isnan(get(*s, 0)));
        auto t = empty(Dims{n}, dt);
        kernels::amax_out(*x, Dims{0}, false, *t);  // outer path
        EXPECT_TRUE(std::isnan(get(*t, pos)));
        kernels::norm_out(*x, kInf, Dims{1}, false, *v);
        EXPECT_TRUE(std::isnan(get(*v, 0)));
        kernels::sum_out(*x, Dims{}, false, *s);
        EXPECT_TRUE(std::isnan(get(*s, 0)));
      }
    }
  }
}

TEST(Reduce, EmptyAndZeroDim) {
  auto e = empty(Dims{0, 3}, DType::Float32);
  auto s = empty(Dims{}, DType::Float32);
  kernels::sum_out(*e, Dims{}, false, *s);
  EXPECT_EQ(get(*s, 0), 0.0);
  auto s3 = empty(Dims{3}, DType::Float32);
  kernels::sum_out(*e, Dims{0}, false, *s3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(get(*s3, i), 0.0);
  kernels::prod_out(*e, Dims{0}, false, *s3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(get(*s3, i), 1.0);
  kernels::mean_out(*e, Dims{0}, false, *s3);
  EXPECT_TRUE(std::isnan(get(*s3, 0)));
  auto s0 = empty(Dims{0}, DType::Float32);
  kernels::amax_out(*e, Dims{1}, false, *s0);  // empty output: nothing to do, reduction non-empty
  EXPECT_THROW(kernels::amax_out(*e, Dims{0}, false, *s3), Error);

  auto z = empty(Dims{}, DType::Float64);
  set(*z, 0, 2.5);
  auto oz = empty(Dims{}, DType::Float64);
  kernels::sum_out(*z, Dims{}, false, *oz);
  EXPECT_EQ(get(*oz, 0), 2.5);
  kernels::amax_out(*z, Dims{0}, true, *oz);
  EXPECT_EQ(get(*oz, 0), 2.5);
  auto oi = empty(Dims{}, DType::Int64);
  kernels::argmax_out(*z, 0, false, *oi);
  EXPECT_EQ(get(*oi, 0), 0);
  kernels::var_out(*z, Dims{}, 1, false, *oz);
  EXPECT_TRUE(std::isnan(get(*oz, 0)));
  kernels::var_out(*z, Dims{}, 0, false, *oz);
  EXPECT_EQ(get(*oz, 0), 0.0);
}

TEST(Reduce, IntegerSumsWidenToInt64) {
  auto x = empty(Dims{1000}, DType::Int32);
  for (int i = 0; i < 1000; ++i) x->data_ptr<int32_t>()[i] = 2000000000;
  auto o = empty(Dims{}, DType::Int64);
  kernels::sum_out(*x, Dims{}, false, *o);
  EXPECT_EQ(o->data_ptr<int64_t>()[0], int64_t{2000000000} * 1000);
  auto b = empty(Dims{70}, DType::Bool);
  for (int i = 0; i < 70; ++i) b->data_ptr<bool>()[i] = i % 3 == 0;
  kernels::sum_out(*b, Dims{}, false, *o);
  EXPECT_EQ(o->data_ptr<int64_t>()[0], 24);
}

TEST(Reduce, LongSumIsAccurate) {
  // 4M values of 0.1f plus one large value: a naive float loop is off by percents.
  const int64_t n = 1 << 22;
  auto x = empty(Dims{n}, DType::Float32);
  for (int64_t i = 0; i < n; ++i) x->data_ptr<float>()[i] = 0.1f;
  double want = static_cast<double>(0.1f) * n;
  auto o = empty(Dims{}, DType::Float32);
  kernels::sum_out(*x, Dims{}, false, *o);
  EXPECT_NEAR(get(*o, 0), want, want * 1e-6);
  auto t = views::view(*x, Dims{n / 8, 8});
  auto o8 = empty(Dims{8}, DType::Float32);
  kernels::sum_out(*t, Dims{0}, false, *o8);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(get(*o8, i), want / 8, want / 8 * 1e-5);
}

TEST(Reduce, SameResultOnOneAndTwoThreads) {
  std::mt19937 rng(5);
  const int saved = num_threads();
  struct Case {
    Dims shape, dims;
  };
  for (const Case& c : {Case{Dims{1 << 20}, Dims{}}, Case{Dims{3000, 300}, Dims{0}},
                        Case{Dims{4, 300000}, Dims{1}}, Case{Dims{300, 3000}, Dims{1}}}) {
    auto x = make_tensor(c.shape, DType::Float32, Layout::Contiguous, rng);
    const Dims os = kernels::reduce_shape(c.shape, c.dims, false);
    auto a = empty(os, DType::Float32), b = empty(os, DType::Float32);
    auto va = empty(os, DType::Float32), vb = empty(os, DType::Float32);
    set_num_threads(1);
    kernels::sum_out(*x, c.dims, false, *a);
    kernels::var_out(*x, c.dims, 1, false, *va);
    set_num_threads(2);
    kernels::sum_out(*x, c.dims, false, *b);
    kernels::var_out(*x, c.dims, 1, false, *vb);
    for (int64_t i = 0; i < a->numel(); ++i) {
      ASSERT_EQ(get(*a, i), get(*b, i));
      ASSERT_EQ(get(*va, i), get(*vb, i));
    }
  }
  set_num_threads(saved);
}

TEST(Reduce, ErrorsNameTheOp) {
  auto x = empty(Dims{2, 3}, DType::Float32);
  auto bad = empty(Dims{3}, DType::Float32);
  auto expect_op = [](const std::function<void()>& f, const std::string& op) {
    try {
      f();
      ADD_FAILURE() << op << ": expected an error";
    } catch (const Error& e) {
      EXPECT_EQ(e.op(), op) << e.what();
    }
  };
  expect_op([&] { kernels::sum_out(*x, Dims{1}, false, *bad); }, "sum");
  auto good = empty(Dims{2}, DType::Float64);
  expect_op([&] { kernels::sum_out(*x, Dims{1}, false, *good); }, "sum");  // wrong dtype
  expect_op([&] { kernels::amax_out(*x, Dims{1, 1}, false, *good); }, "amax");
  expect_op([&] { kernels::prod_out(*x, Dims{2}, false, *good); }, "prod");
  auto xi = empty(Dims{2, 3}, DType::Int32);
  auto oi = empty(Dims{2}, DType::Int32);
  expect_op([&] { kernels::mean_out(*xi, Dims{1}, false, *oi); }, "mean");
  expect_op([&] { kernels::var_out(*xi, Dims{1}, 1, false, *oi); }, "var");
  auto v = empty(Dims{2}, DType::Float32);
  auto i32 = empty(Dims{2}, DType::Int32);
  expect_op([&] { kernels::max_out(*x, 1, false, *v, *i32); }, "max");
  expect_op([&] { kernels::argmin_out(*x, 5, false, *i32); }, "argmin");
}

// ---------------------------------------------------------------------------------------------
// softmax family and scans

namespace {

// Calls fn(indices of one line along dim) for every line, as row-major linear indices.
template <typename Fn>
void for_each_line(const Dims& shape, int64_t dim, Fn&& fn) {
  const int64_t r = static_cast<int64_t>(shape.size());
  int64_t outer = 1, len = 1, inner = 1;
  for (int64_t i = 0; i < r; ++i) {
    if (i < dim) outer *= shape[i];
    if (i == dim) len = shape[i];
    if (i > dim) inner *= shape[i];
  }
  std::vector<int64_t> idx(static_cast<size_t>(len));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      for (int64_t k = 0; k < len; ++k) idx[k] = (o * len + k) * inner + j;
      fn(idx);
    }
}

struct SoftmaxCase {
  Dims shape;
  int64_t dim;
};
std::vector<SoftmaxCase> softmax_cases() {
  return {{Dims{}, 0},        {Dims{5}, 0},          {Dims{5}, -1},      {Dims{3, 7}, 1},
          {Dims{3, 7}, 0},    {Dims{4, 5, 6}, 0},    {Dims{4, 5, 6}, 1}, {Dims{4, 5, 6}, -1},
          {Dims{2, 1000}, 1}, {Dims{3, 40, 300}, 1}, {Dims{0, 4}, 1},    {Dims{1, 33}, -1},
          {Dims{70, 3}, -1},  {Dims{3, 50}, 1},      {Dims{2, 63}, 1}};
}

}  // namespace

TEST(Reduce, SoftmaxAndLogSoftmax) {
  std::mt19937 rng(11);
  for (DType dt : kFloats) {
    const double rtol = dt == DType::Float64 ? 1e-12 : rtol_for(dt) + 1e-6;
    for (const auto& c : softmax_cases()) {
      for (Layout layout : {Layout::Contiguous, Layout::Transposed, Layout::Strided}) {
        auto x = make_tensor(c.shape, dt, layout, rng, -10, 10);
        const int64_t r = static_cast<int64_t>(c.shape.size());
        const int64_t d = r == 0 ? 0 : (c.dim < 0 ? c.dim + r : c.dim);
        // One line with large values (stability) and one with a -inf.
        if (x->numel() > 2) {
          for_each_line(c.shape, d, [&](const std::vector<int64_t>& line) {
            if (line[0] == 0) {
              for (int64_t i : line) set(*x, i, get(*x, i) + 1000);
              if (line.size() > 1) set(*x, line[1], -kInf);
            }
          });
        }
        for (bool log : {false, true}) {
          // A non-contiguous out for the strided layout.
          auto out = layout == Layout::Strided ? make_tensor(c.shape, dt, Layout::Transposed, rng)
                                               : empty(c.shape, dt);
          if (log) {
            kernels::log_softmax_out(*x, c.dim, *out);
          } else {
            kernels::softmax_out(*x, c.dim, *out);
          }
          for_each_line(c.shape, d, [&](const std::vector<int64_t>& line) {
            double m = -kInf;
            for (int64_t i : line) m = std::max(m, get(*x, i));
            double s = 0;
            for (int64_t i : line) s += std::exp(get(*x, i) - m);
            for (int64_t i : line) {
              const double want = log ? get(*x, i) - m - std::log(s) : std::exp(get(*x, i) - m) / s;
              const double tol = log ? rtol * std::max(1.0, std::fabs(want)) * 4 : rtol + 1e-7;
              ASSERT_TRUE(close(get(*out, i), want, tol, 0))
                  << (log ? "log_softmax " : "softmax ")
                  << case_name(c.shape, dt, layout, Dims{c.dim}, false) << " at " << i << ": got "
                  << get(*out, i) << " want " << want;
            }
          });
        }
      }
    }
  }
}

TEST(Reduce, SoftmaxInPlaceAndErrors) {
  std::mt19937 rng(2);
  auto x = make_tensor(Dims{6, 50}, DType::Float32, Layout::Contiguous, rng);
  auto ref = empty(Dims{6, 50}, DType::Float32);
  kernels::softmax_out(*x, 1, *ref);
  kernels::softmax_out(*x, 1, *x);
  for (int64_t i = 0; i < x->numel(); ++i) ASSERT_EQ(get(*x, i), get(*ref, i));
  auto xi = empty(Dims{2, 3}, DType::Int32);
  try {
    kernels::softmax_out(*xi, 1, *xi);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "softmax");
  }
  auto bad = empty(Dims{6, 5}, DType::Float32);
  EXPECT_THROW(kernels::log_softmax_out(*x, 1, *bad), Error);
  EXPECT_THROW(kernels::softmax_out(*x, 2, *ref), Error);
  // NaN in a row makes that row NaN only.
  set(*x, 3, kNaN);
  kernels::softmax_out(*x, 1, *ref);
  EXPECT_TRUE(std::isnan(get(*ref, 0)));
  EXPECT_FALSE(std::isnan(get(*ref, 50)));
}

TEST(Reduce, SoftmaxBackward) {
  std::mt19937 rng(12);
  for (DType dt : kFloats) {
    const double tol = dt == DType::Float64 ? 1e-12 : (dt == DType::Float32 ? 1e-5 : 3e-2);
    for (const auto& c : softmax_cases()) {
      const int64_t r = static_cast<int64_t>(c.shape.size());
      const int64_t d = r == 0 ? 0 : (c.dim < 0 ? c.dim + r : c.dim);
      for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
        auto x = make_tensor(c.shape, dt, layout, rng, -3, 3);
        auto g = make_tensor(c.shape, dt, Layout::Strided, rng, -1, 1);
        for (bool log : {false, true}) {
          auto y = empty(c.shape, dt);
          if (log) {
            kernels::log_softmax_out(*x, c.dim, *y);
          } else {
            kernels::softmax_out(*x, c.dim, *y);
          }
          auto gi = empty(c.shape, dt);
          if (log) {
            kernels::log_softmax_backward_out(*g, *y, c.dim, *gi);
          } else {
            kernels::softmax_backward_out(*g, *y, c.dim, *gi);
          }
          for_each_line(c.shape, d, [&](const std::vector<int64_t>& line) {
            double dot = 0, sg = 0;
            for (int64_t i : line) dot += get(*g, i) * get(*y, i), sg += get(*g, i);
            for (int64_t i : line) {
              const double want =
                  log ? get(*g, i) - std::exp(get(*y, i)) * sg : get(*y, i) * (get(*g, i) - dot);
              ASSERT_NEAR(get(*gi, i), want, tol * (1 + std::fabs(sg)))
                  << (log ? "log_softmax_backward " : "softmax_backward ")
                  << case_name(c.shape, dt, layout, Dims{c.dim}, false);
            }
          });
        }
      }
    }
  }
  auto a = empty(Dims{2, 3}, DType::Float32), b = empty(Dims{3, 2}, DType::Float32);
  try {
    kernels::softmax_backward_out(*a, *b, 1, *a);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "softmax_backward");
  }
}

TEST(Reduce, CumsumCumprod) {
  std::mt19937 rng(13);
  for (DType dt : kAll) {
    const DType odt = kernels::sum_result_dtype(dt);
    for (const auto& c : softmax_cases()) {
      const int64_t r = static_cast<int64_t>(c.shape.size());
      const int64_t d = r == 0 ? 0 : (c.dim < 0 ? c.dim + r : c.dim);
      for (Layout layout : {Layout::Contiguous, Layout::Strided}) {
        for (bool prod : {false, true}) {
          auto x = prod ? make_tensor(c.shape, dt, layout, rng, is_floating(dt) ? 0.9 : -1,
                                      is_floating(dt) ? 1.1 : 1)
                        : make_tensor(c.shape, dt, layout, rng);
          auto out = layout == Layout::Strided ? make_tensor(c.shape, odt, Layout::Transposed, rng)
                                               : empty(c.shape, odt);
          if (prod) {
            kernels::cumprod_out(*x, c.dim, *out);
          } else {
            kernels::cumsum_out(*x, c.dim, *out);
          }
          for_each_line(c.shape, d, [&](const std::vector<int64_t>& line) {
            double acc = prod ? 1 : 0, mag = 0;
            for (int64_t i : line) {
              acc = prod ? acc * get(*x, i) : acc + get(*x, i);
              mag = prod ? std::fabs(acc) : mag + std::fabs(get(*x, i));
              ASSERT_NEAR(get(*out, i), acc, rtol_for(odt) * mag + 1e-300)
                  << (prod ? "cumprod " : "cumsum ")
                  << case_name(c.shape, dt, layout, Dims{c.dim}, false);
            }
          });
        }
      }
    }
  }
  auto x = empty(Dims{2, 3}, DType::Int32);
  auto o = empty(Dims{2, 3}, DType::Int32);
  try {
    kernels::cumsum_out(*x, 1, *o);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "cumsum");
  }
}

TEST(Reduce, SoftmaxPortableAndAvx512PathsAgree) {
  std::mt19937 rng(21);
  for (const Dims& shape : {Dims{7, 1000}, Dims{3, 37}, Dims{2, 5}}) {
    auto x = make_tensor(shape, DType::Float32, Layout::Contiguous, rng, -20, 20);
    for (bool log : {false, true}) {
      auto a = empty(shape, DType::Float32), b = empty(shape, DType::Float32);
      auto run = [&](TensorImpl& out) {
        if (log) {
          kernels::log_softmax_out(*x, -1, out);
        } else {
          kernels::softmax_out(*x, -1, out);
        }
      };
      run(*a);
      setenv("KILN_DISABLE_AVX512", "1", 1);
      run(*b);
      unsetenv("KILN_DISABLE_AVX512");
      for (int64_t i = 0; i < a->numel(); ++i) {
        ASSERT_NEAR(get(*a, i), get(*b, i), 1e-6 * std::max(1.0, std::fabs(get(*a, i))));
      }
    }
  }
}
