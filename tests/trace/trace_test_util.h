#pragma once
// Shared by the trace tests: random tensors, distances, and the trace -> print -> parse ->
// interpret round trip against eager.

#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"

#include "kiln/kiln.h"
#include "kiln/trace/module.h"
#include "kiln/trace/trace.h"

namespace kiln::test {

inline Tensor rnd(Dims sizes, uint32_t seed, double scale = 1.0) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, static_cast<float>(scale));
  Tensor t = kiln::empty(sizes);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_ptr<float>()[i] = dist(gen);
  return t;
}

inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  return amax(abs(a.to(DType::Float64) - b.to(DType::Float64))).item<double>();
}

// Prints `traced`, parses the text in a fresh context and interprets it on `inputs`.
inline TensorList interpret_printed(const jit::TracedFunction& traced, const TensorList& inputs) {
  auto ctx = jit::make_context();
  mlir::ModuleOp parsed = jit::parse_module(*ctx, traced.str());
  TensorList args = inputs;
  args.insert(args.end(), traced.captures().begin(), traced.captures().end());
  TensorList out = jit::interpret(parsed, args);
  parsed->erase();
  return out;
}

// Traces fn, checks the text round trip and that the interpreter reproduces eager outputs.
inline void expect_round_trip(const std::function<TensorList(const TensorList&)>& fn,
                              const TensorList& inputs, const jit::TraceOptions& options = {},
                              double tol = 1e-5) {
  TensorList eager = fn(inputs);
  jit::TracedFunction traced = jit::trace(fn, inputs, options);
  const std::string text = traced.str();
  TensorList replay = interpret_printed(traced, inputs);
  ASSERT_EQ(replay.size(), eager.size()) << text;
  for (size_t i = 0; i < eager.size(); ++i) {
    ASSERT_EQ(replay[i].sizes(), eager[i].sizes()) << text;
    EXPECT_LE(max_abs_diff(replay[i], eager[i]), tol) << "output " << i << "\n" << text;
  }
  // And the TracedFunction's own call path (guards + captures).
  TensorList direct = traced(inputs);
  for (size_t i = 0; i < eager.size(); ++i) EXPECT_LE(max_abs_diff(direct[i], eager[i]), tol);
}

}  // namespace kiln::test
