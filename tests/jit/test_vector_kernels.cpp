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
#include "kiln/runtime/thread_pool.h"
#include "kiln/trace/trace.h"

using namespace kiln;
using kiln::test::max_abs_diff;
using kiln::test::rnd;

namespace {

constexpr auto& kWidths = kiln::test::kVectorWidths;

jit::CompileOptions at_width(int bits) {
  jit::CompileOptions o = kiln::test::at_vector_width(bits);
  // Small kernels split over the threads too (two, see ScopedThreads): shares start past 0,
  // and a 1-D share's remainder is masked.
  o.parallel_min_elements = 64;
  return o;
}

// Broadcast over a 37-wide inner dim (two whole 16-float tiles, a remainder of 5), a comparison
// stored as bytes, integer arithmetic, a dense chain of 100003 elements, a transposed read (left
// to the scalar loops), float64 arithmetic that vectorizes, and 1-D integer and byte chains of
// 1003 elements (masked remainders) in the same function.
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
  Tensor f64 = in[4] * in[4] - in[4] * 0.5;                   // [1003] float64
  Tensor ints1d = in[5] * in[5] - 7;                          // [1003] int64
  Tensor bytes = logical_not(in[5] > 3);                      // [1003] bool
  return {chain, smooth, positive, ints, dense, strided, f64, ints1d, bytes};
}

TensorList mixed_inputs() {
  Tensor i = (rnd({3, 37}, 3) * 100.0).to(DType::Int64);
  Tensor j = (rnd({1003}, 9) * 10.0).to(DType::Int64);
  return {rnd({3, 37}, 1), rnd({37}, 2), i, rnd({100003}, 4), rnd({1003}, 8).to(DType::Float64), j};
}

}  // namespace

TEST(VectorKernels, EveryWidthComputesWhatEagerComputes) {
  kiln::test::ScopedThreads threads;
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
    for (size_t k : {6, 7, 8}) {
      ASSERT_EQ(got[k].dtype(), want[k].dtype());
      EXPECT_EQ(max_abs_diff(got[k], want[k]), 0.0) << "result " << k;
    }
  }
}

TEST(VectorKernels, Float64LibmCallsAndFusedResults) {
  kiln::test::ScopedThreads threads;
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
  // kernel reads and writes one buffer). The mask is carried too and flips every step, so the
  // result (every element filled after two steps) needs each step to read the previous step's
  // fills: a kernel that read another operand, the input or a stale copy in place of the carry
  // would leave elements unfilled.
  kiln::test::ScopedThreads threads;
  auto fn = [](const TensorList& in) {
    return loop(3,
                [&](const Tensor&, const TensorList& c) {
                  return TensorList{masked_fill(c[0], c[1], 7.0), logical_not(c[1])};
                },
                {in[0], in[1]});
  };
  const int64_t n = 1003;
  Tensor x = rnd({n}, 7);
  Tensor mask = kiln::empty({n}, DType::Bool);
  for (int64_t k = 0; k < n; ++k) mask.data_ptr<bool>()[k] = k % 3 == 1;
  const TensorList in = {x, mask};
  const Tensor want = kiln::full({n}, 7.0);
  for (int bits : kWidths) {
    SCOPED_TRACE("vector_bits " + std::to_string(bits));
    jit::CompiledFunction f = jit::compile(jit::trace(fn, in), at_width(bits));
    EXPECT_EQ(max_abs_diff(f(in)[0], want), 0.0);
  }
}

TEST(VectorKernels, ZeroSizeAndSingleElementKernels) {
  // Nothing to tile (a zero-size inner or outer dim) and a single element: scalar code, no
  // compile error, eager's results.
  kiln::test::ScopedThreads threads;
  auto fn = [](const TensorList& in) {
    return TensorList{in[0] * 2.0 + 1.0, in[1] * 2.0 + 1.0, in[2] * 2.0 + 1.0};
  };
  const TensorList in = {kiln::empty({4, 0}), kiln::empty({0, 4}), rnd({1, 1}, 10)};
  for (int bits : kWidths) {
    SCOPED_TRACE("vector_bits " + std::to_string(bits));
    jit::CompiledFunction f = jit::compile(jit::trace(fn, in), at_width(bits));
    const TensorList got = f(in);
    EXPECT_EQ(got[0].sizes(), (Dims{4, 0}));
    EXPECT_EQ(got[1].sizes(), (Dims{0, 4}));
    EXPECT_EQ(max_abs_diff(got[2], fn(in)[2]), 0.0);
  }
}

TEST(VectorKernels, TransposingKernelsMatchAnIndexedReference) {
  // Kernels reading an operand across the innermost dim: square tiles read along the dim the
  // operand is contiguous in and transposed in registers (the outermost dim: attention's key
  // transpose, a 2-D transpose split over the threads with shares starting past 0 and remainders
  // of run-time size; a middle dim with a static remainder), beside a contiguous operand, in
  // float32, float64, int64 and bytes. Every element against the index formula.
  kiln::test::ScopedThreads threads;
  auto fn = [](const TensorList& in) {
    return TensorList{
        in[0].permute({1, 2, 0}) + 1.0,       // [128, 4, 64] -> [4, 64, 128]
        in[1].transpose(0, 1) * 2.0 + in[2],  // [37, 50] -> [50, 37], plus a [50, 37]
        in[3].transpose(1, 2) - 0.5,          // [3, 40, 24] -> [3, 24, 40]
        in[4].transpose(0, 1) + 1.0,          // float64 [33, 20] -> [20, 33]
        in[5].transpose(0, 1) * 3,            // int64 [19, 21] -> [21, 19]
        logical_not(in[6].transpose(0, 1)),   // bool [70, 130] -> [130, 70]
    };
  };
  Tensor ints = (rnd({19, 21}, 15) * 100.0).to(DType::Int64);
  Tensor bytes = rnd({70, 130}, 16) > 0.0;
  const TensorList in = {rnd({128, 4, 64}, 11),
                         rnd({37, 50}, 12),
                         rnd({50, 37}, 13),
                         rnd({3, 40, 24}, 14),
                         rnd({33, 20}, 17).to(DType::Float64),
                         ints,
                         bytes};
  auto at = [](const Tensor& t, std::initializer_list<int64_t> index) {
    int64_t offset = 0, d = 0;
    for (int64_t i : index) offset += i * t.strides()[d++];
    return offset;
  };
  for (int bits : kWidths) {
    SCOPED_TRACE("vector_bits " + std::to_string(bits));
    jit::CompiledFunction f = jit::compile(jit::trace(fn, in), at_width(bits));
    const TensorList got = f(in);
    ASSERT_EQ(got.size(), 6u);
    int bad = 0;
    auto expect = [&](bool ok, const char* what, int64_t i, int64_t j) {
      if (!ok && bad++ < 5) ADD_FAILURE() << what << " at (" << i << ", " << j << ")";
    };
    const float* x0 = in[0].data_ptr<float>();
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t d = 0; d < 64; ++d)
        for (int64_t s = 0; s < 128; ++s)
          expect(got[0].data_ptr<float>()[at(got[0], {h, d, s})] == x0[at(in[0], {s, h, d})] + 1.0f,
                 "keys", d, s);
    for (int64_t i = 0; i < 50; ++i)
      for (int64_t j = 0; j < 37; ++j)
        expect(got[1].data_ptr<float>()[at(got[1], {i, j})] ==
                   in[1].data_ptr<float>()[at(in[1], {j, i})] * 2.0f +
                       in[2].data_ptr<float>()[at(in[2], {i, j})],
               "2-D", i, j);
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t i = 0; i < 24; ++i)
        for (int64_t j = 0; j < 40; ++j)
          expect(got[2].data_ptr<float>()[at(got[2], {b, i, j})] ==
                     in[3].data_ptr<float>()[at(in[3], {b, j, i})] - 0.5f,
                 "middle dim", i, j);
    for (int64_t i = 0; i < 20; ++i)
      for (int64_t j = 0; j < 33; ++j)
        expect(got[3].data_ptr<double>()[at(got[3], {i, j})] ==
                   in[4].data_ptr<double>()[at(in[4], {j, i})] + 1.0,
               "float64", i, j);
    for (int64_t i = 0; i < 21; ++i)
      for (int64_t j = 0; j < 19; ++j)
        expect(got[4].data_ptr<int64_t>()[at(got[4], {i, j})] ==
                   in[5].data_ptr<int64_t>()[at(in[5], {j, i})] * 3,
               "int64", i, j);
    for (int64_t i = 0; i < 130; ++i)
      for (int64_t j = 0; j < 70; ++j)
        expect(got[5].data_ptr<bool>()[at(got[5], {i, j})] ==
                   !in[6].data_ptr<bool>()[at(in[6], {j, i})],
               "bytes", i, j);
  }
}
