// kiln::jit::compile on elementwise chains, broadcasting, views, reductions and the MLP: outputs
// against float64 references and eager; guards; thread safety; compile-time diagnostics.
#include <gtest/gtest.h>

#include <malloc.h>

#include <cmath>
#include <thread>

#include "helpers.h"
#include "kiln/jit/compile.h"
#include "kiln/kiln.h"
#include "kiln/models.h"
#include "kiln/runtime/allocator.h"
#include "kiln/trace/freeze.h"
#include "kiln/trace/trace.h"

using namespace kiln;
using kiln::test::max_abs_diff;
using kiln::test::max_rel_error;
using kiln::test::rnd;

namespace {
jit::CompileOptions no_disk() {
  jit::CompileOptions o;
  o.disk_cache = false;
  return o;
}
}  // namespace

TEST(JitCompile, FusedChainMatchesNaiveFloat64Loop) {
  // relu(x*a+b)*c with a [N] row vector broadcast over rows: checked against a plain double loop,
  // on the traced inputs and on a second set (an op left out of the trace would replay as a
  // constant captured from the first).
  const int64_t R = 37, N = 129;
  Tensor x = rnd({R, N}, 1), a = rnd({N}, 2), b = rnd({R, 1}, 3);
  auto fn = [](const TensorList& t) { return TensorList{relu(t[0] * t[1] + t[2]) * 1.5}; };
  jit::TracedFunction traced = jit::trace(fn, {x, a, b});
  jit::CompiledFunction f = jit::compile(traced, no_disk());
  auto worst_error = [&](const Tensor& x, const Tensor& a, const Tensor& b) -> double {
    Tensor y = f({x, a, b})[0];
    EXPECT_EQ(y.sizes(), (Dims{R, N}));
    if (y.sizes() != Dims{R, N}) return INFINITY;
    const float *px = x.data_ptr<float>(), *pa = a.data_ptr<float>(), *pb = b.data_ptr<float>();
    double worst = 0;
    for (int64_t i = 0; i < R; ++i) {
      for (int64_t j = 0; j < N; ++j) {
        const double ref =
            std::max(0.0, double(px[i * N + j]) * double(pa[j]) + double(pb[i])) * 1.5;
        worst = std::max(worst, std::abs(ref - double(y.data_ptr<float>()[i * N + j])));
      }
    }
    return worst;
  };
  EXPECT_LE(worst_error(x, a, b), 1e-5);
  EXPECT_LE(worst_error(rnd({R, N}, 11), rnd({N}, 12), rnd({R, 1}, 13)), 1e-5) << "second inputs";
}

TEST(JitCompile, UnaryFamilyMatchesEager) {
  Tensor x = rnd({3, 50}, 4, 2.0);
  auto fn = [](const TensorList& t) {
    const Tensor& v = t[0];
    return TensorList{exp(v * 0.5),
                      log(abs(v) + 0.1),
                      tanh(v),
                      sigmoid(v),
                      silu(v),
                      gelu(v),
                      gelu(v, true),
                      erf(v),
                      sqrt(abs(v)),
                      rsqrt(abs(v) + 1),
                      sin(v),
                      cos(v),
                      neg(v),
                      floor(v),
                      ceil(v),
                      round(v),
                      sign(v),
                      reciprocal(v + 10),
                      log1p(abs(v)),
                      leaky_relu(v, 0.2),
                      clamp(v, -0.5, 0.7),
                      pow(v, 2.0),
                      maximum(v, v * 0.3)};
  };
  TensorList eager = fn({x});
  jit::TracedFunction traced = jit::trace(fn, {x});
  jit::CompiledFunction f = jit::compile(traced, no_disk());
  TensorList got = f({x});
  ASSERT_EQ(got.size(), eager.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_LE(max_rel_error(got[i], eager[i]), 1e-5) << "output " << i;
  }
  // A second input of other values.
  Tensor x2 = rnd({3, 50}, 14, 2.0);
  TensorList eager2 = fn({x2}), got2 = f({x2});
  ASSERT_EQ(got2.size(), eager2.size());
  for (size_t i = 0; i < got2.size(); ++i) {
    EXPECT_LE(max_rel_error(got2[i], eager2[i]), 1e-5) << "output " << i << " on the second input";
  }
}

TEST(JitCompile, ComparisonsWhereAndDtypesMatchEager) {
  Tensor x = rnd({4, 6}, 5), y = rnd({6}, 6);
  auto fn = [](const TensorList& t) {
    Tensor m = gt(t[0], t[1]);
    return TensorList{where(m, t[0], t[1]), m, logical_and(m, lt(t[0], full_like(t[0], 0.5))),
                      t[0].to(DType::Int64), (t[0] * 3).to(DType::Int32).to(DType::Float64)};
  };
  TensorList eager = fn({x, y});
  jit::CompiledFunction f = jit::compile(jit::trace(fn, {x, y}), no_disk());
  TensorList got = f({x, y});
  ASSERT_EQ(got.size(), eager.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].dtype(), eager[i].dtype()) << "output " << i;
    EXPECT_EQ(max_abs_diff(got[i], eager[i]), 0.0) << "output " << i;
  }
  // Second inputs of other values.
  Tensor x2 = rnd({4, 6}, 15), y2 = rnd({6}, 16);
  TensorList eager2 = fn({x2, y2}), got2 = f({x2, y2});
  ASSERT_EQ(got2.size(), eager2.size());
  for (size_t i = 0; i < got2.size(); ++i) {
    EXPECT_EQ(got2[i].dtype(), eager2[i].dtype()) << "output " << i << " on the second inputs";
    EXPECT_EQ(max_abs_diff(got2[i], eager2[i]), 0.0) << "output " << i << " on the second inputs";
  }
}

TEST(JitCompile, ViewsReductionsAndMatmulMatchEager) {
  Tensor x = rnd({4, 5, 6}, 7), w = rnd({6, 3}, 8);
  auto fn = [](const TensorList& t) {
    Tensor tr = t[0].transpose(0, 2);        // strided view feeding a loop
    Tensor s = t[0].slice(1, 1, 5, 2);       // strided slice
    Tensor r = (t[0] + 1).reshape({20, 6});  // reshape of a computed value
    Tensor m = matmul(r, t[1]);              // runtime GEMM
    return TensorList{tr * 2,
                      s,
                      sum(t[0], Dims{1}),
                      mean(t[0] * t[0], Dims{0, 2}, true),
                      m,
                      softmax(m, 1),
                      amax(t[0], Dims{2})};
  };
  TensorList eager = fn({x, w});
  jit::CompiledFunction f = jit::compile(jit::trace(fn, {x, w}), no_disk());
  TensorList got = f({x, w});
  ASSERT_EQ(got.size(), eager.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].sizes(), eager[i].sizes()) << "output " << i;
    EXPECT_LE(max_rel_error(got[i], eager[i]), 1e-5) << "output " << i;
  }
  // Second inputs of other values.
  Tensor x2 = rnd({4, 5, 6}, 17), w2 = rnd({6, 3}, 18);
  TensorList eager2 = fn({x2, w2}), got2 = f({x2, w2});
  ASSERT_EQ(got2.size(), eager2.size());
  for (size_t i = 0; i < got2.size(); ++i) {
    ASSERT_EQ(got2[i].sizes(), eager2[i].sizes()) << "output " << i << " on the second inputs";
    EXPECT_LE(max_rel_error(got2[i], eager2[i]), 1e-5) << "output " << i << " on the second inputs";
  }
}

TEST(JitCompile, MlpMatchesEagerAndRunsMany) {
  auto model = models::mlp({32, 64, 64, 10});
  model->eval();
  auto fn = [&](const TensorList& t) { return TensorList{model->forward(t[0])}; };
  Tensor x0 = rnd({8, 32}, 9);
  jit::CompiledFunction f = jit::compile(jit::trace(fn, {x0}), no_disk());
  for (uint32_t seed = 10; seed < 14; ++seed) {  // compile once, run many
    Tensor x = rnd({8, 32}, seed);
    Tensor eager;
    {
      autograd::NoGradGuard g;
      eager = model->forward(x);
    }
    EXPECT_LE(max_rel_error(f({x})[0], eager), 1e-5);
  }
}

TEST(JitCompile, ConcurrentCallsAreIndependent) {
  auto fn = [](const TensorList& t) { return TensorList{tanh(t[0] * 2 + 1) * t[0]}; };
  Tensor proto = rnd({300, 700}, 20);  // large enough to use the thread pool
  jit::CompiledFunction f = jit::compile(jit::trace(fn, {proto}), no_disk());
  std::vector<std::thread> threads;
  std::vector<double> errors(4, -1);
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      double worst = 0;
      for (int it = 0; it < 5; ++it) {
        Tensor x = rnd({300, 700}, 100 + k * 10 + it);
        worst = std::max(worst, max_rel_error(f({x})[0], fn({x})[0]));
      }
      errors[k] = worst;
    });
  }
  for (auto& t : threads) t.join();
  for (double e : errors) EXPECT_LE(e, 1e-5);
}

TEST(JitCompile, GuardsRejectWrongShapesAndDtypes) {
  auto fn = [](const TensorList& t) { return TensorList{t[0] + 1}; };
  jit::CompiledFunction f = jit::compile(jit::trace(fn, {rnd({2, 3}, 21)}), no_disk());
  try {
    f({rnd({3, 2}, 22)});
    FAIL() << "a wrong shape was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 3]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(f({rnd({2, 3}, 23).to(DType::Float64)}), Error);
  EXPECT_THROW(f({}), Error);
}

TEST(JitCompile, UnsupportedOpIsReportedAtCompileTimeWithItsPosition) {
  // float16 has no generated-code path: compile() must name the op and where it is, not run.
  auto fn = [](const TensorList& t) {
    Tensor h = relu(t[0]);
    return TensorList{h.to(DType::Float16)};
  };
  jit::TracedFunction traced = jit::trace(fn, {rnd({4}, 24)});
  try {
    jit::compile(traced, no_disk());
    FAIL() << "compiled an op it cannot lower";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("kiln.to"), std::string::npos) << m;
    EXPECT_NE(m.find("op #"), std::string::npos) << m;
    EXPECT_NE(m.find("f16"), std::string::npos) << m;
  }
}

TEST(JitCompile, SmallCapturedTensorsBecomeConstantGlobals) {
  // Captures of <= 16 elements are inlined into the trace as kiln.constant: f32, i64 and bool.
  Tensor scale = tensor({1.0, -2.0, 0.5}, DType::Float32);
  Tensor offset = tensor({3.0, 4.0, 5.0}, DType::Int64);
  Tensor mask = gt(tensor({1.0, -1.0, 1.0}), zeros({3}));
  auto fn = [&](const TensorList& t) {
    return TensorList{where(mask, t[0] * scale + offset, t[0])};
  };
  Tensor x = rnd({4, 3}, 25);
  jit::TracedFunction traced = jit::trace(fn, {x});
  EXPECT_NE(traced.str().find("kiln.constant dense<[1.000000e+00, -2.000000e+00"),
            std::string::npos)
      << traced.str();
  jit::CompiledFunction f = jit::compile(traced, no_disk());
  Tensor x2 = rnd({4, 3}, 26);
  EXPECT_LE(max_abs_diff(f({x2})[0], fn({x2})[0]), 1e-6);
}

// Destroying compiled code (the last CompiledFunction, the memory cache off) frees what its conv
// call sites prepared (here a Winograd-transformed weight of ~9 MB) and unloads the code: compiling
// and running the model again and again does not grow the heap.
TEST(JitCompile, DestroyedCodeFreesItsPreparedWeights) {
  Tensor w = rnd({256, 256, 3, 3}, 40, 0.05), b = rnd({256}, 41);
  Tensor x = rnd({1, 256, 32, 32}, 42);
  auto fn = [&](const TensorList& t) { return TensorList{conv2d(t[0], w, b, {1, 1}, {1, 1})}; };
  jit::CompileOptions o = no_disk();
  o.memory_cache = false;
  const Tensor want = fn({x})[0];
  const Tensor x2 = rnd({1, 256, 32, 32}, 43);  // an input it was not traced on
  const Tensor want2 = fn({x2})[0];
  auto once = [&] {
    jit::TracedFunction traced = jit::trace(fn, {x});
    jit::freeze(traced);
    jit::CompiledFunction f = jit::compile(traced, o);
    EXPECT_LE(max_rel_error(f({x})[0], want), 1e-4);
    EXPECT_LE(max_rel_error(f({x2})[0], want2), 1e-4) << "second input";
  };
  once();  // warms up what stays (the pool, MLIR, caches)
  const size_t before = mallinfo2().uordblks;
  for (int i = 0; i < 5; ++i) once();
  const size_t after = mallinfo2().uordblks;
  // Five leaked Winograd weights would be 5 x 36 x 256 x 256 x 4 bytes = 47 MB.
  EXPECT_LT(after, before + (8u << 20)) << "heap grew by " << (after - before) / 1024 << " KB";
}

// Kernel calls borrow the arena bytes no live buffer holds as scratch (kiln_abi_lease_begin).
// Here a 4 MB buffer dies after the first conv and lends its bytes to the later convs' scratch,
// while `a` stays alive for the residual add: scratch laid over a live buffer would corrupt y.
TEST(JitCompile, KernelScratchBorrowsOnlyFreeArenaBytes) {
  Tensor w0 = rnd({32, 64, 1, 1}, 60, 0.1), w1 = rnd({32, 32, 3, 3}, 61, 0.1);
  Tensor w2 = rnd({32, 32, 3, 3}, 62, 0.1), w3 = rnd({32, 32, 3, 3}, 63, 0.1);
  auto fn = [&](const TensorList& t) {
    Tensor big = relu(t[0] * 2 + 1);  // [1, 64, 128, 128]: 4 MB, dead after the next conv
    Tensor a = relu(conv2d(big, w0, {}, {2, 2}));
    Tensor b = relu(conv2d(a, w1, {}, {1, 1}, {1, 1}));
    Tensor c = conv2d(b, w2, {}, {1, 1}, {1, 1});
    return TensorList{relu(conv2d(relu(c + a), w3, {}, {1, 1}, {1, 1}) + a)};
  };
  Tensor x0 = rnd({1, 64, 128, 128}, 64);
  jit::CompiledFunction f = jit::compile(jit::trace(fn, {x0}), no_disk());
  for (uint32_t seed = 65; seed < 68; ++seed) {
    Tensor x = rnd({1, 64, 128, 128}, seed);
    const int64_t lent_before = scratch_bytes_from_leases();
    Tensor y = f({x})[0];
    EXPECT_GT(scratch_bytes_from_leases(), lent_before) << "no kernel scratch came from the arena";
    EXPECT_LE(max_rel_error(y, fn({x})[0]), 1e-5);
  }
}

TEST(JitCompile, KernelErrorsAtRunTimeBecomeKilnErrors) {
  // Data-dependent failures (an index out of range) can only show at run time: the runtime
  // kernel's message reaches the caller as a kiln::Error, and the function stays usable.
  Tensor table = rnd({5, 3}, 27);
  auto fn = [&](const TensorList& t) { return TensorList{embedding(table, t[0]) * 2}; };
  Tensor good = tensor({0.0, 4.0, 2.0}, DType::Int64);
  jit::CompiledFunction f = jit::compile(jit::trace(fn, {good}), no_disk());
  try {
    f({tensor({0.0, 7.0, 2.0}, DType::Int64)});
    FAIL() << "an out-of-range index was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("embedding"), std::string::npos) << e.what();
  }
  EXPECT_LE(max_abs_diff(f({good})[0], fn({good})[0]), 0.0);
  // And on valid indices it was not traced on.
  Tensor other = tensor({3.0, 1.0, 4.0}, DType::Int64);
  EXPECT_LE(max_abs_diff(f({other})[0], fn({other})[0]), 0.0);
}

TEST(JitCompile, ResultsThatAreInputsViewsDuplicatesOrScalars) {
  // Results that no op computes into a fresh buffer: an input as is, a transposed view of it, the
  // same value twice, and a 0-dim reduction.
  auto fn = [](const TensorList& t) {
    Tensor y = t[0] * 3;
    return TensorList{t[0], t[0].transpose(0, 1), y, y, sum(y)};
  };
  Tensor x = rnd({3, 4}, 28);
  jit::CompiledFunction f = jit::compile(jit::trace(fn, {x}), no_disk());
  Tensor x2 = rnd({3, 4}, 29);
  TensorList got = f({x2}), want = fn({x2});
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].sizes(), want[i].sizes()) << "output " << i;
    EXPECT_LE(max_rel_error(got[i], want[i]), 1e-6) << "output " << i;
  }
  // Outputs are fresh tensors: writing one never changes the input or another output.
  EXPECT_NE(got[0].data(), x2.data());
  EXPECT_NE(got[2].data(), got[3].data());
}
