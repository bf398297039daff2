// Elementwise kernels (kernels/elementwise.h) against naive float64 references written here:
// every op on random inputs, contiguous / transposed / stepped / broadcast / 0-dim / empty, every
// dtype, in-place and aliasing, promotion, multithreaded vs single-threaded, NaN, errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../../runtime/src/kernels/elementwise_vec.h"  // both ISA tables, for the ulp tests
#include "kiln/runtime/kernels/copy.h"
#include "kiln/runtime/kernels/elementwise.h"
#include "kiln/runtime/tensor.h"
#include "kiln/runtime/thread_pool.h"
#include "kiln/runtime/views.h"

using namespace kiln;
using namespace kiln::kernels;

namespace {

const DType kAllDTypes[] = {DType::Float32,  DType::Float64, DType::Float16,
                            DType::BFloat16, DType::Int8,    DType::UInt8,
                            DType::Int32,    DType::Int64,   DType::Bool};
const DType kFloatDTypes[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};

// ---- generic element access (independent of the kernels) ------------------------------------

double read_at(const TensorImpl& t, int64_t off) {
  double v = 0;
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T x = static_cast<const T*>(t.data())[off];
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      v = static_cast<float>(x);
    } else {
      v = static_cast<double>(x);
    }
  });
  return v;
}

void write_at(TensorImpl& t, int64_t off, double v) {
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(t.data()) + off;
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      *p = T(static_cast<float>(v));
    } else if constexpr (std::is_same_v<T, bool>) {
      *p = v != 0;
    } else if constexpr (std::is_integral_v<T>) {
      // Through int64: a negative value wraps into uint8 as in the kernels (and PyTorch). A
      // direct double -> uint8 conversion of a negative value is undefined: x86 happens to wrap,
      // arm64 saturates to 0.
      *p = static_cast<T>(static_cast<int64_t>(v));
    } else {
      *p = static_cast<T>(v);
    }
  });
}

int64_t offset_of(const TensorImpl& t, const Dims& idx) {
  int64_t off = 0;
  for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.strides()[d];
  return off;
}

// Calls fn(idx) for every index of `shape` in row-major order.
void for_each_index(const Dims& shape, const std::function<void(const Dims&)>& fn) {
  for (int64_t s : shape)
    if (s == 0) return;
  Dims idx(shape.size(), 0);
  for (;;) {
    fn(idx);
    size_t d = shape.size();
    while (d > 0) {
      --d;
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
      if (d == 0) return;
    }
    if (shape.empty()) return;
  }
}

// The element of `t` (broadcast to out_shape) at out index idx.
double read_bcast(const TensorImpl& t, const Dims& idx) {
  const size_t lead = idx.size() - t.sizes().size();
  int64_t off = 0;
  for (size_t d = 0; d < t.sizes().size(); ++d) {
    const int64_t i = t.sizes()[d] == 1 ? 0 : idx[d + lead];
    off += i * t.strides()[d];
  }
  return read_at(t, off);
}

double read_idx(const TensorImpl& t, const Dims& idx) {
  return read_at(t, offset_of(t, idx));
}

// Rounds v as storing it in dtype dt would (the reference's view of the result dtype).
double round_to(DType dt, double v) {
  auto t = empty(Dims{1}, dt);
  write_at(*t, 0, v);
  return read_at(*t, 0);
}

std::mt19937_64& rng() {
  static std::mt19937_64 g(12345);
  return g;
}

using Gen = std::function<double()>;
Gen uniform(double lo, double hi) {
  return [lo, hi] { return std::uniform_real_distribution<double>(lo, hi)(rng()); };
}
Gen ints(int lo, int hi) {
  return
      [lo, hi] { return static_cast<double>(std::uniform_int_distribution<int>(lo, hi)(rng())); };
}

// Fills every element of t (through its strides) with gen(), clamped to sensible integer ranges.
void fill(TensorImpl& t, const Gen& gen) {
  for_each_index(t.sizes(), [&](const Dims& idx) {
    double v = gen();
    if (t.dtype() == DType::Bool) v = std::fmod(std::fabs(std::round(v)), 2.0);
    if (t.dtype() == DType::UInt8) v = std::fabs(std::round(v));
    if (is_integral(t.dtype())) v = std::round(v);
    write_at(t, offset_of(t, idx), v);
  });
}

enum class Layout { Contiguous, Transposed, Stepped, Expanded };
const char* layout_name(Layout l) {
  switch (l) {
    case Layout::Contiguous:
      return "contiguous";
    case Layout::Transposed:
      return "transposed";
    case Layout::Stepped:
      return "stepped";
    case Layout::Expanded:
      return "expanded";
  }
  return "?";
}

// A tensor of logical shape `shape` and the given memory layout, filled from gen.
TensorImplPtr make_input(const Dims& shape, DType dt, Layout layout, const Gen& gen) {
  TensorImplPtr t;
  const size_t r = shape.size();
  if (layout == Layout::Transposed && r >= 2) {
    Dims rev(shape.vec());
    std::reverse(rev.begin(), rev.end());
    auto base = empty(rev, dt);
    std::vector<int64_t> order(r);
    for (size_t i = 0; i < r; ++i) order[i] = static_cast<int64_t>(r - 1 - i);
    t = views::permute(*base, order);
  } else if (layout == Layout::Stepped && r >= 1) {
    Dims big = shape;
    big[r - 1] = shape[r - 1] * 2 + 1;
    auto base = empty(big, dt);
    t = views::slice(*base, static_cast<int64_t>(r - 1), 1, big[r - 1], 2);
  } else if (layout == Layout::Expanded && r >= 1) {
    Dims one = shape;
    one[0] = 1;
    auto base = empty(one, dt);
    fill(*base, gen);
    return views::expand(*base, shape);
  } else {
    t = empty(shape, dt);
  }
  fill(*t, gen);
  return t;
}

struct Tol {
  double rtol, atol;
};
Tol tol_for(DType dt) {
  switch (dt) {
    case DType::Float32:
      return {4e-6, 1e-30};
    case DType::Float64:
      return {1e-12, 1e-300};
    case DType::Float16:
      return {1.5e-3, 1e-7};
    case DType::BFloat16:
      return {1e-2, 1e-30};
    default:
      return {0, 0};
  }
}

// Checks out[idx] == ref(idx) for every index (NaN matches NaN; infinities must match).
void expect_matches(const TensorImpl& out, const std::function<double(const Dims&)>& ref,
                    const std::string& what, Tol tol) {
  int bad = 0;
  for_each_index(out.sizes(), [&](const Dims& idx) {
    if (bad > 5) return;
    const double got = read_idx(out, idx);
    const double want = ref(idx);
    bool ok;
    if (std::isnan(want)) {
      ok = std::isnan(got);
    } else if (std::isinf(want)) {
      ok = got == want;
    } else {
      ok = std::fabs(got - want) <= tol.atol + tol.rtol * std::fabs(want);
    }
    if (!ok) {
      ++bad;
      ADD_FAILURE() << what << " at " << idx << ": got " << got << ", want " << want;
    }
  });
}

}  // namespace

// ==== promotion and broadcasting ================================================================

TEST(ElementwisePromotion, DTypeTable) {
  EXPECT_EQ(result_type(DType::Float32, DType::Float64), DType::Float64);
  EXPECT_EQ(result_type(DType::Int32, DType::Float16), DType::Float16);
  EXPECT_EQ(result_type(DType::Bool, DType::Int8), DType::Int8);
  EXPECT_EQ(result_type(DType::UInt8, DType::Int8), DType::Int32);
  EXPECT_EQ(result_type(DType::Float16, DType::BFloat16), DType::Float32);
  EXPECT_EQ(result_type(DType::Int64, DType::Int32), DType::Int64);
  EXPECT_EQ(binary_result_type(BinaryOp::Div, DType::Int32, DType::Int32), DType::Float32);
  EXPECT_EQ(binary_result_type(BinaryOp::Div, DType::Float16, DType::Int32), DType::Float16);
  EXPECT_EQ(binary_result_type(BinaryOp::Lt, DType::Float32, DType::Int32), DType::Bool);
  EXPECT_EQ(binary_result_type(BinaryOp::Add, DType::Bool, DType::Bool), DType::Bool);
  EXPECT_EQ(unary_result_type(UnaryOp::Exp, DType::Int32), DType::Float32);
  EXPECT_EQ(unary_result_type(UnaryOp::Exp, DType::BFloat16), DType::BFloat16);
  EXPECT_EQ(unary_result_type(UnaryOp::Abs, DType::Int8), DType::Int8);
  EXPECT_TRUE(can_cast(DType::Float64, DType::Float16));
  EXPECT_TRUE(can_cast(DType::Int64, DType::Float32));
  EXPECT_FALSE(can_cast(DType::Float32, DType::Int64));
  EXPECT_FALSE(can_cast(DType::Int32, DType::Bool));
  EXPECT_TRUE(can_cast(DType::Bool, DType::UInt8));
}

TEST(ElementwisePromotion, ZeroDimAndScalarsOnlyRaiseCategory) {
  auto i32 = zeros(Dims{3}, DType::Int32);
  auto f16 = zeros(Dims{3}, DType::Float16);
  auto b = zeros(Dims{3}, DType::Bool);
  auto i64_0 = zeros(Dims{}, DType::Int64);
  auto f64_0 = zeros(Dims{}, DType::Float64);
  auto i32_0 = zeros(Dims{}, DType::Int32);
  EXPECT_EQ(result_type(*i32, *i64_0), DType::Int32);
  EXPECT_EQ(result_type(*i32, *f64_0), DType::Float64);
  EXPECT_EQ(result_type(*f16, *f64_0), DType::Float16);
  EXPECT_EQ(result_type(*b, *i64_0), DType::Int64);
  EXPECT_EQ(result_type(*i32_0, *f64_0), DType::Float64);  // both 0-dim: plain promotion
  EXPECT_EQ(result_type(*i32, Scalar(2.5)), DType::Float32);
  EXPECT_EQ(result_type(*i32, Scalar(2)), DType::Int32);
  EXPECT_EQ(result_type(*f16, Scalar(2.5)), DType::Float16);
  EXPECT_EQ(result_type(*b, Scalar(3)), DType::Int64);
  EXPECT_EQ(result_type(*b, Scalar(true)), DType::Bool);
  EXPECT_EQ(result_type(*b, Scalar(1.5)), DType::Float32);
  EXPECT_EQ(result_type(*i32, *f16, *i64_0), DType::Float16);

  // The kernels follow it: int tensor + 2.5 computes in float32.
  auto x = empty(Dims{4}, DType::Int32);
  for (int i = 0; i < 4; ++i) write_at(*x, i, i - 2);
  auto out = empty(Dims{4}, DType::Float32);
  add_scalar_out(*x, 2.5, *out);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(read_at(*out, i), (i - 2) + 2.5);
  auto outi = empty(Dims{4}, DType::Int32);
  mul_scalar_out(*x, 3, *outi);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(read_at(*outi, i), (i - 2) * 3);
  EXPECT_THROW(mul_scalar_out(*x, 3.5, *outi), Error);  // float result into an int out
  // int / int -> float32 true division.
  auto y = empty(Dims{4}, DType::Int32);
  for (int i = 0; i < 4; ++i) write_at(*y, i, 4);
  div_out(*x, *y, *out);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(read_at(*out, i), (i - 2) / 4.0);
  // f16 tensor + f64 0-dim computes into f16.
  auto h = make_input(Dims{5}, DType::Float16, Layout::Contiguous, uniform(-2, 2));
  auto s = empty(Dims{}, DType::Float64);
  write_at(*s, 0, 0.1);
  auto ho = empty(Dims{5}, DType::Float16);
  add_out(*h, *s, *ho);
  for (int i = 0; i < 5; ++i) {
    EXPECT_NEAR(read_at(*ho, i), round_to(DType::Float16, read_at(*h, i) + 0.1), 1e-3);
  }
}

TEST(ElementwiseBroadcast, ShapesAndErrors) {
  EXPECT_EQ(broadcast_shape(Dims{3, 1}, Dims{1, 4}), (Dims{3, 4}));
  EXPECT_EQ(broadcast_shape(Dims{}, Dims{2, 3}), (Dims{2, 3}));
  EXPECT_EQ(broadcast_shape(Dims{5, 1, 3}, Dims{4, 1}), (Dims{5, 4, 3}));
  EXPECT_EQ(broadcast_shape(Dims{0, 1}, Dims{1, 3}), (Dims{0, 3}));
  EXPECT_EQ(broadcast_shape(Dims{2, 1, 1}, Dims{3, 1}, Dims{4}), (Dims{2, 3, 4}));
  try {
    auto a = zeros(Dims{2, 3}, DType::Float32);
    auto b = zeros(Dims{4}, DType::Float32);
    auto o = empty(Dims{2, 3}, DType::Float32);
    add_out(*a, *b, *o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "add");
    EXPECT_NE(std::string(e.what()).find("[2, 3]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[4]"), std::string::npos) << e.what();
  }
  try {
    auto c = zeros(Dims{2}, DType::Bool);
    auto a = zeros(Dims{3}, DType::Float32);
    auto o = empty(Dims{3}, DType::Float32);
    where_out(*c, *a, *a, *o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "where");
  }
}

// ==== unary =====================================================================================

namespace {

struct UnaryCase {
  UnaryOp op;
  std::function<double(double)> ref;
  Gen gen;
  bool integral_ok;  // keeps integer dtypes (vs computes in float32)
  UnaryParams params{};
};

std::vector<UnaryCase> unary_cases() {
  const double slope = 0.2;
  return {
      {UnaryOp::Neg, [](double x) { return -x; }, uniform(-4, 4), true},
      {UnaryOp::Abs, [](double x) { return std::fabs(x); }, uniform(-4, 4), true},
      {UnaryOp::Sign, [](double x) { return std::isnan(x) ? x : double((x > 0) - (x < 0)); },
       ints(-2, 2), true},
      {UnaryOp::Relu, [](double x) { return x < 0 ? 0.0 : x; }, uniform(-4, 4), true},
      {UnaryOp::Floor, [](double x) { return std::floor(x); }, uniform(-4, 4), true},
      {UnaryOp::Ceil, [](double x) { return std::ceil(x); }, uniform(-4, 4), true},
      {UnaryOp::Round,
       [](double x) {
         // Half to even, written out.
         const double f = std::floor(x), d = x - f;
         if (d < 0.5) return f;
         if (d > 0.5) return f + 1;
         return std::fmod(f, 2.0) == 0 ? f : f + 1;
       },
       [] { return 0.5 * std::uniform_int_distribution<int>(-10, 10)(rng()); }, true},
      {UnaryOp::Exp, [](double x) { return std::exp(x); }, uniform(-8, 8), false},
      {UnaryOp::Log, [](double x) { return std::log(x); }, uniform(0.01, 10), false},
      {UnaryOp::Log1p, [](double x) { return std::log1p(x); }, uniform(-0.99, 10), false},
      {UnaryOp::Sqrt, [](double x) { return std::sqrt(x); }, uniform(0, 10), false},
      {UnaryOp::Rsqrt, [](double x) { return 1 / std::sqrt(x); }, uniform(0.01, 10), false},
      {UnaryOp::Sin, [](double x) { return std::sin(x); }, uniform(-4, 4), false},
      {UnaryOp::Cos, [](double x) { return std::cos(x); }, uniform(-4, 4), false},
      {UnaryOp::Tanh, [](double x) { return std::tanh(x); }, uniform(-4, 4), false},
      {UnaryOp::Sigmoid, [](double x) { return 1 / (1 + std::exp(-x)); }, uniform(-8, 8), false},
      {UnaryOp::Gelu, [](double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); },
       uniform(-4, 4), false},
      {UnaryOp::GeluTanh,
       [](double x) {
         // x/2 (1 + tanh u) = x / (1 + e^{-2u}): the same function without double's cancellation.
         return x / (1 + std::exp(-2 * std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
       },
       uniform(-4, 4), false},
      {UnaryOp::Silu, [](double x) { return x / (1 + std::exp(-x)); }, uniform(-8, 8), false},
      {UnaryOp::Erf, [](double x) { return std::erf(x); }, uniform(-4, 4), false},
      {UnaryOp::Reciprocal, [](double x) { return 1 / x; }, uniform(0.1, 4), false},
      {UnaryOp::LeakyRelu, [slope](double x) { return x > 0 ? x : x * slope; }, uniform(-4, 4),
       false, UnaryParams{slope, 0}},
      {UnaryOp::Hardtanh, [](double x) { return std::min(std::max(x, -0.5), 2.0); }, uniform(-4, 4),
       false, UnaryParams{-0.5, 2.0}},
  };
}

const Dims kShapes[] = {Dims{4, 37}, Dims{3, 5, 7}, Dims{}, Dims{0, 3}, Dims{1}};

}  // namespace

TEST(ElementwiseUnary, EveryOpDtypeLayout) {
  for (const auto& c : unary_cases()) {
    for (DType dt : kAllDTypes) {
      if (c.op == UnaryOp::Neg && dt == DType::Bool) continue;  // an error, tested below
      if (c.op == UnaryOp::Round && dt == DType::UInt8) continue;
      const DType rdt = unary_result_type(c.op, dt);
      EXPECT_EQ(rdt, (is_floating(dt) || c.integral_ok) ? dt : DType::Float32);
      for (const Dims& shape : kShapes) {
        for (Layout layout :
             {Layout::Contiguous, Layout::Transposed, Layout::Stepped, Layout::Expanded}) {
          if (shape.size() == 0 && layout != Layout::Contiguous) continue;
          auto x = make_input(shape, dt, layout, c.gen);
          auto out = empty(shape, rdt);
          unary_out(c.op, *x, *out, c.params);
          const std::string what = std::string(unary_op_name(c.op)) + " " +
                                   std::string(dtype_name(dt)) + " " + layout_name(layout);
          expect_matches(
              *out, [&](const Dims& idx) { return round_to(rdt, c.ref(read_idx(*x, idx))); }, what,
              tol_for(rdt));
        }
      }
    }
  }
}

TEST(ElementwiseUnary, NamedWrappersInPlaceAndNonContiguousOut) {
  auto x = make_input(Dims{6, 9}, DType::Float32, Layout::Contiguous, uniform(-3, 3));
  auto ref = make_input(Dims{6, 9}, DType::Float32, Layout::Contiguous, uniform(0, 1));
  copy_(*ref, *x);
  // Out transposed (non-contiguous).
  auto base = empty(Dims{9, 6}, DType::Float32);
  auto out = views::transpose(*base, 0, 1);
  sigmoid_out(*x, *out);
  expect_matches(
      *out, [&](const Dims& i) { return 1 / (1 + std::exp(-read_idx(*ref, i))); },
      "sigmoid transposed out", tol_for(DType::Float32));
  // In place, exactly aliased.
  tanh_out(*x, *x);
  expect_matches(
      *x, [&](const Dims& i) { return std::tanh(read_idx(*ref, i)); }, "tanh_",
      tol_for(DType::Float32));
  copy_(*x, *ref);
  relu_(*x);
  expect_matches(*x, [&](const Dims& i) { return std::max(0.0, read_idx(*ref, i)); }, "relu_",
                 {0, 0});
  copy_(*x, *ref);
  gelu_out(*x, *x, GeluApproximate::Tanh);
  expect_matches(
      *x,
      [&](const Dims& i) {
        const double v = read_idx(*ref, i);
        return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
      },
      "gelu tanh in place", tol_for(DType::Float32));
  copy_(*x, *ref);
  leaky_relu_out(*x, 0.1, *x);
  expect_matches(
      *x,
      [&](const Dims& i) {
        return read_idx(*ref, i) > 0 ? read_idx(*ref, i) : 0.1 * read_idx(*ref, i);
      },
      "leaky_relu in place", tol_for(DType::Float32));
  copy_(*x, *ref);
  hardtanh_out(*x, -1, 1, *x);
  expect_matches(*x, [&](const Dims& i) { return std::clamp(read_idx(*ref, i), -1.0, 1.0); },
                 "hardtanh", {0, 0});
  // A float op into an int tensor in place is refused (float result, int out).
  auto xi = zeros(Dims{3}, DType::Int32);
  EXPECT_THROW(unary_(UnaryOp::Exp, *xi), Error);
  // f32 result written into an f64 out (allowed cast).
  auto o64 = empty(Dims{6, 9}, DType::Float64);
  exp_out(*ref, *o64);
  expect_matches(
      *o64, [&](const Dims& i) { return std::exp(read_idx(*ref, i)); }, "exp f64 out",
      tol_for(DType::Float32));
}

TEST(ElementwiseUnary, SpecialValues) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double s2 = std::sqrt(2.0);
  struct Case {
    UnaryOp op;
    double x, want;  // want in float64; rounded to the dtype before comparing
  };
  const Case cases[] = {
      {UnaryOp::Exp, inf, inf},
      {UnaryOp::Exp, -inf, 0},
      {UnaryOp::Exp, nan, nan},
      {UnaryOp::Exp, 89.0, std::exp(89.0)},  // inf in float32
      {UnaryOp::Exp, -110.0, std::exp(-110.0)},
      {UnaryOp::Exp, -100.0, std::exp(-100.0)},  // float32 subnormal
      {UnaryOp::Exp, 0, 1},
      {UnaryOp::Log, 0, -inf},
      {UnaryOp::Log, -1, nan},
      {UnaryOp::Log, inf, inf},
      {UnaryOp::Log, nan, nan},
      {UnaryOp::Log, 1, 0},
      {UnaryOp::Log, 0x1p-140, std::log(0x1p-140)},  // float32 subnormal input
      {UnaryOp::Log1p, -1, -inf},
      {UnaryOp::Log1p, inf, inf},
      {UnaryOp::Log1p, -2, nan},
      {UnaryOp::Log1p, 0x1p-100, 0x1p-100},
      {UnaryOp::Tanh, inf, 1},
      {UnaryOp::Tanh, -inf, -1},
      {UnaryOp::Tanh, nan, nan},
      {UnaryOp::Tanh, 50, 1},
      {UnaryOp::Sigmoid, inf, 1},
      {UnaryOp::Sigmoid, -inf, 0},
      {UnaryOp::Sigmoid, nan, nan},
      {UnaryOp::Erf, inf, 1},
      {UnaryOp::Erf, -inf, -1},
      {UnaryOp::Erf, nan, nan},
      {UnaryOp::Erf, 0, 0},
      {UnaryOp::Gelu, inf, inf},
      {UnaryOp::Gelu, -inf, nan},
      {UnaryOp::Gelu, nan, nan},
      {UnaryOp::Gelu, -30, 0.5 * -30 * std::erfc(30 / s2)},
      {UnaryOp::Gelu, -12, 0.5 * -12 * std::erfc(12 / s2)},
      {UnaryOp::GeluTanh, -30, 0},
      {UnaryOp::GeluTanh, 30, 30},
      {UnaryOp::Silu, 100, 100},
      {UnaryOp::Silu, -85, -85 / (1 + std::exp(85.0))},
      {UnaryOp::Sigmoid, -100, 1 / (1 + std::exp(100.0))},
      {UnaryOp::Relu, nan, nan},
      {UnaryOp::Sqrt, -1, nan},
      {UnaryOp::Sqrt, inf, inf},
      {UnaryOp::Rsqrt, 0, inf},
      {UnaryOp::Reciprocal, 0, inf},
      {UnaryOp::Sign, nan, nan},
      {UnaryOp::Sign, -0.0, 0},
      {UnaryOp::Round, 2.5, 2},
      {UnaryOp::Round, -2.5, -2},
      {UnaryOp::Round, 3.5, 4},
      {UnaryOp::Round, 0.49999997, 0},
      {UnaryOp::Floor, -inf, -inf},
      {UnaryOp::Hardtanh, nan, nan},
  };
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (const Case& c : cases) {
      auto x = empty(Dims{1}, dt);
      write_at(*x, 0, c.x);
      auto out = empty(Dims{1}, dt);
      unary_out(c.op, *x, *out);
      const double got = read_at(*out, 0);
      const double want = round_to(dt, c.want);
      const std::string what = std::string(unary_op_name(c.op)) + "(" + std::to_string(c.x) + ") " +
                               std::string(dtype_name(dt));
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << what << " = " << got;
      } else if (std::isinf(want)) {
        EXPECT_EQ(got, want) << what;
      } else {
        // Relative error, or one subnormal step of the dtype.
        const double sub = dt == DType::Float32 ? 1.5e-45 : 5e-324;
        EXPECT_NEAR(got, want, std::fabs(want) * 4e-7 + sub) << what;
      }
    }
  }
}

// Odd functions keep the sign of zero (as libm and PyTorch do), on the vector path too.
TEST(ElementwiseUnary, SignedZerosKeepTheirSign) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (UnaryOp op : {UnaryOp::Tanh, UnaryOp::Log1p, UnaryOp::Erf, UnaryOp::Sin, UnaryOp::Sqrt}) {
      auto x = empty(Dims{67}, dt), out = empty(Dims{67}, dt);
      for (int64_t i = 0; i < 67; ++i) write_at(*x, i, i % 2 ? -0.0 : 0.0);
      unary_out(op, *x, *out);
      for (int64_t i = 0; i < 67; ++i) {
        const double got = read_at(*out, i);
        EXPECT_EQ(got, 0.0) << unary_op_name(op) << " " << dtype_name(dt) << " at " << i;
        EXPECT_EQ(std::signbit(got), i % 2 == 1)
            << unary_op_name(op) << " " << dtype_name(dt) << " at " << i;
      }
    }
  }
}

// Max ulp error of the float32 vector kernels against float64, for both ISA builds.
TEST(ElementwiseUnary, VectorMathUlpError) {
  struct Case {
    UnaryOp op;
    std::function<double(double)> ref;
    double lo, hi;
    double max_ulp;
  };
  const Case cases[] = {
      {UnaryOp::Exp, [](double x) { return std::exp(x); }, -103, 88.7, 2},
      {UnaryOp::Log, [](double x) { return std::log(x); }, 1e-38, 1e30, 2},
      {UnaryOp::Log, [](double x) { return std::log(x); }, 0.5, 2, 2},
      {UnaryOp::Log1p, [](double x) { return std::log1p(x); }, -0.999, 10, 3},
      {UnaryOp::Log1p, [](double x) { return std::log1p(x); }, -1e-3, 1e-3, 3},
      {UnaryOp::Tanh, [](double x) { return std::tanh(x); }, -10, 10, 3},
      {UnaryOp::Tanh, [](double x) { return std::tanh(x); }, -0.7, 0.7, 3},
      {UnaryOp::Sigmoid, [](double x) { return 1 / (1 + std::exp(-x)); }, -80, 30, 3},
      {UnaryOp::Erf, [](double x) { return std::erf(x); }, -5, 5, 3},
      {UnaryOp::Erf, [](double x) { return std::erf(x); }, -1, 1, 3},
      {UnaryOp::Gelu, [](double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }, -12, 6, 6},
      {UnaryOp::Silu, [](double x) { return x / (1 + std::exp(-x)); }, -80, 30, 4},
      {UnaryOp::GeluTanh,
       [](double x) {
         const double u = std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x);
         return x / (1 + std::exp(-2 * u));
       },
       -2, 8, 10},
      // Further out the error grows with |2u| (about |2u| * 2^-24 relative, from rounding u in
      // float32, as in any float32 implementation): checked against that bound instead.
      {UnaryOp::GeluTanh,
       [](double x) {
         const double u = std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x);
         return x / (1 + std::exp(-2 * u));
       },
       -9, -2, 200},
  };
  std::vector<const ew::VecTable*> tables = {&ew::vec_table_baseline()};
  if (ew::vec_table_avx512()) tables.push_back(ew::vec_table_avx512());
  const int n = 40000;
  std::vector<float> in(n), out(n);
  for (const ew::VecTable* table : tables) {
    for (const Case& c : cases) {
      // Log-uniform for wide positive ranges, uniform otherwise.
      for (int i = 0; i < n; ++i) {
        double v;
        if (c.lo > 0 && c.hi / c.lo > 1e3) {
          v = std::exp(uniform(std::log(c.lo), std::log(c.hi))());
        } else {
          v = uniform(c.lo, c.hi)();
        }
        in[i] = static_cast<float>(v);
      }
      table->unary[static_cast<int>(c.op)](out.data(), in.data(), n, 0, 0);
      double worst = 0;
      float worst_x = 0;
      for (int i = 0; i < n; ++i) {
        const double want = c.ref(in[i]);
        const float wf = static_cast<float>(want);
        const double ulp = std::max<double>(std::nextafter(std::fabs(wf), INFINITY) - std::fabs(wf),
                                            std::numeric_limits<float>::denorm_min());
        const double e = std::fabs(out[i] - want) / ulp;
        if (e > worst) {
          worst = e;
          worst_x = in[i];
        }
      }
      if (std::getenv("KILN_TEST_VERBOSE")) {
        printf("%-10s [%g, %g] %s: max %.2f ulp at %.9g\n", unary_op_name(c.op).data(), c.lo, c.hi,
               table == tables[0] ? "baseline" : "avx512", worst, worst_x);
      }
      EXPECT_LE(worst, c.max_ulp) << unary_op_name(c.op) << " on [" << c.lo << ", " << c.hi
                                  << "] worst at x=" << worst_x
                                  << (table == tables[0] ? " (baseline)" : " (avx512)");
    }
  }
}

TEST(ElementwiseUnary, ErrorsNameTheOp) {
  auto b = zeros(Dims{3}, DType::Bool);
  auto bo = empty(Dims{3}, DType::Bool);
  try {
    neg_out(*b, *bo);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "neg");
  }
  auto x = zeros(Dims{3}, DType::Float32);
  auto wrong = empty(Dims{4}, DType::Float32);
  try {
    exp_out(*x, *wrong);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "exp");
    EXPECT_NE(std::string(e.what()).find("expected out of shape [3], got [4]"), std::string::npos)
        << e.what();
  }
  auto io = empty(Dims{3}, DType::Int32);
  try {
    sigmoid_out(*x, *io);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "sigmoid");
    EXPECT_NE(std::string(e.what()).find("float32"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("int32"), std::string::npos) << e.what();
  }
}

// ==== binary ====================================================================================

namespace {

struct BinaryCase {
  BinaryOp op;
  std::function<double(double, double)> ref;
  Gen ga, gb;
};

double ref_max(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  return a > b ? a : b;
}
double ref_min(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  return a < b ? a : b;
}

std::vector<BinaryCase> binary_cases() {
  return {
      {BinaryOp::Add, [](double a, double b) { return a + b; }, uniform(-5, 5), uniform(-5, 5)},
      {BinaryOp::Sub, [](double a, double b) { return a - b; }, uniform(-5, 5), uniform(-5, 5)},
      {BinaryOp::Mul, [](double a, double b) { return a * b; }, uniform(-5, 5), uniform(-5, 5)},
      {BinaryOp::Div, [](double a, double b) { return a / b; }, uniform(-5, 5), uniform(0.5, 5)},
      {BinaryOp::Pow, [](double a, double b) { return std::pow(a, b); }, uniform(0, 3),
       uniform(0, 4)},
      {BinaryOp::Maximum, ref_max, ints(-3, 3), ints(-3, 3)},
      {BinaryOp::Minimum, ref_min, ints(-3, 3), ints(-3, 3)},
      {BinaryOp::Eq, [](double a, double b) -> double { return a == b; }, ints(-2, 2), ints(-2, 2)},
      {BinaryOp::Ne, [](double a, double b) -> double { return a != b; }, ints(-2, 2), ints(-2, 2)},
      {BinaryOp::Lt, [](double a, double b) -> double { return a < b; }, ints(-2, 2), ints(-2, 2)},
      {BinaryOp::Le, [](double a, double b) -> double { return a <= b; }, ints(-2, 2), ints(-2, 2)},
      {BinaryOp::Gt, [](double a, double b) -> double { return a > b; }, ints(-2, 2), ints(-2, 2)},
      {BinaryOp::Ge, [](double a, double b) -> double { return a >= b; }, ints(-2, 2), ints(-2, 2)},
      {BinaryOp::LogicalAnd, [](double a, double b) -> double { return a != 0 && b != 0; },
       ints(-1, 1), ints(-1, 1)},
      {BinaryOp::LogicalOr, [](double a, double b) -> double { return a != 0 || b != 0; },
       ints(-1, 1), ints(-1, 1)},
      {BinaryOp::LogicalXor, [](double a, double b) -> double { return (a != 0) != (b != 0); },
       ints(-1, 1), ints(-1, 1)},
  };
}

// Pairs of shapes that broadcast (incl. 0-dim and empty).
struct ShapePair {
  Dims a, b;
};
const ShapePair kPairs[] = {
    {Dims{4, 37}, Dims{4, 37}}, {Dims{3, 1}, Dims{1, 4}},
    {Dims{5, 6}, Dims{}},       {Dims{}, Dims{2, 9}},
    {Dims{}, Dims{}},           {Dims{0, 3}, Dims{1, 3}},
    {Dims{2, 3, 17}, Dims{17}}, {Dims{2, 1, 5}, Dims{3, 1}},
};

double apply_integral_wrap(DType rdt, double v) {
  // The reference values stay inside every integer type's range; bool results are 0/1.
  if (rdt == DType::Bool) return v != 0;
  return v;
}

}  // namespace

TEST(ElementwiseBinary, EveryOpDtypeLayoutBroadcast) {
  for (const auto& c : binary_cases()) {
    const std::string opname(binary_op_name(c.op));
    for (DType dt : kAllDTypes) {
      if (c.op == BinaryOp::Sub && dt == DType::Bool) continue;  // error, tested below
      if (c.op == BinaryOp::Pow && dt == DType::Bool) continue;
      if (c.op == BinaryOp::Div && dt == DType::UInt8) continue;  // generator gives negatives
      const DType rdt = binary_result_type(c.op, dt, dt);
      for (const ShapePair& sp : kPairs) {
        for (Layout la : {Layout::Contiguous, Layout::Transposed, Layout::Stepped}) {
          const Layout lb = la == Layout::Transposed ? Layout::Stepped : la;
          auto a = make_input(sp.a, dt, sp.a.size() ? la : Layout::Contiguous, c.ga);
          auto b = make_input(sp.b, dt, sp.b.size() ? lb : Layout::Contiguous, c.gb);
          const Dims shape = broadcast_shape(sp.a, sp.b);
          auto out = empty(shape, rdt);
          binary_out(c.op, *a, *b, *out);
          expect_matches(
              *out,
              [&](const Dims& idx) {
                double va = read_bcast(*a, idx), vb = read_bcast(*b, idx);
                if (c.op >= BinaryOp::LogicalAnd || dt == DType::Bool) {
                  va = va != 0;
                  vb = vb != 0;
                }
                double r = c.ref(va, vb);
                if (dt == DType::Bool && c.op <= BinaryOp::Minimum && c.op != BinaryOp::Div) {
                  r = r != 0;  // bool arithmetic: add = or, mul = and, max = or, min = and
                }
                return round_to(rdt, apply_integral_wrap(rdt, r));
              },
              opname + " " + std::string(dtype_name(dt)) + " " + layout_name(la), tol_for(rdt));
        }
      }
    }
  }
}

TEST(ElementwiseBinary, MixedDtypesAndOutCasts) {
  const DType pairs[][2] = {{DType::Float32, DType::Float64},  {DType::Int32, DType::Float16},
                            {DType::Int8, DType::UInt8},       {DType::Bool, DType::Int64},
                            {DType::BFloat16, DType::Float16}, {DType::Int64, DType::Float32},
                            {DType::Bool, DType::BFloat16}};
  for (auto [da, db] : pairs) {
    for (BinaryOp op : {BinaryOp::Add, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Maximum,
                        BinaryOp::Lt, BinaryOp::Eq}) {
      auto a = make_input(Dims{3, 10}, da, Layout::Transposed, ints(0, 4));
      auto b = make_input(Dims{10}, db, Layout::Contiguous, ints(1, 4));
      const DType rdt = binary_result_type(op, da, db);
      auto out = empty(Dims{3, 10}, rdt);
      binary_out(op, *a, *b, *out);
      expect_matches(
          *out,
          [&](const Dims& i) {
            const double x = read_bcast(*a, i), y = read_bcast(*b, i);
            double r = op == BinaryOp::Add   ? x + y
                       : op == BinaryOp::Mul ? x * y
                       : op == BinaryOp::Div ? x / y
                       : op == BinaryOp::Lt  ? double(x < y)
                       : op == BinaryOp::Eq  ? double(x == y)
                                             : std::max(x, y);
            if (rdt == DType::Bool) r = r != 0;
            return round_to(rdt, r);
          },
          std::string(binary_op_name(op)) + " " + std::string(dtype_name(da)) + "+" +
              std::string(dtype_name(db)),
          tol_for(rdt));
    }
  }
  // A float64 result written into float32 and float16 outs (same category: allowed).
  auto a = make_input(Dims{7}, DType::Float64, Layout::Contiguous, uniform(-2, 2));
  auto b = make_input(Dims{7}, DType::Float32, Layout::Contiguous, uniform(-2, 2));
  for (DType odt : {DType::Float32, DType::Float16, DType::BFloat16}) {
    auto out = empty(Dims{7}, odt);
    mul_out(*a, *b, *out);
    expect_matches(
        *out, [&](const Dims& i) { return round_to(odt, read_idx(*a, i) * read_idx(*b, i)); },
        "f64 result into narrower out", tol_for(odt));
  }
  // Comparison into a float out (bool -> float is allowed).
  auto fo = empty(Dims{7}, DType::Float32);
  gt_out(*a, *b, *fo);
  expect_matches(*fo, [&](const Dims& i) -> double { return read_idx(*a, i) > read_idx(*b, i); },
                 "gt into f32", {0, 0});
}

TEST(ElementwiseBinary, ScalarOperandsAndAlpha) {
  auto x = make_input(Dims{5, 8}, DType::Float32, Layout::Stepped, uniform(-3, 3));
  auto out = empty(Dims{5, 8}, DType::Float32);
  const Tol t = tol_for(DType::Float32);
  add_scalar_out(*x, 1.5, *out);
  expect_matches(
      *out, [&](const Dims& i) { return read_idx(*x, i) + 1.5; }, "add scalar", t);
  sub_scalar_out(*x, 2, *out, 3);
  expect_matches(
      *out, [&](const Dims& i) { return read_idx(*x, i) - 6; }, "sub scalar alpha", t);
  rsub_scalar_out(*x, 2, *out);
  expect_matches(
      *out, [&](const Dims& i) { return 2 - read_idx(*x, i); }, "rsub", t);
  binary_out(BinaryOp::Div, Scalar(1.0), *x, *out);
  expect_matches(
      *out, [&](const Dims& i) { return 1 / read_idx(*x, i); }, "scalar / x", t);
  div_scalar_out(*x, 4, *out);
  expect_matches(
      *out, [&](const Dims& i) { return read_idx(*x, i) / 4; }, "x / 4", t);
  binary_out(BinaryOp::Pow, Scalar(2.0), *x, *out);
  expect_matches(
      *out, [&](const Dims& i) { return std::pow(2.0, read_idx(*x, i)); }, "2 ** x", t);
  for (double e : {2.0, 3.0, 0.5, 1.0, -1.0, 1.7, 0.0}) {
    auto xp = make_input(Dims{5, 8}, DType::Float32, Layout::Transposed, uniform(0.1, 3));
    pow_scalar_out(*xp, e, *out);
    expect_matches(
        *out, [&](const Dims& i) { return std::pow(read_idx(*xp, i), e); },
        "pow scalar " + std::to_string(e), t);
    // The exponent as a one-element tensor (an imported model's constant), f32 and f64, with
    // negative bases where the exponent is an integer; rank 2 like the base, so no broadcast
    // grows the result.
    for (DType et : {DType::Float32, DType::Float64}) {
      auto et_t = empty(Dims{1, 1}, et);
      if (et == DType::Float32)
        et_t->data_ptr<float>()[0] = static_cast<float>(e);
      else
        et_t->data_ptr<double>()[0] = e;
      const bool whole = e == std::floor(e);
      auto xb = make_input(Dims{5, 8}, DType::Float32, Layout::Contiguous,
                           whole ? uniform(-3, 3) : uniform(0.1, 3));
      pow_out(*xb, *et_t, *out);
      expect_matches(
          *out, [&](const Dims& i) { return std::pow(read_idx(*xb, i), e); },
          "pow one-element tensor " + std::to_string(e), t);
    }
  }
  // Tensor alpha forms.
  auto y = make_input(Dims{8}, DType::Float32, Layout::Contiguous, uniform(-3, 3));
  add_out(*x, *y, *out, 0.5);
  expect_matches(
      *out, [&](const Dims& i) { return read_idx(*x, i) + 0.5 * read_bcast(*y, i); }, "add alpha",
      t);
  sub_out(*x, *y, *out, -2);
  expect_matches(
      *out, [&](const Dims& i) { return read_idx(*x, i) + 2 * read_bcast(*y, i); }, "sub alpha", t);
  // Integer tensors: integer alpha and scalars; integer pow including negative exponents.
  auto xi = make_input(Dims{4, 6}, DType::Int64, Layout::Transposed, ints(-3, 3));
  auto yi = make_input(Dims{4, 6}, DType::Int64, Layout::Contiguous, ints(-3, 3));
  auto oi = empty(Dims{4, 6}, DType::Int64);
  add_out(*xi, *yi, *oi, 3);
  expect_matches(*oi, [&](const Dims& i) { return read_idx(*xi, i) + 3 * read_idx(*yi, i); },
                 "int add alpha", {0, 0});
  pow_out(*xi, *yi, *oi);
  expect_matches(*oi,
                 [&](const Dims& i) {
                   const double b = read_idx(*xi, i), e = read_idx(*yi, i);
                   if (e < 0)
                     return b == 1 ? 1.0 : b == -1 ? (std::fmod(-e, 2) == 1 ? -1.0 : 1.0) : 0.0;
                   return std::pow(b, e);
                 },
                 "int pow", {0, 0});
  EXPECT_THROW(add_out(*xi, *yi, *oi, 0.5), Error);  // float alpha for int tensors
  // int8 wraps like PyTorch.
  auto i8 = empty(Dims{2}, DType::Int8);
  write_at(*i8, 0, 100);
  write_at(*i8, 1, -100);
  auto o8 = empty(Dims{2}, DType::Int8);
  add_scalar_out(*i8, 100, *o8);
  EXPECT_EQ(read_at(*o8, 0), static_cast<int8_t>(200));
  EXPECT_EQ(read_at(*o8, 1), 0);
  // Float16 tensor with a float scalar stays float16.
  auto h = make_input(Dims{9}, DType::Float16, Layout::Stepped, uniform(-2, 2));
  auto ho = empty(Dims{9}, DType::Float16);
  mul_scalar_out(*h, 0.3, *ho);
  expect_matches(
      *ho, [&](const Dims& i) { return round_to(DType::Float16, read_idx(*h, i) * 0.3); },
      "f16 * 0.3", tol_for(DType::Float16));
}

TEST(ElementwiseBinary, InPlaceAndAliasing) {
  const Tol t = tol_for(DType::Float32);
  auto a = make_input(Dims{6, 40}, DType::Float32, Layout::Contiguous, uniform(-3, 3));
  auto a0 = empty(Dims{6, 40}, DType::Float32);
  copy_(*a0, *a);
  auto b = make_input(Dims{40}, DType::Float32, Layout::Contiguous, uniform(-3, 3));
  add_(*a, *b);
  expect_matches(
      *a, [&](const Dims& i) { return read_idx(*a0, i) + read_bcast(*b, i); }, "add_", t);
  copy_(*a, *a0);
  mul_out(*a, *a, *a);  // all three the same tensor
  expect_matches(
      *a, [&](const Dims& i) { return read_idx(*a0, i) * read_idx(*a0, i); }, "a*a->a", t);
  // out aliases the second input, transposed views of the same storage.
  auto base = make_input(Dims{8, 8}, DType::Float32, Layout::Contiguous, uniform(-3, 3));
  auto ref = empty(Dims{8, 8}, DType::Float32);
  copy_(*ref, *base);
  auto other = make_input(Dims{8, 8}, DType::Float32, Layout::Contiguous, uniform(-3, 3));
  auto bt = views::transpose(*base, 0, 1);
  sub_out(*other, *bt, *bt);
  expect_matches(
      *bt, [&](const Dims& i) { return read_idx(*other, i) - read_at(*ref, i[1] * 8 + i[0]); },
      "out aliases b (transposed)", t);
  // In-place with a dtype that keeps its own: f32 += f64 tensor (allowed), i32 += f32 (refused).
  auto d = make_input(Dims{6, 40}, DType::Float64, Layout::Contiguous, uniform(-3, 3));
  copy_(*a, *a0);
  add_(*a, *d);
  expect_matches(
      *a, [&](const Dims& i) { return read_idx(*a0, i) + read_idx(*d, i); }, "f32 += f64", t);
  auto ai = zeros(Dims{6, 40}, DType::Int32);
  EXPECT_THROW(add_(*ai, *a), Error);
  // Partial overlap: out is a shifted view of an input.
  auto buf = make_input(Dims{20}, DType::Float32, Layout::Contiguous, uniform(-3, 3));
  auto lo = views::slice(*buf, 0, 0, 10);
  auto hi = views::slice(*buf, 0, 5, 15);
  try {
    add_out(*lo, *lo, *hi);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "add");
    EXPECT_NE(std::string(e.what()).find("alias"), std::string::npos) << e.what();
  }
  // An out whose elements overlap (expanded).
  auto one = zeros(Dims{1}, DType::Float32);
  auto wide = views::expand(*one, Dims{5});
  auto five = zeros(Dims{5}, DType::Float32);
  EXPECT_THROW(add_out(*five, *five, *wide), Error);
}

TEST(ElementwiseBinary, MaximumMinimumPropagateNaN) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double vals[][2] = {{nan, 1}, {1, nan},         {nan, nan},   {-1, 2},
                            {3, -4},  {-INFINITY, nan}, {INFINITY, 1}};
  for (DType dt : kFloatDTypes) {
    const int n = static_cast<int>(std::size(vals));
    auto a = empty(Dims{n}, dt);
    auto b = empty(Dims{n}, dt);
    for (int i = 0; i < n; ++i) {
      write_at(*a, i, vals[i][0]);
      write_at(*b, i, vals[i][1]);
    }
    auto mx = empty(Dims{n}, dt), mn = empty(Dims{n}, dt);
    maximum_out(*a, *b, *mx);
    minimum_out(*a, *b, *mn);
    for (int i = 0; i < n; ++i) {
      const double M = ref_max(vals[i][0], vals[i][1]), m = ref_min(vals[i][0], vals[i][1]);
      if (std::isnan(M)) {
        EXPECT_TRUE(std::isnan(read_at(*mx, i))) << i << " " << dtype_name(dt);
        EXPECT_TRUE(std::isnan(read_at(*mn, i))) << i << " " << dtype_name(dt);
      } else {
        EXPECT_EQ(read_at(*mx, i), M);
        EXPECT_EQ(read_at(*mn, i), m);
      }
    }
    // Comparisons with NaN: only ne is true.
    auto bo = empty(Dims{n}, DType::Bool);
    ne_out(*a, *b, *bo);
    EXPECT_EQ(read_at(*bo, 0), 1);
    eq_out(*a, *b, *bo);
    EXPECT_EQ(read_at(*bo, 2), 0);
    lt_out(*a, *b, *bo);
    EXPECT_EQ(read_at(*bo, 0), 0);
  }
}

TEST(ElementwiseBinary, ErrorsNameTheOp) {
  auto a = zeros(Dims{2, 3}, DType::Float32);
  auto bad = empty(Dims{3, 2}, DType::Float32);
  try {
    mul_out(*a, *a, *bad);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "mul");
    EXPECT_NE(std::string(e.what()).find("expected out of shape [2, 3], got [3, 2]"),
              std::string::npos)
        << e.what();
  }
  auto io = empty(Dims{2, 3}, DType::Int64);
  try {
    div_out(*a, *a, *io);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "div");
  }
  auto bo = empty(Dims{2, 3}, DType::Bool);
  EXPECT_THROW(add_out(*a, *a, *bo), Error);  // float -> bool not allowed
  auto b1 = zeros(Dims{2, 3}, DType::Bool);
  try {
    sub_out(*b1, *b1, *bo);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "sub");
  }
  auto c = zeros(Dims{4}, DType::Float32);
  try {
    auto o = empty(Dims{2, 3}, DType::Bool);
    lt_out(*a, *c, *o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "lt");
    EXPECT_NE(std::string(e.what()).find("do not broadcast"), std::string::npos) << e.what();
  }
}

TEST(ElementwiseBinary, LogicalNot) {
  for (DType dt : kAllDTypes) {
    auto x = make_input(Dims{3, 11}, dt, Layout::Transposed, ints(-1, 1));
    auto out = empty(Dims{3, 11}, DType::Bool);
    logical_not_out(*x, *out);
    expect_matches(*out, [&](const Dims& i) -> double { return read_idx(*x, i) == 0; },
                   std::string("logical_not ") + std::string(dtype_name(dt)), {0, 0});
  }
  auto f = make_input(Dims{4}, DType::Float32, Layout::Contiguous, uniform(-1, 1));
  write_at(*f, 0, std::nan(""));
  auto out = empty(Dims{4}, DType::Bool);
  logical_not_out(*f, *out);
  EXPECT_EQ(read_at(*out, 0), 0);  // NaN is truthy
}

// ==== ternary ===================================================================================

TEST(ElementwiseTernary, WhereBroadcastsThreeWays) {
  for (DType dt : kAllDTypes) {
    for (DType cdt : {DType::Bool, DType::Float32, DType::UInt8}) {
      auto c = make_input(Dims{3, 1, 1}, cdt, Layout::Contiguous, ints(0, 1));
      auto a = make_input(Dims{1, 4, 1}, dt, Layout::Contiguous, ints(-3, 3));
      auto b = make_input(Dims{13}, dt, Layout::Stepped, ints(-3, 3));
      auto out = empty(Dims{3, 4, 13}, dt);
      where_out(*c, *a, *b, *out);
      expect_matches(*out,
                     [&](const Dims& i) {
                       return read_bcast(*c, i) != 0 ? read_bcast(*a, i) : read_bcast(*b, i);
                     },
                     std::string("where ") + std::string(dtype_name(dt)), {0, 0});
    }
  }
  // Mixed dtypes promote; scalar forms; 0-dim; empty.
  auto c = make_input(Dims{5, 6}, DType::Bool, Layout::Transposed, ints(0, 1));
  auto a = make_input(Dims{5, 6}, DType::Int32, Layout::Contiguous, ints(-3, 3));
  auto b = make_input(Dims{}, DType::Float64, Layout::Contiguous, uniform(-3, 3));
  auto w = where(*c, *a, *b);
  EXPECT_EQ(w->dtype(), DType::Float64);
  expect_matches(*w,
                 [&](const Dims& i) { return read_idx(*c, i) ? read_idx(*a, i) : read_at(*b, 0); },
                 "where mixed", {0, 0});
  auto out = empty(Dims{5, 6}, DType::Float32);
  where_out(*c, *a, Scalar(0.5), *out);
  expect_matches(*out, [&](const Dims& i) { return read_idx(*c, i) ? read_idx(*a, i) : 0.5; },
                 "where tensor/scalar", {0, 0});
  auto outi = empty(Dims{5, 6}, DType::Int64);
  where_out(*c, Scalar(1), Scalar(-1), *outi);
  expect_matches(*outi, [&](const Dims& i) { return read_idx(*c, i) ? 1.0 : -1.0; },
                 "where scalars", {0, 0});
  auto e = zeros(Dims{0, 4}, DType::Bool);
  auto a4 = zeros(Dims{4}, DType::Int32);
  auto eo = empty(Dims{0, 4}, DType::Int32);
  where_out(*e, *a4, Scalar(2), *eo);
  auto c0 = make_input(Dims{}, DType::Bool, Layout::Contiguous, ints(0, 1));
  auto a0 = make_input(Dims{}, DType::Float32, Layout::Contiguous, uniform(-1, 1));
  auto o0 = empty(Dims{}, DType::Float32);
  where_out(*c0, *a0, Scalar(7.0), *o0);
  EXPECT_EQ(read_at(*o0, 0), read_at(*c0, 0) ? read_at(*a0, 0) : 7.0);
}

TEST(ElementwiseTernary, ClampScalarAndTensorBounds) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dt : kAllDTypes) {
    if (dt == DType::Bool) continue;
    auto x = make_input(Dims{4, 9}, dt, Layout::Transposed, ints(-6, 6));
    const DType rdt = dt;
    auto out = empty(Dims{4, 9}, rdt);
    const double lo = dt == DType::UInt8 ? 2 : -2;
    clamp_out(*x, Scalar(static_cast<int>(lo)), Scalar(3), *out);
    expect_matches(*out, [&](const Dims& i) { return std::clamp(read_idx(*x, i), lo, 3.0); },
                   std::string("clamp ") + std::string(dtype_name(dt)), {0, 0});
    clamp_out(*x, std::nullopt, Scalar(1), *out);
    expect_matches(*out, [&](const Dims& i) { return std::min(read_idx(*x, i), 1.0); },
                   "clamp max only", {0, 0});
    clamp_out(*x, Scalar(4), Scalar(1), *out);  // lo > hi: everything becomes hi
    expect_matches(*out, [&](const Dims&) { return 1.0; }, "clamp lo>hi", {0, 0});
  }
  // Int tensor with float bounds computes in float32 (PyTorch's promotion).
  auto xi = make_input(Dims{10}, DType::Int32, Layout::Contiguous, ints(-5, 5));
  auto fo = empty(Dims{10}, DType::Float32);
  clamp_out(*xi, Scalar(-1.5), Scalar(2.5), *fo);
  expect_matches(*fo, [&](const Dims& i) { return std::clamp(read_idx(*xi, i), -1.5, 2.5); },
                 "clamp int with float bounds", {0, 0});
  auto io = empty(Dims{10}, DType::Int32);
  EXPECT_THROW(clamp_out(*xi, Scalar(-1.5), Scalar(2.5), *io), Error);
  // NaN input propagates; NaN bound gives NaN.
  auto f = empty(Dims{3}, DType::Float32);
  write_at(*f, 0, nan);
  write_at(*f, 1, 5);
  write_at(*f, 2, -5);
  auto o = empty(Dims{3}, DType::Float32);
  clamp_out(*f, Scalar(-1), Scalar(1), *o);
  EXPECT_TRUE(std::isnan(read_at(*o, 0)));
  EXPECT_EQ(read_at(*o, 1), 1);
  EXPECT_EQ(read_at(*o, 2), -1);
  clamp_out(*f, Scalar(nan), Scalar(1), *o);
  EXPECT_TRUE(std::isnan(read_at(*o, 1)));
  // Tensor bounds with broadcasting.
  auto x = make_input(Dims{3, 8}, DType::Float32, Layout::Stepped, uniform(-4, 4));
  auto lo = make_input(Dims{3, 1}, DType::Float32, Layout::Contiguous, uniform(-2, 0));
  auto hi = make_input(Dims{8}, DType::Float64, Layout::Contiguous, uniform(0, 2));
  auto out = empty(Dims{3, 8}, DType::Float64);
  clamp_out(*x, lo.get(), hi.get(), *out);
  expect_matches(*out,
                 [&](const Dims& i) {
                   return std::min(std::max(read_idx(*x, i), read_bcast(*lo, i)),
                                   read_bcast(*hi, i));
                 },
                 "clamp tensor bounds", {0, 0});
  auto o32 = empty(Dims{3, 8}, DType::Float32);
  clamp_out(*x, lo.get(), nullptr, *o32);
  expect_matches(*o32, [&](const Dims& i) { return std::max(read_idx(*x, i), read_bcast(*lo, i)); },
                 "clamp tensor min only", {0, 0});
  clamp_(*x, Scalar(-0.5), Scalar(0.5));
  expect_matches(*x, [&](const Dims& i) { return std::clamp(read_idx(*x, i), -0.5, 0.5); },
                 "clamp_", {0, 0});
  try {
    clamp_out(*x, std::nullopt, std::nullopt, *o32);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "clamp");
  }
}

// ==== backward helpers ==========================================================================

TEST(ElementwiseBackward, MatchFloat64Derivatives) {
  const double kS2 = std::sqrt(2.0), kSp = std::sqrt(2 / M_PI);
  auto gelu = [&](double x) { return 0.5 * x * (1 + std::erf(x / kS2)); };
  auto gelu_t = [&](double x) {
    return 0.5 * x * (1 + std::tanh(kSp * (x + 0.044715 * x * x * x)));
  };
  auto silu = [](double x) { return x / (1 + std::exp(-x)); };
  // Central differences in float64 as the independent reference for the smooth ones.
  auto deriv = [](const std::function<double(double)>& f, double x) {
    const double h = 1e-5;
    return (f(x + h) - f(x - h)) / (2 * h);
  };
  for (DType dt : kFloatDTypes) {
    for (Layout l : {Layout::Contiguous, Layout::Transposed, Layout::Stepped}) {
      const Dims shape{5, 21};
      auto g = make_input(shape, dt, l, uniform(-2, 2));
      auto x = make_input(shape, dt, Layout::Contiguous, uniform(-5, 5));
      auto y = make_input(shape, dt, Layout::Stepped, uniform(-1, 1));  // plays sigmoid/tanh out
      auto gi = empty(shape, dt);
      Tol t = tol_for(dt);
      t.rtol = std::max(t.rtol, 1e-5);
      t.atol = dt == DType::Float64 ? 1e-9 : dt == DType::Float32 ? 1e-6 : t.atol + 1e-3;
      const std::string sfx = std::string(" ") + std::string(dtype_name(dt)) + " " + layout_name(l);
      auto G = [&](const Dims& i) { return read_idx(*g, i); };
      auto X = [&](const Dims& i) { return read_idx(*x, i); };
      auto Y = [&](const Dims& i) { return read_idx(*y, i); };
      auto R = [&](double v) { return round_to(dt, v); };

      relu_backward_out(*g, *x, *gi);
      expect_matches(*gi, [&](const Dims& i) { return X(i) > 0 ? G(i) : 0.0; }, "relu_bwd" + sfx,
                     {0, 0});
      threshold_backward_out(*g, *x, 1.0, *gi);
      expect_matches(*gi, [&](const Dims& i) { return X(i) > 1 ? G(i) : 0.0; },
                     "threshold_bwd" + sfx, {0, 0});
      leaky_relu_backward_out(*g, *x, 0.25, *gi);
      expect_matches(
          *gi, [&](const Dims& i) { return R(X(i) > 0 ? G(i) : G(i) * 0.25); }, "leaky_bwd" + sfx,
          t);
      hardtanh_backward_out(*g, *x, -1, 2, *gi);
      expect_matches(*gi, [&](const Dims& i) { return X(i) <= -1 || X(i) >= 2 ? 0.0 : G(i); },
                     "hardtanh_bwd" + sfx, {0, 0});
      sigmoid_backward_out(*g, *y, *gi);
      expect_matches(
          *gi, [&](const Dims& i) { return R(G(i) * Y(i) * (1 - Y(i))); }, "sigmoid_bwd" + sfx, t);
      tanh_backward_out(*g, *y, *gi);
      expect_matches(
          *gi, [&](const Dims& i) { return R(G(i) * (1 - Y(i) * Y(i))); }, "tanh_bwd" + sfx, t);
      silu_backward_out(*g, *x, *gi);
      expect_matches(
          *gi, [&](const Dims& i) { return R(G(i) * deriv(silu, X(i))); }, "silu_bwd" + sfx, t);
      gelu_backward_out(*g, *x, GeluApproximate::None, *gi);
      expect_matches(
          *gi, [&](const Dims& i) { return R(G(i) * deriv(gelu, X(i))); }, "gelu_bwd" + sfx, t);
      gelu_backward_out(*g, *x, GeluApproximate::Tanh, *gi);
      expect_matches(
          *gi, [&](const Dims& i) { return R(G(i) * deriv(gelu_t, X(i))); }, "gelu_tanh_bwd" + sfx,
          t);
    }
  }
  // Broadcast saved tensor and in-place into grad.
  auto g = make_input(Dims{4, 6}, DType::Float32, Layout::Contiguous, uniform(-2, 2));
  auto g0 = empty(Dims{4, 6}, DType::Float32);
  copy_(*g0, *g);
  auto x = make_input(Dims{6}, DType::Float32, Layout::Contiguous, uniform(-2, 2));
  silu_backward_out(*g, *x, *g);
  expect_matches(*g,
                 [&](const Dims& i) { return read_idx(*g0, i) * deriv(silu, read_bcast(*x, i)); },
                 "silu_bwd in place broadcast", {1e-5, 1e-6});
  auto bad = empty(Dims{4, 7}, DType::Float32);
  try {
    gelu_backward_out(*g, *x, GeluApproximate::None, *bad);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "gelu_backward");
  }
}

// ==== threading =================================================================================

TEST(ElementwiseThreads, MultiThreadedMatchesSingleThreadBitwise) {
  const int saved = num_threads();
  const Dims shape{300, 1001};  // > kParallelGrain elements, rows not a multiple of the vector
  auto a = make_input(shape, DType::Float32, Layout::Contiguous, uniform(-4, 4));
  auto b = make_input(Dims{1001}, DType::Float32, Layout::Contiguous, uniform(0.5, 4));
  auto at = make_input(shape, DType::Float32, Layout::Transposed, uniform(-4, 4));
  auto h = make_input(shape, DType::Float16, Layout::Contiguous, uniform(-4, 4));
  auto c = make_input(shape, DType::Bool, Layout::Contiguous, ints(0, 1));
  using Fn = std::function<void(TensorImpl&)>;
  const std::vector<std::pair<std::string, Fn>> ops = {
      {"add", [&](TensorImpl& o) { add_out(*a, *b, o, 0.3); }},
      {"div", [&](TensorImpl& o) { div_out(*a, *b, o); }},
      {"exp", [&](TensorImpl& o) { exp_out(*a, o); }},
      {"gelu", [&](TensorImpl& o) { gelu_out(*a, o); }},
      {"tanh transposed", [&](TensorImpl& o) { tanh_out(*at, o); }},
      {"sigmoid f16", [&](TensorImpl& o) { sigmoid_out(*h, o); }},
      {"sin", [&](TensorImpl& o) { sin_out(*a, o); }},
      {"mul f16*f32", [&](TensorImpl& o) { mul_out(*h, *at, o); }},
      {"where", [&](TensorImpl& o) { where_out(*c, *a, *at, o); }},
      {"gelu_backward",
       [&](TensorImpl& o) { gelu_backward_out(*at, *a, GeluApproximate::None, o); }},
      {"pow", [&](TensorImpl& o) { pow_out(*b, *a, o); }},
  };
  for (const auto& [name, fn] : ops) {
    auto o1 = empty(shape, DType::Float32);
    auto o2 = empty(shape, DType::Float32);
    set_num_threads(1);
    fn(*o1);
    set_num_threads(2);
    fn(*o2);
    EXPECT_EQ(std::memcmp(o1->data(), o2->data(), o1->nbytes()), 0) << name;
  }
  set_num_threads(saved);
}

// Outputs of >= 16 MiB take the non-temporal store path; it must give the same bits as the
// cached path (exercised on sub-16 MiB slices), including for a misaligned output.
TEST(ElementwiseThreads, StreamingStoresMatchCachedPath) {
  const int64_t n = (int64_t{17} << 20) / 4 + 7;  // just over 17 MiB of float32
  auto a = empty(Dims{n}, DType::Float32);
  auto b = empty(Dims{n}, DType::Float32);
  float* pa = a->data_ptr<float>();
  float* pb = b->data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    pa[i] = static_cast<float>((i * 7919) % 1000) * 0.01f - 5.0f;
    pb[i] = static_cast<float>((i * 104729) % 997) * 0.003f + 0.5f;
  }
  auto big = empty(Dims{n + 1}, DType::Float32);
  auto out = views::slice(*big, 0, 1, n + 1);  // 4 bytes past a 64-byte boundary
  auto ref = empty(Dims{n}, DType::Float32);
  const int64_t chunk = int64_t{1} << 20;
  using Fn = std::function<void(const TensorImpl&, const TensorImpl&, TensorImpl&)>;
  const std::vector<std::pair<std::string, Fn>> ops = {
      {"add", [](const TensorImpl& x, const TensorImpl& y, TensorImpl& o) { add_out(x, y, o); }},
      {"sigmoid", [](const TensorImpl& x, const TensorImpl&, TensorImpl& o) { sigmoid_out(x, o); }},
      {"maximum",
       [](const TensorImpl& x, const TensorImpl& y, TensorImpl& o) { maximum_out(x, y, o); }},
  };
  for (const auto& [name, fn] : ops) {
    fn(*a, *b, *out);
    for (int64_t s = 0; s < n; s += chunk) {
      const int64_t e = std::min(n, s + chunk);
      auto ra = views::slice(*a, 0, s, e), rb = views::slice(*b, 0, s, e);
      auto ro = views::slice(*ref, 0, s, e);
      fn(*ra, *rb, *ro);
    }
    EXPECT_EQ(std::memcmp(out->data(), ref->data(), static_cast<size_t>(n) * 4), 0) << name;
  }
  // In place on a streaming-size tensor.
  std::memcpy(ref->data(), a->data(), static_cast<size_t>(n) * 4);
  mul_(*a, *b);
  for (int64_t i = 0; i < n; i += 4099) EXPECT_EQ(pa[i], ref->data_ptr<float>()[i] * pb[i]) << i;
}

// Transposed operands go through the tiled loop (rows in tiles so strided lines are reused).
TEST(ElementwiseBinary, TransposedOperandsTiled) {
  for (const Dims& shape : {Dims{37, 300}, Dims{3, 33, 65}, Dims{64, 64}}) {
    auto a = make_input(shape, DType::Float32, Layout::Transposed, uniform(-3, 3));
    auto b = make_input(shape, DType::Float16, Layout::Contiguous, uniform(-3, 3));
    auto out = empty(shape, DType::Float32);
    sub_out(*a, *b, *out);
    expect_matches(
        *out, [&](const Dims& i) { return read_idx(*a, i) - read_idx(*b, i); }, "sub tiled",
        tol_for(DType::Float32));
    // Transposed output, contiguous input: dims reordered by the output's strides.
    auto ob = make_input(shape, DType::Float32, Layout::Transposed, uniform(0, 1));
    exp_out(*b, *ob);
    expect_matches(
        *ob, [&](const Dims& i) { return std::exp(read_idx(*b, i)); }, "exp into transposed",
        tol_for(DType::Float32));
  }
}
