// Traces that are never silently wrong (issue #28): a value read back while tracing becomes a
// kiln.guard checked by every backend (interpreter, JIT, artifact); jit::compile(fn) re-traces
// when a guard fails; raw data_ptr writes and opaque custom Functions are refused; check_trace
// compares eager and the trace on new inputs.

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "helpers.h"
#include "kiln/control_flow.h"
#include "kiln/custom_function.h"
#include "kiln/jit/compile.h"
#include "kiln/jit/save.h"
#include "kiln/kiln.h"
#include "kiln/runtime/model.h"
#include "kiln/trace/eliminate_gradients.h"

namespace kiln {
namespace {

using test::rnd;

// Doubles x where its sum is positive, negates it otherwise: a branch on a read-back value.
constexpr unsigned kReadBackLine = __LINE__ + 2;  // the read-back line the guard names
TensorList branchy(const TensorList& x) {
  if (sum(x[0]).item<float>() > 0) return {x[0] * 2.0};
  return {x[0] * -1.0};
}
// Independent reference of branchy, in float64.
double branchy_reference(double v, double total) {
  return total > 0 ? 2 * v : -v;
}

jit::TraceOptions quiet() {
  jit::TraceOptions o;
  o.warn_on_read_back = false;
  return o;
}

void expect_guard_error(const std::function<void()>& run, double traced, double actual) {
  try {
    run();
    ADD_FAILURE() << "expected a GuardError";
  } catch (const GuardError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("test_guards.cpp:" + std::to_string(kReadBackLine)), std::string::npos)
        << what;
    EXPECT_NE(what.find("read the value " + std::to_string(static_cast<int>(traced))),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("this input gives " + std::to_string(static_cast<int>(actual))),
              std::string::npos)
        << what;
  }
}

TEST(Guards, ReadBackBecomesAGuardInTheIR) {
  jit::TracedFunction t = jit::trace(branchy, {ones({3})}, quiet());
  const std::string ir = t.str();
  EXPECT_NE(ir.find("kiln.guard"), std::string::npos) << ir;
  EXPECT_NE(ir.find("value = 3.0"), std::string::npos) << ir;
  ASSERT_EQ(t.read_backs().size(), 1u);
  EXPECT_EQ(t.read_backs()[0].line, kReadBackLine);
}

TEST(Guards, InterpreterChecksTheValue) {
  jit::TracedFunction t = jit::trace(branchy, {ones({3})}, quiet());
  // Another input with the same sum passes and gives eager's numbers.
  Tensor same = tensor({0.5f, 1.0f, 1.5f});
  Tensor y = t({same})[0];
  for (int i = 0; i < 3; ++i)
    EXPECT_FLOAT_EQ(y.index({i}).item<float>(), branchy_reference(0.5 * (i + 1), 3.0));
  // An input taking the other branch: refused, naming the line and both values.
  expect_guard_error([&] { t({full({3}, -1.0)}); }, 3, -3);
}

TEST(Guards, CompiledCodeChecksTheValue) {
  jit::TracedFunction t = jit::trace(branchy, {ones({3})}, quiet());
  jit::CompiledFunction f = jit::compile(t);
  Tensor y = f({tensor({3.0f, 0.0f, 0.0f})})[0];
  EXPECT_FLOAT_EQ(y.index({0}).item<float>(), 6.0f);
  expect_guard_error([&] { f({full({3}, -1.0)}); }, 3, -3);
}

TEST(Guards, ArtifactChecksTheValue) {
  jit::TracedFunction t = jit::trace(branchy, {ones({3})}, quiet());
  auto model = rt::Model::from_bytes(jit::save_to_bytes(t));
  rt::Session s(model);
  Tensor ok = tensor({1.0f, 1.0f, 1.0f});
  auto y = s.run({ok.impl()});
  EXPECT_FLOAT_EQ(Tensor(y[0]).index({2}).item<float>(), 2.0f);
  Tensor bad = full({3}, -1.0);
  expect_guard_error([&] { s.run({bad.impl()}); }, 3, -3);
}

// A failed guard leaves a training step's state as it was: nothing is written back.
TEST(Guards, FailedGuardLeavesInOutStateUnchanged) {
  Tensor w = rnd({3}, 5);
  Tensor before = w.clone();
  auto step = [&](const TensorList& x) {
    if (sum(x[0]).item<float>() > 0) add_(w, x[0], 0.5);  // writes the captured w in place
    return TensorList{w * 1.0};
  };
  jit::TracedFunction t = jit::trace(step, {ones({3})}, quiet());
  w.copy_(before);  // tracing ran the step eagerly once
  jit::CompiledFunction f = jit::compile(t);
  EXPECT_THROW(f({full({3}, -1.0)}), GuardError);
  EXPECT_EQ(test::max_abs_diff(w, before), 0.0);
  EXPECT_THROW(t({full({3}, -1.0)}), GuardError);
  EXPECT_EQ(test::max_abs_diff(w, before), 0.0);
}

TEST(Guards, NaNEqualsNaN) {
  auto fn = [](const TensorList& x) {
    const float m = amax(x[0]).item<float>();
    return TensorList{x[0] + static_cast<double>(std::isnan(m) ? 0.0f : 1.0f)};
  };
  Tensor nan_input = tensor({1.0f, NAN});
  jit::TracedFunction t = jit::trace(fn, {nan_input}, quiet());
  Tensor y = t({tensor({NAN, 2.0f})})[0];
  EXPECT_FLOAT_EQ(y.index({1}).item<float>(), 2.0f);
  EXPECT_THROW(t({tensor({1.0f, 2.0f})}), GuardError);
}

// A read-back of a one-element tensor of rank 1 ([1], not []): every backend reads it.
TEST(Guards, OneElementOfAnyRank) {
  auto fn = [](const TensorList& x) {
    const double v = x[0].item<double>();
    return TensorList{x[0] * v};
  };
  jit::TracedFunction t = jit::trace(fn, {tensor({3.0})}, quiet());
  EXPECT_FLOAT_EQ(t({tensor({3.0})})[0].item<float>(), 9.0f);
  EXPECT_THROW(t({tensor({2.0})}), GuardError);
  EXPECT_THROW(jit::compile(t)({tensor({2.0})}), GuardError);
  rt::Session s(rt::Model::from_bytes(jit::save_to_bytes(t)));
  Tensor ok = tensor({3.0}), bad = tensor({2.0});
  EXPECT_FLOAT_EQ(Tensor(s.run({ok.impl()})[0]).item<float>(), 9.0f);
  EXPECT_THROW(s.run({bad.impl()}), GuardError);
}

// A small counter is inlined as a constant at first sight, then written in place (an in-out
// argument): the value read before the write is still guarded.
TEST(Guards, CounterReadBeforeItsWriteIsGuarded) {
  Tensor counter = scalar_tensor(0, TensorOptions(DType::Int64));
  auto fn = [&](const TensorList& x) {
    Tensor y = counter.item<int64_t>() % 2 == 0 ? x[0] * 2.0 : x[0] * 3.0;
    add_(counter, 1.0);
    return TensorList{y};
  };
  jit::TracedFunction t = jit::trace(fn, {ones({2})}, quiet());
  ASSERT_EQ(t.mutated_captures().size(), 1u);
  // The counter is 1 now: the traced even branch does not apply.
  EXPECT_THROW(t({ones({2})}), GuardError);
  EXPECT_EQ(counter.item<int64_t>(), 1);  // and the failed call wrote nothing back
}

TEST(Guards, ReadBackInsideALoopBodyIsRefused) {
  auto fn = [](const TensorList& x) {
    return loop(3,
                [](const Tensor&, const TensorList& c) {
                  const double v = sum(c[0]).item<double>();
                  return TensorList{c[0] * (v > 0 ? 2.0 : 1.0)};
                },
                {x[0]});
  };
  try {
    jit::trace(fn, {ones({2})}, quiet());
    FAIL() << "a read-back inside a loop body was traced";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("inside a kiln::loop body"), std::string::npos)
        << e.what();
  }
}

// jit::compile(fn): a failed guard re-traces and keeps both specializations.
TEST(Guards, CompileRetracesOnAFailedGuard) {
  int traced_calls = 0;
  auto fn = [&](const TensorList& x) {
    ++traced_calls;
    return branchy(x);
  };
  jit::SpecializedFunction f = jit::compile(fn);
  const Tensor pos = tensor({1.0f, 2.0f, 3.0f}), neg = tensor({-1.0f, -2.0f, 0.5f});
  for (int round = 0; round < 2; ++round) {
    for (const Tensor& x : {pos, neg}) {
      Tensor y = f({x})[0];
      const double total = sum(x.to(DType::Float64)).item<double>();
      for (int i = 0; i < 3; ++i)
        EXPECT_FLOAT_EQ(y.index({i}).item<float>(),
                        branchy_reference(x.index({i}).item<float>(), total));
    }
  }
  // Each specialization was traced once (a trace runs fn once); the second round ran compiled
  // code only. The positive input's guard holds for pos (sum 6) but not for a positive input of
  // another sum, which is a third specialization: guards compare the value, not the branch.
  EXPECT_EQ(f.num_specializations(), 2u);
  EXPECT_EQ(traced_calls, 2);
  f({tensor({1.0f, 1.0f, 1.0f})});
  EXPECT_EQ(f.num_specializations(), 3u);
  // Another shape: its own specialization.
  f({ones({5})});
  EXPECT_EQ(f.num_specializations(), 4u);
}

TEST(Guards, CompileRunsEagerlyPastTheLimit) {
  jit::SpecializeOptions options;
  options.max_specializations = 1;
  jit::SpecializedFunction f = jit::compile(branchy, options);
  f({ones({3})});
  Tensor y = f({full({3}, -1.0)})[0];  // guard fails, no room: eager
  EXPECT_FLOAT_EQ(y.index({0}).item<float>(), 1.0f);
  EXPECT_EQ(f.num_specializations(), 1u);
  EXPECT_EQ(f.num_eager_calls(), 1u);
}

// A training step that logs loss.item(): the guard protects only the step's own tail, so the
// inference function derived from it keeps neither the guard nor the loss and its targets.
TEST(Guards, EliminateGradientsDropsGuardsOnDroppedWork) {
  Tensor w = rnd({4, 2}, 9).requires_grad_();
  auto step = [&](const TensorList& in) {
    Tensor logits = matmul(in[0], w);
    Tensor loss = cross_entropy(logits, in[1]);
    const double logged = loss.item<double>();  // logging: a read-back
    (void)logged;
    loss.backward();
    {
      autograd::NoGradGuard no_grad;
      add_(w, w.grad(), -0.1);
    }
    w.grad().zero_();
    return TensorList{logits};
  };
  Tensor target = tensor({0, 1, 1}, DType::Int64);
  jit::TracedFunction t = jit::trace(step, {rnd({3, 4}, 10), target}, quiet());
  EXPECT_NE(t.str().find("kiln.guard"), std::string::npos);
  jit::eliminate_gradients(t, /*drop_loss_head=*/false);
  jit::TracedFunction& inference = t;
  const std::string ir = inference.str();
  EXPECT_EQ(ir.find("kiln.guard"), std::string::npos) << ir;
  EXPECT_EQ(ir.find("cross_entropy"), std::string::npos) << ir;
}

// Found by the trace fuzzer: the host chose which value to return by what it read, and the value
// was computed before the read. The saved artifact (whose pipeline drops guards only where it
// drops results) must check it.
TEST(Guards, ArtifactChecksAChoiceOfAnEarlierValue) {
  auto fn = [](const TensorList& in) {
    Tensor early = relu(in[0]);
    const double r = (in[0] * 2.0).sum().item<double>();
    return TensorList{r > 0 ? early : in[0] * r};
  };
  jit::TracedFunction t = jit::trace(fn, {abs(rnd({6}, 40))}, quiet());
  auto model = rt::Model::from_bytes(jit::save_to_bytes(t));
  rt::Session session(model);
  const Tensor negative = -abs(rnd({6}, 41));
  EXPECT_THROW(session.run({negative.impl()}), GuardError);
}

// --- raw memory and opaque functions

struct RawCube : autograd::Function<RawCube> {
  static Tensor forward(autograd::AutogradContext* ctx, const Tensor& x) {
    ctx->save_for_backward({x});
    Tensor c = x.contiguous();
    Tensor y = kiln::empty(x.sizes());
    for (int64_t i = 0; i < x.numel(); ++i) {
      const float v = c.data_ptr<float>()[i];
      y.data_ptr<float>()[i] = v * v * v;  // computed where the tracer cannot see
    }
    return y;
  }
  static TensorList backward(autograd::AutogradContext* ctx, TensorList grads) {
    Tensor x = ctx->get_saved_variables()[0];
    return {grads[0] * 3.0 * x * x};
  }
};

struct OpsCube : autograd::Function<OpsCube> {
  static Tensor forward(autograd::AutogradContext* ctx, const Tensor& x) {
    ctx->save_for_backward({x});
    return x * x * x;
  }
  static TensorList backward(autograd::AutogradContext* ctx, TensorList grads) {
    Tensor x = ctx->get_saved_variables()[0];
    return {grads[0] * 3.0 * x * x};
  }
};

TEST(RawAccess, OpaqueCustomFunctionIsRefusedWithItsName) {
  auto fn = [](const TensorList& x) { return TensorList{RawCube::apply(x[0]) + 1.0}; };
  try {
    jit::trace(fn, {rnd({4}, 1)}, quiet());
    FAIL() << "an opaque custom Function was traced";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("RawCube"), std::string::npos) << what;
    EXPECT_NE(what.find("no kiln op produced"), std::string::npos) << what;
  }
  // Eager use is untouched.
  Tensor x = tensor({2.0f});
  EXPECT_FLOAT_EQ(RawCube::apply(x).item<float>(), 8.0f);
}

// A custom Function returning a tensor no op produced but nothing wrote raw (a factory's
// constant) traces: it is a constant of the trace, as anywhere else.
struct ConstantBias : autograd::Function<ConstantBias> {
  static Tensor forward(autograd::AutogradContext*, const Tensor& x) {
    return full(x.sizes(), 0.5);
  }
  static TensorList backward(autograd::AutogradContext*, TensorList grads) {
    return {zeros_like(grads[0])};
  }
};

TEST(RawAccess, CustomFunctionReturningAConstantTraces) {
  auto fn = [](const TensorList& x) { return TensorList{x[0] + ConstantBias::apply(x[0])}; };
  jit::TracedFunction t = jit::trace(fn, {rnd({4}, 1)}, quiet());
  Tensor x = rnd({4}, 2);
  EXPECT_LE(test::max_abs_diff(t({x})[0], x + 0.5), 1e-7);
}

TEST(RawAccess, CustomFunctionMadeOfOpsTraces) {
  auto fn = [](const TensorList& x) { return TensorList{OpsCube::apply(x[0]) + 1.0}; };
  jit::TracedFunction t = jit::trace(fn, {rnd({4}, 1)}, quiet());
  Tensor x = tensor({1.0f, -2.0f, 0.5f, 3.0f});
  Tensor y = t({x})[0];
  for (int i = 0; i < 4; ++i) {
    const double v = x.index({i}).item<float>();
    EXPECT_FLOAT_EQ(y.index({i}).item<float>(), v * v * v + 1);
  }
}

TEST(RawAccess, TensorWrittenThroughDataPtrIsRefused) {
  auto fn = [](const TensorList& x) {
    Tensor scale = kiln::empty({32});
    const float first = x[0].index({0}).item<float>();  // guarded; the table is not
    for (int i = 0; i < 32; ++i) scale.data_ptr<float>()[i] = first * static_cast<float>(i);
    return TensorList{x[0] * scale};
  };
  try {
    jit::trace(fn, {rnd({32}, 2)}, quiet());
    FAIL() << "a tensor written through data_ptr reached the trace";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("written through data_ptr()"), std::string::npos) << what;
    EXPECT_NE(what.find("test_guards.cpp"), std::string::npos) << what;
    EXPECT_NE(what.find("mark_constant"), std::string::npos) << what;
  }
}

TEST(RawAccess, MarkConstantAcceptsATable) {
  auto fn = [](const TensorList& x) {
    Tensor table = kiln::empty({32});
    for (int i = 0; i < 32; ++i) table.data_ptr<float>()[i] = static_cast<float>(i * i);
    jit::mark_constant(table);
    return TensorList{x[0] + table};
  };
  jit::TracedFunction t = jit::trace(fn, {rnd({32}, 3)}, quiet());
  Tensor x = rnd({32}, 4);
  Tensor y = t({x})[0];
  for (int i = 0; i < 32; i += 7)
    EXPECT_FLOAT_EQ(y.index({i}).item<float>(), x.index({i}).item<float>() + i * i);
}

// Values read raw may decide what follows, as item()'s do: a small input-dependent tensor read
// through data_ptr() gets a guard per element (the same input runs, another one is a
// GuardError naming the read, never a result scaled by the traced value); a large one is
// refused; reading a constant's memory needs nothing.
TEST(RawAccess, ReadingRawIsGuarded) {
  auto fn = [](const TensorList& x) {
    const float first = x[0].data_ptr<float>()[0];
    return TensorList{x[0] * static_cast<double>(first)};
  };
  const Tensor x = rnd({8}, 5);
  jit::TracedFunction t = jit::trace(fn, {x}, quiet());
  EXPECT_EQ(test::max_abs_diff(t({x})[0], fn({x})[0]), 0.0);
  try {
    t({rnd({8}, 6)});
    FAIL() << "a raw read was baked into the trace";
  } catch (const GuardError& e) {
    EXPECT_NE(std::string(e.what()).find("data_ptr"), std::string::npos) << e.what();
  }
  auto large = [](const TensorList& x) {
    const float first = x[0].data_ptr<float>()[0];
    return TensorList{x[0] * static_cast<double>(first)};
  };
  try {
    jit::trace(large, {rnd({64}, 7)}, quiet());
    FAIL() << "a large raw read was traced";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("data_ptr() at"), std::string::npos) << e.what();
  }
  auto constant = [](const TensorList& x) {
    Tensor c = full({64}, 2.0);
    const float two = c.data_ptr<float>()[0];
    return TensorList{x[0] * static_cast<double>(two)};
  };
  jit::TracedFunction tc = jit::trace(constant, {rnd({64}, 8)}, quiet());
  const Tensor x2 = rnd({64}, 9);
  EXPECT_EQ(test::max_abs_diff(tc({x2})[0], x2 * 2.0), 0.0);
}

// A traced value written raw after the trace recorded it, then used again: refused.
TEST(RawAccess, TracedValueWrittenRawIsRefused) {
  auto fn = [](const TensorList& x) {
    Tensor y = x[0] * 2.0;
    y.data_ptr<float>()[0] = 42.0f;
    return TensorList{y + 1.0};
  };
  EXPECT_THROW(jit::trace(fn, {rnd({8}, 7)}, quiet()), Error);
}

// A traced in-place op on memory handed out raw is seen by the trace: no false alarm.
TEST(RawAccess, TracedWritesAfterRawReadsAreFine) {
  auto fn = [](const TensorList& x) {
    Tensor y = x[0] * 2.0;
    volatile float peek = y.data_ptr<float>()[0];
    (void)peek;
    mul_(y, 3.0);
    return TensorList{y + 1.0};
  };
  // (The peek guards y's values, so the trace runs its own input.)
  const Tensor x = rnd({8}, 8);
  jit::TracedFunction t = jit::trace(fn, {x}, quiet());
  EXPECT_LE(test::max_abs_diff(t({x})[0], x * 6.0 + 1.0), 1e-6);
}

// A captured parameter written raw while tracing (an update the trace cannot see): refused.
TEST(RawAccess, CaptureWrittenRawIsRefused) {
  Tensor w = rnd({64}, 11);
  auto fn = [&](const TensorList& x) {
    Tensor y = x[0] * w;
    w.data_ptr<float>()[0] += 1.0f;
    return TensorList{y};
  };
  EXPECT_THROW(jit::trace(fn, {rnd({64}, 12)}, quiet()), Error);
}

TEST(RawAccess, PrintingInsideATraceIsNotRecorded) {
  auto fn = [](const TensorList& x) {
    std::ostringstream os;
    os << x[0];
    return TensorList{x[0] + 1.0};
  };
  jit::TracedFunction t = jit::trace(fn, {rnd({4}, 13)}, quiet());
  EXPECT_EQ(t.str().find("kiln.to"), std::string::npos) << t.str();
}

// --- check_trace

TEST(CheckTrace, ReportsInputsTheTraceRefuses) {
  jit::TraceCheck c =
      jit::check_trace(branchy, {{ones({3})}, {ones({3})}, {full({3}, -1.0)}}, 1e-5, 1e-6, quiet());
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.report.find("input set 1"), std::string::npos) << c.report;
  EXPECT_NE(c.report.find("input set 2: the trace refuses it"), std::string::npos) << c.report;
  EXPECT_NE(c.report.find("test_guards.cpp:" + std::to_string(kReadBackLine)), std::string::npos)
      << c.report;
}

TEST(CheckTrace, ReportsNumbersThatDiverge) {
  // A counter outside the tracer's view: eager results change from call to call, the trace
  // replays the first call's constant.
  int calls = 0;
  auto fn = [&](const TensorList& x) { return TensorList{x[0] + static_cast<double>(++calls)}; };
  jit::TraceCheck c = jit::check_trace(fn, {{ones({2})}, {ones({2})}});
  EXPECT_FALSE(c.ok);
  EXPECT_NE(c.report.find("input set 1: output 0: element 0: eager 3, the trace 2"),
            std::string::npos)
      << c.report;
}

TEST(CheckTrace, AgreesOnAFaithfulTrace) {
  Tensor w = rnd({4, 3}, 14);
  auto fn = [&](const TensorList& x) { return TensorList{tanh(matmul(x[0], w))}; };
  jit::TraceCheck c =
      jit::check_trace(fn, {{rnd({2, 4}, 15)}, {rnd({2, 4}, 16)}, {rnd({2, 4}, 17)}});
  EXPECT_TRUE(c.ok) << c.report;
  EXPECT_EQ(c.report, "");
}

}  // namespace
}  // namespace kiln
