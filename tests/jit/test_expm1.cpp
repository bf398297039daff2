// expm1, the worked example of docs/adding-an-op.md: an op added with three files, its schema
// entry (ir/ops.toml), its scalar formula (runtime/src/kernels/unary_formulas.h) and this test.
// Each backend against float64 references: eager in float32, float64 and on integers; its
// gradient (generated from the schema's formula) against finite differences; a trace saved and
// run by kiln_runtime alone; the JIT, which calls the runtime's kernel (lowering = "call").
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "helpers.h"
#include "kiln/gradcheck.h"
#include "kiln/jit/compile.h"
#include "kiln/jit/save.h"
#include "kiln/kiln.h"
#include "kiln/runtime/model.h"

namespace kiln {
namespace {

// Inputs where exp(x) - 1 would cancel (|x| tiny), around 0 and far from it, both signs.
const std::vector<double> kInputs = {1e-30, -1e-30, 1e-10, -3e-9, 1e-5, -2e-4, 0.01,  -0.3,
                                     0.5,   1.0,    -1.0,  2.5,   -7.0, 20.0,  -40.0, 0.0};

Tensor from(const std::vector<double>& v, DType dtype) {
  Tensor t = kiln::empty({static_cast<int64_t>(v.size())}, TensorOptions(DType::Float64));
  for (size_t i = 0; i < v.size(); ++i) t.data_ptr<double>()[i] = v[i];
  return t.to(dtype);
}

// The float64 reference: e^x - 1 by its Taylor series near 0 (where the subtraction would
// cancel), else exp(x) - 1 in long double.
double reference(double x) {
  if (std::fabs(x) < 1e-3) {
    double term = x, sum = 0;
    for (int k = 1; k < 12; ++k) {
      sum += term;
      term *= x / (k + 1);
    }
    return sum;
  }
  return static_cast<double>(std::exp(static_cast<long double>(x)) - 1.0L);
}

void expect_close(const Tensor& got, const std::vector<double>& in, double rel) {
  const Tensor g = got.to(DType::Float64).contiguous();
  ASSERT_EQ(g.numel(), static_cast<int64_t>(in.size()));
  for (size_t i = 0; i < in.size(); ++i) {
    const double want = reference(in[i]);
    EXPECT_LE(std::fabs(g.data_ptr<double>()[i] - want), rel * std::fabs(want) + 1e-300)
        << "expm1(" << in[i] << ") = " << g.data_ptr<double>()[i] << ", want " << want;
  }
}

TEST(Expm1, EagerMatchesFloat64Reference) {
  expect_close(expm1(from(kInputs, DType::Float64)), kInputs, 1e-15);
  // float32: against the reference at the inputs rounded to float32.
  const Tensor f32 = from(kInputs, DType::Float32);
  std::vector<double> rounded;
  for (int64_t i = 0; i < f32.numel(); ++i) rounded.push_back(f32.data_ptr<float>()[i]);
  expect_close(expm1(f32), rounded, 1.2e-7);
  // Integers compute in float32, like exp.
  const Tensor ints = from({0, 1, -2, 3}, DType::Int64);
  const Tensor r = expm1(ints);
  EXPECT_EQ(r.dtype(), DType::Float32);
  expect_close(r, {0, 1, -2, 3}, 1.2e-7);
}

TEST(Expm1, GradientMatchesFiniteDifferences) {
  const Tensor x = (test::rnd({3, 5}, 11).to(DType::Float64) * 2.0).requires_grad_();
  auto fn = [](const TensorList& in) { return TensorList{expm1(in[0])}; };
  const autograd::GradcheckResult r = autograd::gradcheck(fn, {x});
  EXPECT_TRUE(r.ok) << r.message;
  const autograd::GradcheckResult rr = autograd::gradgradcheck(fn, {x});
  EXPECT_TRUE(rr.ok) << rr.message;
}

// expm1 in a chain with ops code generation emits as loops (mul, add): traced on x, run on x2.
TensorList chain(const TensorList& in) {
  return TensorList{expm1(in[0] * 0.5) * 3.0 + in[0]};
}

TEST(Expm1, SavedTraceRunsInTheRuntime) {
  const Tensor x = test::rnd({4, 6}, 1), x2 = test::rnd({4, 6}, 2, 3.0);
  const std::vector<uint8_t> bytes = jit::save_to_bytes(jit::trace(chain, {x}), {});
  rt::Session session(rt::Model::from_bytes(bytes));
  for (const Tensor& in : {x, x2}) {
    auto out = session.run({in.impl()});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_LE(test::max_rel_error(Tensor(out[0]), chain({in})[0]), 1e-6);
  }
}

TEST(Expm1, CompiledCodeCallsTheRuntimeKernel) {
  const Tensor x = test::rnd({4, 6}, 3), x2 = test::rnd({4, 6}, 4, 3.0);
  jit::CompileOptions options;
  options.disk_cache = false;
  jit::CompiledFunction f = jit::compile(jit::trace(chain, {x}), options);
  for (const Tensor& in : {x, x2}) EXPECT_LE(test::max_rel_error(f({in})[0], chain({in})[0]), 1e-6);
  // Tiny inputs keep their precision through the compiled call too.
  const Tensor tiny = from({1e-10, -3e-9, 1e-30, 1e-5}, DType::Float32);
  std::vector<double> rounded;
  for (int64_t i = 0; i < tiny.numel(); ++i) rounded.push_back(tiny.data_ptr<float>()[i]);
  auto alone = [](const TensorList& in) { return TensorList{expm1(in[0])}; };
  expect_close(jit::compile(jit::trace(alone, {tiny}), options)({tiny})[0], rounded, 1.2e-7);
}

}  // namespace
}  // namespace kiln
