// kiln::cond / kiln::loop traces (scf.if / scf.for regions) compiled: both branches and the loop
// body are in the code, so other inputs take other paths; checked against eager.
#include <gtest/gtest.h>

#include "helpers.h"
#include "kiln/control_flow.h"
#include "kiln/jit/compile.h"
#include "kiln/kiln.h"
#include "kiln/trace/trace.h"

using namespace kiln;
using kiln::test::max_abs_diff;
using kiln::test::rnd;

namespace {
jit::CompileOptions no_disk() {
  jit::CompileOptions o;
  o.disk_cache = false;
  return o;
}
}  // namespace

TEST(JitControlFlow, CondTakesTheBranchTheInputSelects) {
  auto fn = [](const TensorList& in) {
    const Tensor& x = in[0];
    return cond(
        gt(x.sum(), zeros({})), [&] { return TensorList{x * 2.0}; },
        [&] { return TensorList{x - 1.0}; });
  };
  Tensor x = abs(rnd({3, 5}, 1));
  jit::CompiledFunction f = jit::compile(jit::trace(fn, {x}), no_disk());
  for (const Tensor& in : {x, -x, rnd({3, 5}, 2)}) {
    EXPECT_LE(max_abs_diff(f({in})[0], fn({in})[0]), 1e-6);
  }
}

TEST(JitControlFlow, LoopCarriesValuesAndUsesTheCounter) {
  // carry = carry * 0.5 + i, 6 times, with a transposed view in the carry's update.
  auto fn = [](const TensorList& in) {
    return loop(
        6,
        [](const Tensor& i, const TensorList& c) {
          return TensorList{c[0] * 0.5 + i.to(DType::Float32), c[1].transpose(0, 1) + c[0].sum()};
        },
        {in[0], in[1]});
  };
  Tensor a = rnd({4}, 3), b = rnd({3, 3}, 4);
  jit::CompiledFunction f = jit::compile(jit::trace(fn, {a, b}), no_disk());
  Tensor a2 = rnd({4}, 5), b2 = rnd({3, 3}, 6);
  TensorList got = f({a2, b2}), want = fn({a2, b2});
  EXPECT_LE(max_abs_diff(got[0], want[0]), 1e-5);
  EXPECT_LE(max_abs_diff(got[1], want[1]), 1e-4);
}

TEST(JitControlFlow, LoopInsideCondWithCapturedWeight) {
  Tensor w = rnd({4, 4}, 9, 0.3);
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
  jit::CompiledFunction f = jit::compile(jit::trace(fn, {x}, options), no_disk());
  for (const Tensor& in : {x, -x}) {
    EXPECT_LE(max_abs_diff(f({in})[0], fn({in})[0]), 1e-5);
  }
}
