// Traced random ops compiled: dropout in training mode draws a fresh mask per call from the
// process's default stream, bit-identical to the reference interpreter from the same state.
#include <gtest/gtest.h>

#include "helpers.h"
#include "kiln/jit/compile.h"
#include "kiln/kiln.h"
#include "kiln/runtime/kernels/random.h"
#include "kiln/trace/trace.h"

using namespace kiln;
using kiln::test::max_abs_diff;
using kiln::test::rnd;

TEST(JitRandom, DropoutMatchesInterpreterAndAdvancesTheStream) {
  auto fn = [](const TensorList& t) { return TensorList{dropout(t[0] * 2, 0.4, true) + 1}; };
  Tensor x = rnd({64, 33}, 41);
  jit::TracedFunction traced = jit::trace(fn, {x});
  jit::CompileOptions o;
  o.disk_cache = false;
  jit::CompiledFunction compiled = jit::compile(traced, o);

  auto& gen = kiln::default_generator();
  gen.manual_seed(1234);
  Tensor a1 = traced({x})[0];
  Tensor a2 = traced({x})[0];
  const uint64_t offset_after = gen.offset();
  gen.manual_seed(1234);
  Tensor b1 = compiled({x})[0];
  Tensor b2 = compiled({x})[0];
  EXPECT_EQ(gen.offset(), offset_after);
  EXPECT_EQ(max_abs_diff(a1, b1), 0.0);
  EXPECT_EQ(max_abs_diff(a2, b2), 0.0);
  EXPECT_GT(max_abs_diff(b1, b2), 0.0);  // a fresh mask per call
  // About 40% of the elements are dropped (value 1 = 0*2+1).
  const double dropped = sum(eq(b1, full_like(b1, 1.0)).to(DType::Float64)).item<double>();
  EXPECT_NEAR(dropped / double(x.numel()), 0.4, 0.05);
}
