// kiln::cond / kiln::loop traces (scf.if / scf.for regions) compiled, and saved as artifacts the
// runtime runs: both branches and the loop body are in the code, so other inputs take other
// paths; checked against eager.
#include <gtest/gtest.h>

#include "helpers.h"
#include "kiln/control_flow.h"
#include "kiln/jit/compile.h"
#include "kiln/jit/save.h"
#include "kiln/kiln.h"
#include "kiln/runtime/model.h"
#include "kiln/trace/trace.h"

using namespace kiln;
using kiln::test::max_abs_diff;
using kiln::test::no_disk;
using kiln::test::rnd;

namespace {

Tensor from_rt(const TensorImplPtr& t) {
  return Tensor(t);
}

// The saved artifact, run by the runtime on each input set, against eager.
void expect_saved_matches_eager(const std::function<TensorList(const TensorList&)>& fn,
                                const jit::TracedFunction& traced,
                                const std::vector<TensorList>& inputs, double tol) {
  auto model = rt::Model::from_bytes(jit::save_to_bytes(traced));
  size_t control = 0;
  for (const auto& [op, n] : model->stats().op_counts) control += op == "if" || op == "for" ? n : 0;
  EXPECT_GT(control, 0u) << "no control-flow instruction in the artifact";
  rt::Session session(model);
  for (size_t k = 0; k < inputs.size(); ++k) {
    std::vector<const TensorImpl*> args;
    for (const Tensor& t : inputs[k]) args.push_back(t.impl());
    auto got = session.run(args);
    TensorList want = fn(inputs[k]);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_LE(max_abs_diff(from_rt(got[i]), want[i]), tol)
          << "input set " << k << " output " << i;
    }
  }
}

TensorList branchy(const TensorList& in) {
  const Tensor& x = in[0];
  return cond(
      gt(x.sum(), zeros({})),
      [&] {
        return TensorList{x * 2.0, x.sum()};
      },
      [&] {
        return TensorList{x - 1.0, amax(x)};
      });
}

// carry = carry * 0.5 + i, 6 times, with a transposed view in the carry's update.
TensorList counting(const TensorList& in) {
  return loop(
      6,
      [](const Tensor& i, const TensorList& c) {
        return TensorList{c[0] * 0.5 + i.to(DType::Float32), c[1].transpose(0, 1) + c[0].sum()};
      },
      {in[0], in[1]});
}
}  // namespace

TEST(JitControlFlow, CondTakesTheBranchTheInputSelects) {
  Tensor x = abs(rnd({3, 5}, 1));
  jit::CompiledFunction f = jit::compile(jit::trace(branchy, {x}), no_disk());
  for (const Tensor& in : {x, -x, rnd({3, 5}, 2)}) {
    EXPECT_LE(max_abs_diff(f({in})[0], branchy({in})[0]), 1e-6);
    EXPECT_LE(max_abs_diff(f({in})[1], branchy({in})[1]), 1e-5);
  }
}

TEST(JitControlFlow, LoopCarriesValuesAndUsesTheCounter) {
  Tensor a = rnd({4}, 3), b = rnd({3, 3}, 4);
  jit::CompiledFunction f = jit::compile(jit::trace(counting, {a, b}), no_disk());
  Tensor a2 = rnd({4}, 5), b2 = rnd({3, 3}, 6);
  TensorList got = f({a2, b2}), want = counting({a2, b2});
  EXPECT_LE(max_abs_diff(got[0], want[0]), 1e-5);
  EXPECT_LE(max_abs_diff(got[1], want[1]), 1e-4);
}

TEST(JitControlFlow, SavedArtifactRunsTheBranchTheInputSelects) {
  Tensor x = abs(rnd({3, 5}, 1));
  expect_saved_matches_eager(branchy, jit::trace(branchy, {x}), {{x}, {-x}, {rnd({3, 5}, 2)}},
                             1e-5);
}

TEST(JitControlFlow, SavedArtifactRunsLoopsWithTheCounter) {
  Tensor a = rnd({4}, 3), b = rnd({3, 3}, 4);
  expect_saved_matches_eager(counting, jit::trace(counting, {a, b}),
                             {{a, b}, {rnd({4}, 5), rnd({3, 3}, 6)}}, 1e-4);
}

// The body hands the carried values back swapped (a parallel copy), a loop of no iterations
// returns its initial values, and a loop nests in another's body.
TEST(JitControlFlow, SavedArtifactSwapsCarriedValuesAndNestsLoops) {
  auto fn = [](const TensorList& in) {
    TensorList swapped = loop(3,
                              [](const Tensor&, const TensorList& c) {
                                return TensorList{c[1], c[0], c[2] + 1.0};
                              },
                              {in[0], in[1], in[0]});
    TensorList none =
        loop(0, [](const Tensor&, const TensorList& c) { return TensorList{c[0] * 3.0}; }, {in[0]});
    TensorList nested =
        loop(2,
             [](const Tensor& i, const TensorList& c) {
               return loop(
                   3,
                   [&](const Tensor& j, const TensorList& d) {
                     return TensorList{d[0] * 0.9 + (i * 10 + j).to(DType::Float32)};
                   },
                   c);
             },
             {in[1]});
    return TensorList{swapped[0], swapped[1], swapped[2], none[0], nested[0]};
  };
  Tensor a = rnd({2, 3}, 7), b = rnd({2, 3}, 8);
  expect_saved_matches_eager(fn, jit::trace(fn, {a, b}), {{a, b}, {rnd({2, 3}, 9), a}}, 1e-4);
}

namespace {
// A loop in one branch of a cond, reading the captured weight w.
std::function<TensorList(const TensorList&)> loop_inside_cond(const Tensor& w) {
  return [w](const TensorList& in) {
    return cond(
        gt(in[0].mean(), zeros({})),
        [&] {
          return loop(
              3,
              [&](const Tensor&, const TensorList& c) { return TensorList{tanh(matmul(c[0], w))}; },
              {in[0]});
        },
        [&] { return TensorList{matmul(in[0], w) + 1.0}; });
  };
}
}  // namespace

TEST(JitControlFlow, LoopInsideCondWithCapturedWeight) {
  Tensor w = rnd({4, 4}, 9, 0.3);
  auto fn = loop_inside_cond(w);
  Tensor x = abs(rnd({2, 4}, 5));
  jit::TraceOptions options;
  options.named_captures = {{"w", w}};
  jit::CompiledFunction f = jit::compile(jit::trace(fn, {x}, options), no_disk());
  for (const Tensor& in : {x, -x}) {
    EXPECT_LE(max_abs_diff(f({in})[0], fn({in})[0]), 1e-5);
  }
}

TEST(JitControlFlow, SavedArtifactRunsLoopInsideCondWithCapturedWeight) {
  Tensor w = rnd({4, 4}, 9, 0.3);
  auto fn = loop_inside_cond(w);
  Tensor x = abs(rnd({2, 4}, 5));
  jit::TraceOptions options;
  options.named_captures = {{"w", w}};
  expect_saved_matches_eager(fn, jit::trace(fn, {x}, options), {{x}, {-x}}, 1e-5);
}

// Found by the trace fuzzer: a cond whose branches read another cond's result, with a read-back
// in between (seed 271 of the first generator).
TEST(JitControlFlow, SavedArtifactChainsConds) {
  auto step = [](const Tensor& v, const Tensor& x) {
    return cond(
        gt(x.sum(), zeros({})), [&] { return TensorList{v * 2.0 + x.mean()}; },
        [&] { return TensorList{v - 1.0}; })[0];
  };
  auto fn = [&](const TensorList& in) {
    Tensor v1 = in[0].reshape({-1});
    Tensor v2 = step(v1, v1), v3 = step(v1, v1), v4 = step(v3, v1);
    const double r = v3.sum().item<double>();
    Tensor v5 = r > 0 ? relu(v2) : v2 * r;
    return TensorList{exp(tanh(v1)), v4};
  };
  jit::TraceOptions quiet;
  quiet.warn_on_read_back = false;
  for (const Tensor& x : {abs(rnd({5, 4, 3}, 21)), -abs(rnd({5, 4, 3}, 22)), rnd({5, 4, 3}, 23)}) {
    expect_saved_matches_eager(fn, jit::trace(fn, {x}, quiet), {{x}}, 1e-5);
  }
}

// torch.matmul's 1-D operands (dot, vector x matrix, matrix x vector) trace, compile and save.
TEST(JitVectorMatmul, DotAndMatrixVectorProductsCompileAndSave) {
  const Tensor w = rnd({4, 3}, 31), m = rnd({2, 3, 5}, 32);
  auto fn = [&](const TensorList& in) {
    const Tensor& v = in[0];
    return TensorList{dot(v, v) + 1.0, matmul(w, v), matmul(v, m)};
  };
  const Tensor v = rnd({3}, 33);
  jit::TracedFunction traced = jit::trace(fn, {v});
  const Tensor v2 = rnd({3}, 34);
  const TensorList want = fn({v2}), interpreted = traced({v2});
  jit::CompiledFunction f = jit::compile(traced, no_disk());
  const TensorList compiled = f({v2});
  auto model = rt::Model::from_bytes(jit::save_to_bytes(traced));
  rt::Session session(model);
  const auto saved = session.run({v2.impl()});
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_LE(max_abs_diff(interpreted[i], want[i]), 1e-5) << i;
    EXPECT_LE(max_abs_diff(compiled[i], want[i]), 1e-5) << i;
    EXPECT_LE(max_abs_diff(from_rt(saved[i]), want[i]), 1e-5) << i;
  }
}
