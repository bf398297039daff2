// The vector pipeline (codegen/src/lower/vectorize.cpp) at every width a target may give it, and
// the scalar loops it replaced (vector_bits < 0): the same results as eager and as float64
// references, for whole tiles, static and masked remainders, broadcasts, bytes, integers, a
// kiln.fused region's two results, libm calls (float64 tanh: a tile vectorization does not take)
// and an update computed in a loop's carried buffer.

#include <gtest/gtest.h>

#include <cmath>

#include "helpers.h"
#include "kiln/control_flow.h"
#include "kiln/jit/compile.h"
#include "kiln/kiln.h"
#include "kiln/trace/trace.h"

using namespace kiln;
using kiln::test::max_abs_diff;
using kiln::test::rnd;

namespace {

constexpr int kWidths[] = {-1, 128, 256, 512};

jit::CompileOptions at_width(int bits) {
  jit::CompileOptions o = kiln::test::no_disk();
  o.vector_bits = bits;
  // Small kernels split over the threads too: each share's remainder is masked.
  o.parallel_min_elements = 1000;
  return o;
}

// Broadcast over a 37-wide inner dim (two whole 16-float tiles, a remainder of 5), a comparison
// stored as bytes, integer arithmetic, a dense chain of 100003 elements and a transposed read
// (left to the scalar loops) in the same function.
TensorList mixed(const TensorList& in) {
  const Tensor& x = in[0];  // [3, 37]
  const Tensor& a = in[1];  // [37]
  const Tensor& i = in[2];  // [3, 37] int64
  const Tensor& d = in[3];  // [100003]
  Tensor chain = relu(x * a + 2.0) * 0.5;
  Tensor smooth = gelu(x) + sigmoid(x * a) - exp(x * 0.25);
  Tensor positive = x > a;
  Tensor ints = i * 3 - (i - 5) * i;
  Tensor dense = where(d > 0.0, d * d, -d) + 1.0;
  Tensor strided = x.transpose(0, 1) * 2.0 + a.unsqueeze(1);  // scalar loops: a strided read
  return {chain, smooth, positive, ints, dense, strided};
}

TensorList mixed_inputs() {
  Tensor i = (rnd({3, 37}, 3) * 100.0).to(DType::Int64);
  return {rnd({3, 37}, 1), rnd({37}, 2), i, rnd({100003}, 4)};
}

}  // namespace

TEST(VectorKernels, EveryWidthComputesWhatEagerComputes) {
  const TensorList in = mixed_inputs();
  const TensorList want = mixed(in);
  // float64 references of the exact ones.
  const Tensor x = in[0].to(DType::Float64), a = in[1].to(DType::Float64);
  const Tensor chain64 = relu(x * a + 2.0) * 0.5;
  const Tensor d64 = in[3].to(DType::Float64);
  const Tensor dense64 = where(d64 > 0.0, d64 * d64, -d64) + 1.0;
  for (int bits : kWidths) {
    SCOPED_TRACE("vector_bits " + std::to_string(bits));
    jit::CompiledFunction f = jit::compile(jit::trace(mixed, in), at_width(bits));
    const TensorList got = f(in);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_LE(max_abs_diff(got[0], chain64), 1e-6);
    EXPECT_LE(max_abs_diff(got[1], want[1]), 2e-6);
    ASSERT_EQ(got[2].dtype(), DType::Bool);
    EXPECT_EQ(max_abs_diff(got[2], want[2]), 0.0);
    ASSERT_EQ(got[3].dtype(), DType::Int64);
    EXPECT_EQ(max_abs_diff(got[3], want[3]), 0.0);
    EXPECT_LE(max_abs_diff(got[4], dense64) / amax(abs(dense64)).item<double>(), 1e-6);
    EXPECT_EQ(max_abs_diff(got[5], want[5]), 0.0);
  }
}

TEST(VectorKernels, Float64LibmCallsAndFusedResults) {
  // tanh of float64 calls libm: that tile stays a scalar loop; the rest of the kernel does not
  // change. Two results of one elementwise chain share their subexpression.
  auto fn = [](const TensorList& in) {
    Tensor t = tanh(in[0]) * 2.0;
    Tensor u = in[1] * in[1];
    return TensorList{t, u + 1.0, u - 1.0};
  };
  const TensorList in = {rnd({1001}, 5).to(DType::Float64), rnd({7, 333}, 6)};
  Tensor want_t(kiln::empty({1001}, DType::Float64));
  for (int64_t k = 0; k < 1001; ++k) {
    want_t.data_ptr<double>()[k] = std::tanh(in[0].data_ptr<double>()[k]) * 2.0;
  }
  const TensorList want = fn(in);
  for (int bits : kWidths) {
    SCOPED_TRACE("vector_bits " + std::to_string(bits));
    jit::CompiledFunction f = jit::compile(jit::trace(fn, in), at_width(bits));
    const TensorList got = f(in);
    EXPECT_LE(max_abs_diff(got[0], want_t), 1e-15);
    EXPECT_EQ(max_abs_diff(got[1], want[1]), 0.0);
    EXPECT_EQ(max_abs_diff(got[2], want[2]), 0.0);
  }
}

TEST(VectorKernels, UpdateInTheCarriedBufferIsInPlaceAndExact) {
  // masked_fill of the carried value, yielded back: computed in the carry's own buffer (its
  // kernel reads and writes one buffer). A kernel that read another operand, or a stale copy, in
  // place of the carry would change the unmasked elements.
  auto fn = [](const TensorList& in) {
    return loop(3,
                [&](const Tensor&, const TensorList& c) {
                  return TensorList{masked_fill(c[0], in[1], 7.0)};
                },
                {in[0]});
  };
  const int64_t n = 1003;
  Tensor x = rnd({n}, 7);
  Tensor mask = kiln::empty({n}, DType::Bool);
  for (int64_t k = 0; k < n; ++k) mask.data_ptr<bool>()[k] = k % 3 == 1;
  const TensorList in = {x, mask};
  Tensor want = x.clone();
  for (int64_t k = 0; k < n; ++k)
    if (k % 3 == 1) want.data_ptr<float>()[k] = 7.0f;
  for (int bits : kWidths) {
    SCOPED_TRACE("vector_bits " + std::to_string(bits));
    jit::CompiledFunction f = jit::compile(jit::trace(fn, in), at_width(bits));
    EXPECT_EQ(max_abs_diff(f(in)[0], want), 0.0);
  }
}
