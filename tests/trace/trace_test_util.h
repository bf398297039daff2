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

// A second input of the same shapes and dtypes with other values: each floating element is
// multiplied by its own factor in [0.75, 1.0), so signs and domains (positivity, [-1, 1]) are kept;
// integer and bool inputs (indices, targets) stay as they are. An op the tracer failed to record
// replays as a constant captured from the traced input: only a second input shows it.
inline TensorList second_input(const TensorList& inputs, uint32_t seed = 12345) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> factor(0.75, 1.0);
  TensorList out;
  for (const Tensor& x : inputs) {
    if (!x.defined() || !is_floating(x.dtype())) {
      out.push_back(x);
      continue;
    }
    Tensor f = kiln::empty(x.sizes(), TensorOptions(DType::Float64));
    for (int64_t i = 0; i < f.numel(); ++i) f.data_ptr<double>()[i] = factor(gen);
    out.push_back((x.to(DType::Float64) * f).to(x.dtype()));
  }
  return out;
}

// Traces fn, checks the text round trip and that the interpreter reproduces eager outputs, on the
// traced input and on a second input (second_input) against eager on that input.
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

  // The same function on a second input: both paths against eager on that input.
  const TensorList inputs2 = second_input(inputs);
  TensorList eager2 = fn(inputs2);
  ASSERT_EQ(eager2.size(), eager.size());
  TensorList replay2 = interpret_printed(traced, inputs2);
  TensorList direct2 = traced(inputs2);
  ASSERT_EQ(replay2.size(), eager2.size()) << text;
  ASSERT_EQ(direct2.size(), eager2.size()) << text;
  for (size_t i = 0; i < eager2.size(); ++i) {
    ASSERT_EQ(replay2[i].sizes(), eager2[i].sizes()) << text;
    ASSERT_EQ(direct2[i].sizes(), eager2[i].sizes()) << text;
    EXPECT_LE(max_abs_diff(replay2[i], eager2[i]), tol)
        << "output " << i << " on the second input (interpreted)\n"
        << text;
    EXPECT_LE(max_abs_diff(direct2[i], eager2[i]), tol)
        << "output " << i << " on the second input (TracedFunction)";
  }
}

}  // namespace kiln::test
