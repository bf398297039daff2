// Autograd: hand-computed gradients, finite-difference checks for every differentiable op
// family, in-place safety, hooks, graph lifetime and memory.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kiln/gradcheck.h"
#include "kiln/kiln.h"
#include "kiln/runtime/allocator.h"

using namespace kiln;
using autograd::gradcheck;
using autograd::gradgradcheck;

namespace {

Tensor rand_f64(Dims sizes, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<float> v;
  Tensor t = kiln::empty(sizes, TensorOptions(DType::Float64));
  double* p = t.data_ptr<double>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(gen);
  return t;
}

Tensor leaf(Dims sizes, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  return rand_f64(sizes, seed, lo, hi).requires_grad_();
}

double at(const Tensor& t, int64_t i) {
  return t.contiguous().reshape({-1}).select(0, i).item<double>();
}

#define EXPECT_GRADCHECK(fn, ...)                    \
  do {                                               \
    auto r = gradcheck(fn, TensorList{__VA_ARGS__}); \
    EXPECT_TRUE(r.ok) << r.message;                  \
  } while (0)

}  // namespace

TEST(Autograd, HandComputedLinearGradient) {
  // y = sum(w * x + b): dy/dw = x, dy/dx = w, dy/db = numel broadcast count.
  Tensor x = tensor({1.0, 2.0, 3.0}, DType::Float64).requires_grad_();
  Tensor w = tensor({0.5, -1.0, 2.0}, DType::Float64).requires_grad_();
  Tensor b = scalar_tensor(0.25, DType::Float64).requires_grad_();
  Tensor y = sum(w * x + b);
  EXPECT_DOUBLE_EQ(y.item<double>(), 0.5 - 2.0 + 6.0 + 0.75);
  y.backward();
  for (int i = 0; i < 3; ++i) {
    EXPECT_DOUBLE_EQ(at(w.grad(), i), at(x, i));
    EXPECT_DOUBLE_EQ(at(x.grad(), i), at(w, i));
  }
  EXPECT_DOUBLE_EQ(b.grad().item<double>(), 3.0);
  EXPECT_TRUE(x.is_leaf());
  EXPECT_FALSE(y.is_leaf());
  EXPECT_EQ(y.grad_fn()->name(), "SumBackward");
}

TEST(Autograd, GradientsAccumulateWhenUsedTwice) {
  Tensor x = leaf({3}, 1);
  Tensor y = sum(x * 2.0) + sum(x * 3.0);
  y.backward();
  for (int i = 0; i < 3; ++i) EXPECT_DOUBLE_EQ(at(x.grad(), i), 5.0);
  Tensor z = sum(x);
  z.backward();  // accumulates into the existing .grad
  for (int i = 0; i < 3; ++i) EXPECT_DOUBLE_EQ(at(x.grad(), i), 6.0);
}

TEST(Autograd, BinaryOpsWithBroadcasting) {
  auto fn_add = [](const TensorList& v) { return TensorList{add(v[0], v[1], 0.5)}; };
  EXPECT_GRADCHECK(fn_add, leaf({2, 3}, 1), leaf({3}, 2));
  auto fn_sub = [](const TensorList& v) { return TensorList{sub(v[0], v[1])}; };
  EXPECT_GRADCHECK(fn_sub, leaf({2, 1}, 3), leaf({1, 4}, 4));
  auto fn_mul = [](const TensorList& v) { return TensorList{v[0] * v[1]}; };
  EXPECT_GRADCHECK(fn_mul, leaf({3, 1, 2}, 5), leaf({4, 1}, 6));
  auto fn_div = [](const TensorList& v) { return TensorList{v[0] / v[1]}; };
  EXPECT_GRADCHECK(fn_div, leaf({2, 3}, 7), leaf({3}, 8, 0.5, 2.0));
  auto fn_pow = [](const TensorList& v) { return TensorList{pow(v[0], v[1])}; };
  EXPECT_GRADCHECK(fn_pow, leaf({2, 3}, 9, 0.5, 2.0), leaf({2, 3}, 10));
  auto fn_max = [](const TensorList& v) {
    return TensorList{maximum(v[0], v[1]), minimum(v[0], v[1])};
  };
  EXPECT_GRADCHECK(fn_max, leaf({4}, 11), leaf({2, 1}, 12));
  auto fn_where = [](const TensorList& v) { return TensorList{where(v[0] > 0.0, v[0], v[1])}; };
  EXPECT_GRADCHECK(fn_where, leaf({2, 3}, 13), leaf({3}, 14));
  auto fn_scalar = [](const TensorList& v) {
    return TensorList{2.0 - v[0] * 3.0 + 1.5, 2.0 / v[1], pow(v[1], 2.5)};
  };
  EXPECT_GRADCHECK(fn_scalar, leaf({3}, 15), leaf({3}, 16, 0.5, 2.0));
}

TEST(Autograd, UnaryOps) {
  std::vector<std::pair<const char*, std::function<Tensor(const Tensor&)>>> ops = {
      {"neg", [](const Tensor& x) { return -x; }},
      {"abs", [](const Tensor& x) { return abs(x); }},
      {"exp", [](const Tensor& x) { return exp(x); }},
      {"log", [](const Tensor& x) { return log(abs(x) + 0.5); }},
      {"log1p", [](const Tensor& x) { return log1p(abs(x)); }},
      {"sqrt", [](const Tensor& x) { return sqrt(abs(x) + 0.5); }},
      {"rsqrt", [](const Tensor& x) { return rsqrt(abs(x) + 0.5); }},
      {"sin", [](const Tensor& x) { return sin(x); }},
      {"cos", [](const Tensor& x) { return cos(x); }},
      {"tanh", [](const Tensor& x) { return tanh(x); }},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }},
      {"relu", [](const Tensor& x) { return relu(x); }},
      {"gelu", [](const Tensor& x) { return gelu(x); }},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, true); }},
      {"silu", [](const Tensor& x) { return silu(x); }},
      {"erf", [](const Tensor& x) { return erf(x); }},
      {"reciprocal", [](const Tensor& x) { return reciprocal(abs(x) + 0.5); }},
      {"leaky_relu", [](const Tensor& x) { return leaky_relu(x, 0.2); }},
      {"clamp", [](const Tensor& x) { return clamp(x, -0.5, 0.4); }},
  };
  for (auto& [name, op] : ops) {
    // Keep away from kinks (|x| >= 0.05) so central differences are valid.
    Tensor x = rand_f64({7}, 21);
    x = where(abs(x) < 0.05, x + 0.1, x).detach().requires_grad_();
    auto r = gradcheck([&](const TensorList& v) { return TensorList{op(v[0])}; }, {x});
    EXPECT_TRUE(r.ok) << name << ": " << r.message;
  }
}

TEST(Autograd, Reductions) {
  auto fn = [](const TensorList& v) {
    const Tensor& x = v[0];
    return TensorList{
        sum(x),           sum(x, {1}),       mean(x, {0, 2}, true), prod(x, Dims{1}),
        amax(x, Dims{2}), var(x, Dims{1}),   norm(x, 2.0, Dims{2}), logsumexp(x, Dims{1}),
        softmax(x, 2),    log_softmax(x, 1), cumsum(x, 1)};
  };
  EXPECT_GRADCHECK(fn, leaf({2, 3, 4}, 31));
  auto fn_max = [](const TensorList& v) {
    return TensorList{max(v[0], 1).first, min(v[0], 0).first};
  };
  EXPECT_GRADCHECK(fn_max, leaf({3, 5}, 32));
  auto fn_std = [](const TensorList& v) {
    return TensorList{kiln::std(v[0], Dims{0}, false), norm(v[0], 1.0), norm(v[0], 3.0, Dims{1})};
  };
  EXPECT_GRADCHECK(fn_std, leaf({4, 3}, 33));
  // prod with a zero in the group.
  Tensor z = tensor({{0.0, 2.0, 3.0}, {1.5, 0.0, 0.0}}, DType::Float64).requires_grad_();
  EXPECT_GRADCHECK([](const TensorList& v) { return TensorList{prod(v[0], Dims{1})}; }, z);
}

TEST(Autograd, ViewsAndIndexing) {
  auto fn = [](const TensorList& v) {
    const Tensor& x = v[0];
    return TensorList{x.transpose(0, 2) * 2.0,
                      x.permute({1, 2, 0}).reshape({3, 8}),
                      x.slice(2, 1, 4, 2),
                      x.select(1, -1),
                      x.narrow(0, 1, 1).squeeze(0),
                      x.view({6, 4}).unsqueeze(1),
                      x.index({Slice(), 1, Slice(std::nullopt, std::nullopt, 3)}),
                      x.flatten(1).t()};
  };
  EXPECT_GRADCHECK(fn, leaf({2, 3, 4}, 41));
  auto fn_expand = [](const TensorList& v) { return TensorList{v[0].expand({4, 2, 3}) * 1.0}; };
  EXPECT_GRADCHECK(fn_expand, leaf({2, 1}, 42));
  // Non-contiguous input to an op.
  auto fn_nc = [](const TensorList& v) { return TensorList{exp(v[0].t()) * v[0].t()}; };
  EXPECT_GRADCHECK(fn_nc, leaf({3, 2}, 43));
}

TEST(Autograd, TypeConversionsCarryGradients) {
  auto fn = [](const TensorList& v) {
    return TensorList{v[0].to(DType::Float32).to(DType::Float64) * 3.0};
  };
  auto r = gradcheck(fn, {leaf({3}, 44)}, {1e-3, 1e-4, 1e-3});
  EXPECT_TRUE(r.ok) << r.message;
  Tensor x = leaf({3}, 45);
  EXPECT_FALSE(x.to(DType::Int64).requires_grad());
}

TEST(Autograd, DoubleBackward) {
  auto square_exp = [](const TensorList& v) { return TensorList{exp(v[0]) * v[0] * v[0]}; };
  auto r = gradgradcheck(square_exp, {leaf({4}, 51)});
  EXPECT_TRUE(r.ok) << r.message;
  auto tanh_sig = [](const TensorList& v) { return TensorList{tanh(v[0]) * sigmoid(v[1])}; };
  r = gradgradcheck(tanh_sig, {leaf({3}, 52), leaf({3}, 53)});
  EXPECT_TRUE(r.ok) << r.message;
  auto soft = [](const TensorList& v) {
    return TensorList{softmax(v[0], 1), log_softmax(v[0], 0)};
  };
  r = gradgradcheck(soft, {leaf({2, 3}, 54)});
  EXPECT_TRUE(r.ok) << r.message;
  // d²/dx² of x³ = 6x, by hand.
  Tensor x = tensor({2.0}, DType::Float64).requires_grad_();
  Tensor y = pow(x, 3.0);
  Tensor g = autograd::grad({y}, {x}, {}, false, /*create_graph=*/true)[0];
  EXPECT_DOUBLE_EQ(g.item<double>(), 12.0);
  Tensor gg = autograd::grad({g}, {x})[0];
  EXPECT_DOUBLE_EQ(gg.item<double>(), 12.0);
}

TEST(Autograd, ClassicInPlaceCase) {
  // x = ones(5,5), y = ones(5,5)*4 (both requiring grad); z = x*y; q = z*y; r = z+y; z.add_(y).
  Tensor x = ones({5, 5}).requires_grad_();
  Tensor y = (ones({5, 5}) * 4.0).detach().requires_grad_();
  Tensor z = x * y;
  Tensor q = z * y;
  Tensor r = z + y;
  add_(z, y);
  EXPECT_NO_THROW(z.backward(ones({5, 5})));
  EXPECT_NO_THROW(r.backward(ones({5, 5})));
  try {
    q.backward(ones({5, 5}));
    FAIL() << "q.backward must refuse the modified z";
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "MulBackward");
    EXPECT_NE(std::string(e.what()).find("version 0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("version 1"), std::string::npos) << e.what();
  }
  // z's gradient into x: through z = x*y then z += y -> dz/dx = y = 4.
  EXPECT_FLOAT_EQ(at(x.grad(), 0), 4.0f + 4.0f);  // z.backward and r.backward each add 4
}

TEST(Autograd, InPlaceOnLeafIsRefusedOutsideNoGrad) {
  Tensor w = ones({3}).requires_grad_();
  EXPECT_THROW(add_(w, 1.0), Error);
  {
    autograd::NoGradGuard guard;
    EXPECT_NO_THROW(add_(w, 1.0));
  }
  EXPECT_FLOAT_EQ(at(w, 0), 2.0f);
  Tensor v = w * 1.0;
  Tensor view = v.slice(0, 0, 2);
  EXPECT_THROW(mul_(view, 2.0), Error);
}

TEST(Autograd, InPlaceOpsHaveGradients) {
  auto fn = [](const TensorList& v) {
    Tensor a = v[0] * 1.0;
    mul_(a, v[1]);
    add_(a, v[1], 0.5);
    div_(a, v[1] + 2.0);
    relu_(a);
    return TensorList{a};
  };
  EXPECT_GRADCHECK(fn, leaf({4}, 61), leaf({4}, 62, 0.5, 1.0));
}

TEST(Autograd, RetainGraphAndSecondBackward) {
  Tensor x = leaf({3}, 71);
  Tensor y = sum(exp(x));
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(at(x.grad(), i), 2 * std::exp(at(x, i)), 1e-12);
  try {
    y.backward();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("second time"), std::string::npos) << e.what();
  }
}

TEST(Autograd, HooksCanReplaceGradients) {
  Tensor x = leaf({3}, 81);
  Tensor y = x * 2.0;
  int calls = 0;
  y.register_hook([&](const Tensor& g) -> std::optional<Tensor> {
    ++calls;
    return g * 10.0;
  });
  const size_t h = x.register_hook([&](const Tensor& g) -> std::optional<Tensor> {
    ++calls;
    return std::nullopt;
  });
  sum(y).backward();
  EXPECT_EQ(calls, 2);
  EXPECT_DOUBLE_EQ(at(x.grad(), 0), 20.0);
  x.remove_hook(h);
  x.set_grad(Tensor());
  sum(x * 1.0).backward();
  EXPECT_EQ(calls, 2);
}

TEST(Autograd, RetainGradOnNonLeaf) {
  Tensor x = leaf({2}, 91);
  Tensor y = x * 3.0;
  y.retain_grad();
  Tensor z = sum(y * y);
  z.backward();
  ASSERT_TRUE(y.grad().defined());
  EXPECT_NEAR(at(y.grad(), 1), 2 * at(y, 1), 1e-12);
}

TEST(Autograd, GradFunctionDoesNotTouchLeafGrad) {
  Tensor x = leaf({3}, 101);
  Tensor w = leaf({3}, 102);
  Tensor y = sum(x * w);
  auto g = autograd::grad({y}, {x});
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(w.grad().defined());
  EXPECT_DOUBLE_EQ(at(g[0], 2), at(w, 2));
  Tensor unused = leaf({1}, 103);
  Tensor y2 = sum(x * w);
  EXPECT_THROW(autograd::grad({y2}, {unused}), Error);
}

TEST(Autograd, NoGradAndInferenceMode) {
  Tensor x = leaf({3}, 111);
  {
    autograd::NoGradGuard guard;
    Tensor y = x * 2.0;
    EXPECT_FALSE(y.requires_grad());
    {
      autograd::EnableGradGuard enable;
      EXPECT_TRUE((x * 2.0).requires_grad());
    }
  }
  {
    autograd::InferenceMode mode;
    EXPECT_FALSE((x * 2.0).requires_grad());
  }
  EXPECT_TRUE((x * 2.0).requires_grad());
}

TEST(Autograd, ErrorsAreClear) {
  Tensor x = ones({3});
  try {
    x.backward();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "backward");
  }
  Tensor y = leaf({2, 2}, 121) * 1.0;
  EXPECT_THROW(y.backward(), Error);  // non-scalar without grad_output
  EXPECT_THROW(y.backward(ones({3}, DType::Float64)), Error);
  EXPECT_THROW(ones({2}, DType::Int64).requires_grad_(), Error);
}

TEST(Autograd, IntermediatesAreFreedBeforeBackward) {
  // y = W·x + M·h: backward needs W, x, M, h (saved inputs) but not the products, so once the
  // addition is done only the inputs and y stay alive.
  Tensor W = kiln::full({256, 256}, 0.5).requires_grad_();
  Tensor M = kiln::full({256, 256}, 0.25).requires_grad_();
  Tensor x = kiln::full({256, 64}, 1.0);
  Tensor h = kiln::full({256, 64}, 2.0);
  auto& alloc = cpu_allocator();
  const int64_t before = alloc.stats().bytes_in_use;
  alloc.reset_peak();
  Tensor y = matmul(W, x) + matmul(M, h);
  const int64_t product_bytes = 256 * 64 * 4;
  EXPECT_EQ(alloc.stats().bytes_in_use - before, product_bytes);  // only y
  EXPECT_EQ(alloc.stats().peak_bytes - before, 3 * product_bytes);
  sum(y).backward();
  EXPECT_NEAR(W.grad().index({0, 0}).item<double>(), 64.0, 1e-4);  // sum over x's row of ones
  EXPECT_NEAR(M.grad().index({3, 5}).item<double>(), 128.0, 1e-4);
}

TEST(Tensor, PrintsValuesShapeAndDtype) {
  Tensor t = tensor({{1.0, 2.5}, {-3.0, 4.0}});
  const std::string s = to_string(t);
  EXPECT_NE(s.find("1.0000"), std::string::npos) << s;
  EXPECT_NE(s.find("-3.0000"), std::string::npos) << s;
  EXPECT_NE(s.find("shape=[2, 2]"), std::string::npos) << s;
  EXPECT_NE(s.find("dtype=float32"), std::string::npos) << s;
  const std::string big = to_string(arange(0, 5000, 1, DType::Int64));
  EXPECT_NE(big.find("..."), std::string::npos);
  EXPECT_LT(big.size(), 200u);
  EXPECT_NE(to_string(leaf({1}, 1) * 2.0).find("grad_fn=<MulBackward>"), std::string::npos);
}

TEST(Tensor, FactoriesAndItem) {
  EXPECT_EQ(zeros({2, 3}).sizes(), (Dims{2, 3}));
  EXPECT_EQ(ones({2}, DType::Int32).dtype(), DType::Int32);
  EXPECT_DOUBLE_EQ(full({1}, 2.5).item<double>(), 2.5);
  Tensor a = arange(0, 1, 0.25, DType::Float64);
  EXPECT_EQ(a.numel(), 4);
  EXPECT_DOUBLE_EQ(at(a, 3), 0.75);
  Tensor l = linspace(-1, 1, 5, DType::Float64);
  EXPECT_DOUBLE_EQ(at(l, 1), -0.5);
  EXPECT_DOUBLE_EQ(at(l, 4), 1.0);
  Tensor e = eye(3, 4);
  EXPECT_DOUBLE_EQ(at(e, 5), 1.0);
  EXPECT_DOUBLE_EQ(at(e, 6), 0.0);
  EXPECT_THROW(zeros({2}).item<float>(), Error);
  float buf[4] = {1, 2, 3, 4};
  Tensor b = from_blob(buf, Dims{2, 2});
  buf[3] = 9;
  EXPECT_FLOAT_EQ(b.index({1, 1}).item<float>(), 9.0f);
}

TEST(Tensor, FactoriesRefuseSizesBeyondInt64) {
  auto message = [](auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // (end - start) / step beyond int64: converting it would be undefined behaviour.
  EXPECT_NE(message([] { arange(0, 1e300, 1); }).find("arange: expected fewer than 2^62"),
            std::string::npos);
  EXPECT_NE(message([] { arange(0, 5, std::nan("")); }).find("finite non-zero step"),
            std::string::npos);
  // Zero-element parts whose concatenated size overflows.
  Tensor big = zeros({0, int64_t(1) << 62});
  EXPECT_NE(message([&] {
              cat({big, big}, 1);
            }).find("cat: the concatenated size overflows"),
            std::string::npos);
  EXPECT_NE(message([] {
              zeros({0, 3, int64_t(1) << 62});
            }).find("overflows int64"),
            std::string::npos);
}

TEST(Random, FactoriesAreSeededAndShaped) {
  manual_seed(7);
  Tensor a = rand({1000});
  manual_seed(7);
  Tensor b = rand({1000});
  EXPECT_EQ(amax(abs(a - b)).item<double>(), 0.0);
  EXPECT_GE(amin(a).item<double>(), 0.0);
  EXPECT_LT(amax(a).item<double>(), 1.0);
  Tensor n = randn({20000}, DType::Float64);
  EXPECT_NEAR(mean(n).item<double>(), 0.0, 0.05);
  EXPECT_NEAR(kiln::std(n).item<double>(), 1.0, 0.05);
  Tensor r = randint(3, 7, {1000});
  EXPECT_GE(amin(r).item<int64_t>(), 3);
  EXPECT_LE(amax(r).item<int64_t>(), 6);
  Tensor p = randperm(50);
  EXPECT_EQ(sum(p).item<int64_t>(), 49 * 50 / 2);
}

TEST(Random, DropoutScalesKeptElementsAndDifferentiates) {
  manual_seed(3);
  Tensor x = ones({10000}).requires_grad_();
  Tensor y = dropout(x, 0.25);
  const double kept = sum(gt(y, zeros_like(y)).to(DType::Float64)).item<double>();
  EXPECT_NEAR(kept / 10000.0, 0.75, 0.02);
  EXPECT_FLOAT_EQ(amax(y).item<float>(), 1.0f / 0.75f);
  sum(y).backward();
  // The gradient is the same mask and scale: grad == y for x == 1.
  EXPECT_EQ(amax(abs(x.grad() - y.detach())).item<double>(), 0.0);
  EXPECT_TRUE(dropout(x, 0.5, false).is_same(x));
}

TEST(Tensor, MethodFormsMatchFreeFunctions) {
  Tensor x = tensor({{1.0, -2.0}, {3.0, 4.0}}, DType::Float64).requires_grad_();
  EXPECT_DOUBLE_EQ(x.sum().item<double>(), 6.0);
  EXPECT_DOUBLE_EQ(x.mean({1}).index({1}).item<double>(), 3.5);
  EXPECT_DOUBLE_EQ(x.abs().max().item<double>(), 4.0);
  EXPECT_EQ(x.argmax(1).index({0}).item<int64_t>(), 0);
  EXPECT_DOUBLE_EQ(x.matmul(x).index({0, 0}).item<double>(), 1.0 - 6.0);
  Tensor y = x.mul(x).relu().sum();
  y.backward();
  EXPECT_DOUBLE_EQ(x.grad().index({0, 1}).item<double>(), -4.0);  // d/dx x^2 = 2x = -4
  Tensor z = zeros({3});
  z.add_(1.0).mul_(3.0);
  EXPECT_DOUBLE_EQ(z.sum().item<double>(), 9.0);
  z.zero_();
  EXPECT_DOUBLE_EQ(z.sum().item<double>(), 0.0);
}
