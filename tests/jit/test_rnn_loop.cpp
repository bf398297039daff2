// nn::LSTM / nn::GRU traced without gradients record their time steps as one scf.for (#24:
// loops stay loops): the cell appears once whatever the sequence length, and the compiled code,
// the optimized-and-compiled code and the saved artifact agree with eager on inputs other than
// the example. Traces that record gradients keep the steps unrolled (gradients do not flow
// through a traced loop).
#include <gtest/gtest.h>

#include "helpers.h"
#include "kiln/control_flow.h"
#include "kiln/jit/compile.h"
#include "kiln/jit/save.h"
#include "kiln/kiln.h"
#include "kiln/passes/Passes.h"
#include "kiln/runtime/model.h"
#include "kiln/trace/freeze.h"
#include "kiln/trace/trace.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"

using namespace kiln;
using kiln::test::max_abs_diff;
using kiln::test::no_disk;
using kiln::test::rnd;

namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Traces the module's full output list in eval mode without autograd, parameters named.
jit::TracedFunction trace_rnn(nn::RNNBase& m, const TensorList& example) {
  m.eval();
  autograd::NoGradGuard no_grad;
  jit::TraceOptions options;
  for (const auto& [n, p] : m.named_parameters()) options.named_captures.push_back({n, p});
  return jit::trace([&](const TensorList& in) { return m.forward_list(in); }, example, options);
}

TensorList eager(nn::RNNBase& m, const TensorList& in) {
  autograd::NoGradGuard no_grad;
  return m.forward_list(in);
}

void expect_lists_close(const TensorList& got, const TensorList& want, double tol,
                        const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(got[i].sizes(), want[i].sizes()) << what << " output " << i;
    EXPECT_LE(max_abs_diff(got[i], want[i]), tol) << what << " output " << i;
  }
}

struct Case {
  bool lstm;
  nn::RNNOptions options;
  bool with_state;
  bool unbatched = false;
};

std::shared_ptr<nn::RNNBase> make(const Case& c) {
  if (c.lstm) return std::make_shared<nn::LSTM>(c.options);
  return std::make_shared<nn::GRU>(c.options);
}

// Inputs of sequence length T for the case (seed varies the values).
TensorList inputs(const Case& c, int64_t T, uint32_t seed) {
  const auto& o = c.options;
  const int64_t N = 3, S = o.num_layers() * (o.bidirectional() ? 2 : 1);
  Tensor x = c.unbatched       ? rnd({T, o.input_size()}, seed)
             : o.batch_first() ? rnd({N, T, o.input_size()}, seed)
                               : rnd({T, N, o.input_size()}, seed);
  TensorList in{x};
  if (c.with_state) {
    const Dims state = c.unbatched ? Dims{S, o.hidden_size()} : Dims{S, N, o.hidden_size()};
    in.push_back(rnd(state, seed + 1));
    if (c.lstm) in.push_back(rnd(state, seed + 2));
  }
  return in;
}

std::vector<Case> cases() {
  return {
      {true, nn::RNNOptions(5, 7), false},
      {true, nn::RNNOptions(5, 7).num_layers(2).bidirectional(true), true},
      {true, nn::RNNOptions(4, 6).batch_first(true), true},
      {true, nn::RNNOptions(4, 6).bias(false), false, true},
      {false, nn::RNNOptions(5, 7).num_layers(2), true},
      {false, nn::RNNOptions(3, 8).bidirectional(true).batch_first(true), false},
  };
}

std::string name(const Case& c) {
  std::ostringstream os;
  os << (c.lstm ? "LSTM" : "GRU") << "(" << c.options.input_size() << ", "
     << c.options.hidden_size() << ", layers " << c.options.num_layers()
     << (c.options.bidirectional() ? ", bidirectional" : "")
     << (c.options.batch_first() ? ", batch_first" : "") << (c.with_state ? ", h0" : "")
     << (c.unbatched ? ", unbatched" : "") << ")";
  return os.str();
}

}  // namespace

TEST(RnnLoop, TheCellIsRecordedOnceWhateverTheSequenceLength) {
  for (const Case& c : cases()) {
    auto m = make(c);
    const std::string short_ir = trace_rnn(*m, inputs(c, 3, 1)).str();
    const std::string long_ir = trace_rnn(*m, inputs(c, 40, 1)).str();
    const size_t loops =
        static_cast<size_t>(c.options.num_layers()) * (c.options.bidirectional() ? 2u : 1u);
    EXPECT_EQ(count(long_ir, "scf.for"), loops) << name(c);
    // The same ops whatever T: one copy of the cell per layer and direction.
    EXPECT_EQ(count(long_ir, "kiln.sigmoid"), count(short_ir, "kiln.sigmoid")) << name(c);
    EXPECT_EQ(count(long_ir, "kiln.linear"), count(short_ir, "kiln.linear")) << name(c);
  }
}

TEST(RnnLoop, CompiledAndSavedLoopsMatchEager) {
  for (const Case& c : cases()) {
    auto m = make(c);
    jit::TracedFunction traced = trace_rnn(*m, inputs(c, 6, 11));
    jit::CompiledFunction f = jit::compile(traced, no_disk());
    auto model = rt::Model::from_bytes(jit::save_to_bytes(traced));
    rt::Session session(model);
    for (uint32_t seed : {11u, 23u}) {  // the example, then other values
      const TensorList in = inputs(c, 6, seed);
      const TensorList want = eager(*m, in);
      expect_lists_close(traced(in), want, 1e-6, name(c) + " interpreter");
      expect_lists_close(f(in), want, 1e-5, name(c) + " JIT");
      std::vector<const TensorImpl*> args;
      for (const Tensor& t : in) args.push_back(t.impl());
      TensorList saved;
      for (const auto& t : session.run(args)) saved.push_back(Tensor(t));
      expect_lists_close(saved, want, 1e-5, name(c) + " artifact");
    }
  }
}

TEST(RnnLoop, TheInferencePipelineKeepsTheLoop) {
  for (const Case& c : cases()) {
    auto m = make(c);
    jit::TracedFunction traced = trace_rnn(*m, inputs(c, 5, 3));
    jit::freeze(traced);
    mlir::PassManager pm(&traced.context());
    passes::build_inference_pipeline(pm);
    ASSERT_TRUE(mlir::succeeded(pm.run(traced.module()))) << name(c);
    EXPECT_GT(count(traced.str(), "scf.for"), 0u) << name(c);
    jit::CompiledFunction f = jit::compile(traced, no_disk());
    const TensorList in = inputs(c, 5, 9);
    expect_lists_close(f(in), eager(*m, in), 1e-5, name(c) + " optimized JIT");
    auto model = rt::Model::from_bytes(jit::save_to_bytes(traced));
    rt::Session session(model);
    std::vector<const TensorImpl*> args;
    for (const Tensor& t : in) args.push_back(t.impl());
    TensorList saved;
    for (const auto& t : session.run(args)) saved.push_back(Tensor(t));
    expect_lists_close(saved, eager(*m, in), 1e-5, name(c) + " optimized artifact");
  }
}

TEST(RnnLoop, TracesThatRecordGradientsUnrollTheSteps) {
  auto m = std::make_shared<nn::LSTM>(4, 5);
  Tensor x = rnd({3, 2, 4}, 5);
  jit::TracedFunction traced =
      jit::trace([&](const TensorList& in) { return TensorList{(*m)(in[0]).output.sum()}; }, {x});
  const std::string ir = traced.str();
  EXPECT_EQ(count(ir, "scf.for"), 0u);
  EXPECT_EQ(count(ir, "kiln.sigmoid"), 3u * 3u);  // three gates a step, three steps
}

// The in-place rule's edges in a plain kiln::loop: a carried tensor only updated (index_add:
// computed in the carried buffer), one also read after its update (copied as before), and a
// masked_fill (an elementwise update) — compiled and saved, against eager.
TEST(RnnLoop, UpdatesOfACarriedTensorInPlaceOrCopied) {
  auto fn = [](const TensorList& in) {
    return loop(4,
                [&](const Tensor& i, const TensorList& c) {
                  const Tensor row = i.reshape({1});
                  Tensor only_updated =
                      index_add(c[0], 0, row, in[1] * (i.to(DType::Float32) + 1.0));
                  Tensor also_read = index_add(c[1], 0, row, in[1]);
                  // Reads c[1]'s old value after its update: c[1] must not be updated in place.
                  Tensor filled = masked_fill(c[2], gt(c[1], c[2]), -1.0);
                  return TensorList{only_updated, also_read, filled};
                },
                {in[0], in[0] * 0.5, in[0] - 0.25});
  };
  const TensorList example{rnd({4, 3}, 1), rnd({1, 3}, 2)};
  jit::TracedFunction traced = jit::trace(fn, example);
  jit::CompiledFunction f = jit::compile(traced, no_disk());
  auto model = rt::Model::from_bytes(jit::save_to_bytes(traced));
  rt::Session session(model);
  for (uint32_t seed : {1u, 7u}) {
    const TensorList in{rnd({4, 3}, seed), rnd({1, 3}, seed + 1)};
    const TensorList want = fn(in);
    expect_lists_close(f(in), want, 1e-5, "JIT");
    std::vector<const TensorImpl*> args{in[0].impl(), in[1].impl()};
    TensorList saved;
    for (const auto& t : session.run(args)) saved.push_back(Tensor(t));
    expect_lists_close(saved, want, 1e-5, "artifact");
  }
}
