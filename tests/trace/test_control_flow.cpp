// kiln::cond / kiln::loop: eager semantics, and traces that keep both branches / the loop body,
// so a traced function follows the branch its *new* inputs select.
#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "kiln/trace/trace.h"
#include "trace_test_util.h"

using namespace kiln;
using namespace kiln::test;

namespace {

// y = x*2 if sum(x) > 0 else x - 1, written with kiln::cond.
TensorList branchy(const TensorList& in) {
  const Tensor& x = in[0];
  return cond(
      gt(x.sum(), zeros({})), [&] { return TensorList{x * 2.0}; },
      [&] { return TensorList{x - 1.0}; });
}

// Reference for `branchy` from plain C++ control flow on the values.
Tensor branchy_reference(const Tensor& x) {
  double s = 0;
  for (int64_t i = 0; i < x.numel(); ++i) s += x.data_ptr<float>()[i];
  return s > 0 ? x * 2.0 : x - 1.0;
}

// carry = carry * 0.5 + i, n times; the reference is the closed loop over doubles.
TensorList halving(const TensorList& in, int64_t n) {
  return loop(n,
              [](const Tensor& i, const TensorList& c) {
                return TensorList{c[0] * 0.5 + i.to(DType::Float32)};
              },
              {in[0]});
}

}  // namespace

TEST(ControlFlow, EagerCondRunsOneBranch) {
  int then_runs = 0, else_runs = 0;
  auto t = [&] {
    ++then_runs;
    return TensorList{ones({2})};
  };
  auto e = [&] {
    ++else_runs;
    return TensorList{zeros({2})};
  };
  TensorList r = cond(full({}, 3.0), t, e);
  EXPECT_EQ(then_runs, 1);
  EXPECT_EQ(else_runs, 0);
  EXPECT_EQ(r[0].data_ptr<float>()[0], 1.0f);
  r = cond(zeros({1}, TensorOptions(DType::Int64)), t, e);
  EXPECT_EQ(else_runs, 1);
  EXPECT_EQ(r[0].data_ptr<float>()[0], 0.0f);
}

TEST(ControlFlow, EagerLoopMatchesReference) {
  Tensor x = rnd({3}, 7);
  Tensor y = halving({x}, 4)[0];
  for (int64_t k = 0; k < 3; ++k) {
    double v = x.data_ptr<float>()[k];
    for (int i = 0; i < 4; ++i) v = v * 0.5 + i;
    EXPECT_NEAR(y.data_ptr<float>()[k], v, 1e-5);
  }
  EXPECT_EQ(halving({x}, 0)[0].data_ptr<float>()[1], x.data_ptr<float>()[1]);
}

TEST(ControlFlow, TracedCondKeepsBothBranches) {
  Tensor pos = abs(rnd({2, 3}, 1)) + 0.1;
  jit::TracedFunction traced = jit::trace(branchy, {pos});
  const std::string text = traced.str();
  EXPECT_NE(text.find("scf.if"), std::string::npos) << text;
  EXPECT_TRUE(traced.read_backs().empty()) << "cond must not bake in its predicate";
  // The trace follows the new inputs: a negative input takes the else branch.
  Tensor neg_in = -abs(rnd({2, 3}, 2)) - 0.1;
  for (const Tensor& x : {pos, neg_in}) {
    Tensor want = branchy_reference(x);
    EXPECT_LE(max_abs_diff(traced({x})[0], want), 1e-6);
    EXPECT_LE(max_abs_diff(interpret_printed(traced, {x})[0], want), 1e-6);
  }
}

TEST(ControlFlow, TracedLoopRunsForTheRecordedTripCount) {
  Tensor x = rnd({4}, 3);
  auto fn = [](const TensorList& in) { return halving(in, 5); };
  jit::TracedFunction traced = jit::trace(fn, {x});
  const std::string text = traced.str();
  EXPECT_NE(text.find("scf.for"), std::string::npos) << text;
  // One body in the IR, not five unrolled copies.
  size_t muls = 0;
  for (size_t p = text.find("kiln.mul"); p != std::string::npos; p = text.find("kiln.mul", p + 1)) {
    ++muls;
  }
  EXPECT_EQ(muls, 1u) << text;
  Tensor other = rnd({4}, 4);
  Tensor want = fn({other})[0];
  EXPECT_LE(max_abs_diff(traced({other})[0], want), 1e-5);
  EXPECT_LE(max_abs_diff(interpret_printed(traced, {other})[0], want), 1e-5);
}

TEST(ControlFlow, LoopInsideCondAndCapturesInsideRegions) {
  Tensor w = rnd({4, 4}, 9, 0.3);  // first seen inside a branch: becomes a function argument
  auto fn = [&](const TensorList& in) {
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
  Tensor x = abs(rnd({2, 4}, 5));
  jit::TraceOptions options;
  options.named_captures = {{"w", w}};
  jit::TracedFunction traced = jit::trace(fn, {x}, options);
  EXPECT_EQ(traced.captures().size(), 1u) << traced.str();
  for (const Tensor& in : {x, -x}) {
    Tensor want = fn({in})[0];
    EXPECT_LE(max_abs_diff(interpret_printed(traced, {in})[0], want), 1e-5) << traced.str();
  }
}

TEST(ControlFlow, MismatchedBranchesAreRejected) {
  auto fn = [](const TensorList& in) {
    return cond(
        gt(in[0].sum(), zeros({})), [&] { return TensorList{in[0]}; },
        [&] { return TensorList{in[0].sum()}; });
  };
  try {
    jit::trace(fn, {ones({2})});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected [2] f32, got [] f32"), std::string::npos)
        << e.what();
  }
  auto bad_loop = [](const TensorList& in) {
    return loop(2, [](const Tensor&, const TensorList& c) { return TensorList{c[0].sum()}; },
                {in[0]});
  };
  EXPECT_THROW(bad_loop({ones({2})}), Error);
  EXPECT_THROW(jit::trace(bad_loop, {ones({2})}), Error);
}

TEST(ControlFlow, InPlaceWriteToOuterTensorInsideBranchIsRejected) {
  Tensor state = zeros({2});
  auto fn = [&](const TensorList& in) {
    return cond(
        gt(in[0].sum(), zeros({})),
        [&] {
          state.add_(in[0]);
          return TensorList{in[0]};
        },
        [&] { return TensorList{in[0]}; });
  };
  try {
    jit::trace(fn, {ones({2})});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("in place"), std::string::npos) << e.what();
  }
}

// Random ops draw from an explicit (seed, offset) state: a traced dropout produces a fresh mask
// on every call, the same one eager would draw at that point of the stream.
TEST(TraceRandom, DropoutDrawsAFreshMaskPerCallLikeEager) {
  auto fn = [](const TensorList& in) { return TensorList{dropout(in[0], 0.5) + randn({64})}; };
  Tensor x = ones({64});
  manual_seed(11);
  jit::TracedFunction traced = jit::trace(fn, {x});
  const std::string text = traced.str();
  EXPECT_NE(text.find("kiln.dropout_mask"), std::string::npos) << text;
  EXPECT_NE(text.find("kiln.normal"), std::string::npos) << text;
  // No frozen mask or noise among the arguments: only the input and the generator state.
  ASSERT_EQ(traced.arg_names().size(), 2u) << text;
  EXPECT_EQ(traced.arg_names()[1], "rng_state");
  for (uint64_t seed : {3u, 4u}) {
    manual_seed(seed);
    Tensor want1 = fn({x})[0], want2 = fn({x})[0];
    manual_seed(seed);
    Tensor got1 = traced({x})[0], got2 = traced({x})[0];
    EXPECT_EQ(max_abs_diff(got1, want1), 0.0);
    EXPECT_EQ(max_abs_diff(got2, want2), 0.0);
    EXPECT_GT(max_abs_diff(got1, got2), 0.0) << "two calls must draw different numbers";
  }
}

TEST(TraceRandom, UntraceableRandomOpsAreRefused) {
  EXPECT_THROW(jit::trace([](const TensorList&) { return TensorList{randperm(8)}; }, {ones({1})}),
               Error);
  auto in_region = [](const TensorList& in) {
    return cond(
        gt(in[0].sum(), zeros({})), [&] { return TensorList{in[0] + rand({2})}; },
        [&] { return TensorList{in[0]}; });
  };
  EXPECT_THROW(jit::trace(in_region, {ones({2})}), Error);
}
