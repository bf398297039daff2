// Trace -> print -> parse -> interpret equals eager, for small stand-ins of the zoo's model
// families; guards; read-back warnings; bytecode round trip.
#include <gtest/gtest.h>

#include <random>

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"

#include "kiln/kiln.h"
#include "kiln/trace/module.h"
#include "kiln/trace/trace.h"
#include "trace_test_util.h"

using namespace kiln;
using namespace kiln::test;

TEST(Trace, MlpRoundTrip) {
  Tensor w1 = rnd({32, 16}, 1, 0.2), b1 = rnd({32}, 2), w2 = rnd({10, 32}, 3, 0.2);
  auto mlp = [&](const TensorList& x) {
    Tensor h = relu(linear(x[0], w1, b1));
    return TensorList{log_softmax(linear(h, w2), 1)};
  };
  jit::TraceOptions options;
  options.named_captures = {{"fc1.weight", w1}, {"fc1.bias", b1}, {"fc2.weight", w2}};
  expect_round_trip(mlp, {rnd({4, 16}, 4)}, options);
  jit::TracedFunction t = jit::trace(mlp, {rnd({4, 16}, 4)}, options);
  EXPECT_EQ(t.arg_names(),
            (std::vector<std::string>{"input0", "fc1.weight", "fc1.bias", "fc2.weight"}));
  EXPECT_NE(t.str().find("kiln.linear"), std::string::npos);
  EXPECT_NE(t.str().find("kiln.none"), std::string::npos);  // fc2 has no bias
}

TEST(Trace, ConvNetRoundTrip) {
  Tensor c1 = rnd({6, 1, 5, 5}, 11, 0.2), cb = rnd({6}, 12);
  Tensor bn_mean = rnd({6}, 13, 0.1), bn_var = full({6}, 1.5), bn_w = rnd({6}, 14),
         bn_b = rnd({6}, 15);
  Tensor fc = rnd({10, 6 * 6 * 6}, 16, 0.05);
  auto net = [&](const TensorList& x) {
    Tensor h = conv2d(x[0], c1, cb, 1, 2);
    h = batch_norm(h, bn_mean, bn_var, bn_w, bn_b, false);
    h = max_pool2d(relu(h), 2);
    h = avg_pool2d(h, 2, 2);
    h = adaptive_avg_pool2d(h, 6).flatten(1);
    return TensorList{linear(h, fc)};
  };
  expect_round_trip(net, {rnd({2, 1, 24, 24}, 17)});
}

TEST(Trace, TransformerBlockRoundTrip) {
  const int64_t d = 8;
  Tensor wq = rnd({d, d}, 21, 0.3), wk = rnd({d, d}, 22, 0.3), wv = rnd({d, d}, 23, 0.3);
  Tensor ln_w = rnd({d}, 24), ln_b = rnd({d}, 25), w1 = rnd({16, d}, 26, 0.3),
         w2 = rnd({d, 16}, 27, 0.3);
  auto block = [&](const TensorList& in) {
    const Tensor& x = in[0];
    Tensor h = layer_norm(x, Dims{d}, ln_w, ln_b);
    Tensor q = linear(h, wq), k = linear(h, wk), v = linear(h, wv);
    Tensor att = softmax(matmul(q, k.transpose(-2, -1)) / std::sqrt(double(d)), -1);
    Tensor y = x + matmul(att, v);
    return TensorList{y + linear(gelu(linear(y, w1)), w2)};
  };
  expect_round_trip(block, {rnd({2, 5, d}, 28)});
}

TEST(Trace, LstmCellRoundTrip) {
  const int64_t in = 4, hid = 3;
  Tensor w_ih = rnd({4 * hid, in}, 31, 0.3), w_hh = rnd({4 * hid, hid}, 32, 0.3),
         b = rnd({4 * hid}, 33);
  auto cell = [&](const TensorList& x) {
    Tensor h = zeros({2, hid}), c = zeros({2, hid});
    for (int64_t t = 0; t < x[0].size(1); ++t) {
      Tensor gates = linear(x[0].select(1, t), w_ih, b) + linear(h, w_hh);
      TensorList g = chunk(gates, 4, 1);
      Tensor i = sigmoid(g[0]), f = sigmoid(g[1]), gg = tanh(g[2]), o = sigmoid(g[3]);
      c = f * c + i * gg;
      h = o * tanh(c);
    }
    return TensorList{h, c};
  };
  expect_round_trip(cell, {rnd({2, 5, in}, 34)});
}

TEST(Trace, ElementwiseScalarsAndIndexing) {
  auto fn = [](const TensorList& x) {
    Tensor a = (x[0] * 2.0 + 1.0) / 3.0 - 0.5;
    Tensor b = 1.0 - clamp(a, -0.3, 0.7);
    Tensor c = cat({b, leaky_relu(a, 0.2)}, 1);
    Tensor d = where(c > 0.0, c, exp(c));
    return TensorList{sum(d, {1}), amax(d, Dims{0}, true), topk(d, 2, 1).first,
                      pad(d, {1, 1}, PadMode::Reflect)};
  };
  expect_round_trip(fn, {rnd({3, 4}, 41)});
}

TEST(Trace, GuardsRejectOtherShapes) {
  jit::TracedFunction t = jit::trace([](const TensorList& x) { return TensorList{relu(x[0])}; },
                                     {rnd({1, 3, 8, 8}, 51)});
  try {
    t({rnd({1, 3, 9, 8}, 52)});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "input \"input0\": expected [1, 3, 8, 8] f32, got [1, 3, 9, 8] f32"),
              std::string::npos)
        << e.what();
  }
}

TEST(Trace, ReadBackIsRecordedAndGuarded) {
  auto branchy = [](const TensorList& x) {
    if (sum(x[0]).item<float>() > 0) return TensorList{x[0] * 2.0};  // data-dependent branch
    return TensorList{x[0] * -1.0};
  };
  jit::TraceOptions options;
  options.warn_on_read_back = false;  // keep the test log clean; the record is what we assert
  jit::TracedFunction t = jit::trace(branchy, {ones({3})}, options);
  ASSERT_EQ(t.read_backs().size(), 1u);
  EXPECT_NE(t.read_backs()[0].file.find("test_trace.cpp"), std::string::npos);
  EXPECT_GT(t.read_backs()[0].line, 0u);
  EXPECT_DOUBLE_EQ(t.read_backs()[0].value, 3.0);
  // The trace is specialized to the value it read: an input with the same sum runs it, one that
  // would take the other branch is refused (GuardError), never answered with the frozen branch.
  Tensor out = t({tensor({0.0, 1.0, 2.0})})[0];
  EXPECT_FLOAT_EQ(out.index({2}).item<float>(), 4.0f);
  EXPECT_THROW(t({full({3}, -1.0)}), GuardError);
}

TEST(Trace, BytecodeRoundTrip) {
  Tensor w = rnd({4, 4}, 61);
  auto fn = [&](const TensorList& x) { return TensorList{tanh(matmul(x[0], w))}; };
  jit::TracedFunction t = jit::trace(fn, {rnd({2, 4}, 62)});
  const std::string bc = t.bytecode();
  ASSERT_GE(bc.size(), 4u);
  EXPECT_EQ(bc.substr(0, 4), std::string("ML\xefR", 4));  // MLIR bytecode magic
  auto ctx = jit::make_context();
  mlir::ModuleOp m = jit::parse_module(*ctx, bc);
  TensorList args{rnd({2, 4}, 62)};
  args.insert(args.end(), t.captures().begin(), t.captures().end());
  EXPECT_LE(max_abs_diff(jit::interpret(m, args)[0], fn({rnd({2, 4}, 62)})[0]), 1e-6);
  // And on an input it was not traced on.
  TensorList args2{rnd({2, 4}, 63)};
  args2.insert(args2.end(), t.captures().begin(), t.captures().end());
  EXPECT_LE(max_abs_diff(jit::interpret(m, args2)[0], fn({rnd({2, 4}, 63)})[0]), 1e-6);
  m->erase();
}

TEST(Trace, TrainingStepUpdatesParametersLikeEager) {
  // One SGD step of a 2-layer MLP: forward, backward and the update are all in the trace; the
  // parameters are in-out values.
  auto make = [] {
    return TensorList{rnd({16, 8}, 71, 0.3).requires_grad_(), zeros({16}).requires_grad_(),
                      rnd({3, 16}, 72, 0.3).requires_grad_()};
  };
  auto step = [](TensorList& p) {
    return [&p](const TensorList& x) {
      Tensor h = relu(linear(x[0], p[0], p[1]));
      Tensor loss = cross_entropy(linear(h, p[2]), x[1]);
      loss.backward();
      {
        autograd::NoGradGuard no_grad;
        for (Tensor& w : p) {
          sub_(w, w.grad(), 0.1);
          w.set_grad(Tensor());
        }
      }
      return TensorList{loss.detach()};
    };
  };
  Tensor x = rnd({4, 8}, 73);
  Tensor y = tensor({0.0, 2.0, 1.0, 2.0}, DType::Int64);
  TensorList eager_params = make();
  auto eager_step = step(eager_params);
  Tensor eager_loss0 = eager_step({x, y})[0];
  Tensor eager_loss1 = eager_step({x, y})[0];

  TensorList traced_params = make();
  auto traced_step = step(traced_params);
  jit::TraceOptions options;
  options.named_captures = {{"fc1.weight", traced_params[0]},
                            {"fc1.bias", traced_params[1]},
                            {"fc2.weight", traced_params[2]}};
  jit::TracedFunction t = jit::trace(traced_step, {x, y}, options);  // runs step 1 eagerly
  EXPECT_EQ(t.mutated_captures().size(), 3u) << t.str();
  EXPECT_NE(t.str().find("kiln.cross_entropy_backward"), std::string::npos);
  // Step 2 through the interpreter must match eager's step 2, then the parameters after it.
  Tensor traced_loss1 = t({x, y})[0];
  EXPECT_LE(max_abs_diff(traced_loss1, eager_loss1), 1e-5);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_LE(max_abs_diff(traced_params[i], eager_params[i]), 1e-5) << "parameter " << i;
  }
  (void)eager_loss0;
  // Step 3 on a new batch (other values and targets), the trace against eager.
  Tensor x2 = rnd({4, 8}, 74);
  Tensor y2 = tensor({1.0, 0.0, 2.0, 1.0}, DType::Int64);
  Tensor eager_loss2 = eager_step({x2, y2})[0];
  Tensor traced_loss2 = t({x2, y2})[0];
  EXPECT_LE(max_abs_diff(traced_loss2, eager_loss2), 1e-5);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_LE(max_abs_diff(traced_params[i], eager_params[i]), 1e-5)
        << "parameter " << i << " after a step on a new batch";
  }
}

// Every fused backward reports itself to the tracer (tests/jit/test_traced_backward.cpp runs
// each): a conv1d step's gradient follows a new input rather than the traced one.
TEST(Trace, FusedBackwardIsRecordedNotFrozen) {
  Tensor w = rnd({2, 1, 3}, 81).requires_grad_();
  auto step = [&](const TensorList& x) {
    Tensor loss = sum(conv1d(x[0], w) * x[0].index({Slice(), Slice(), Slice(0, 3)}));
    loss.backward();
    Tensor g = w.grad();
    w.set_grad(Tensor());
    return TensorList{g};
  };
  jit::TracedFunction t = jit::trace(step, {rnd({1, 1, 5}, 82)});
  EXPECT_NE(t.str().find("kiln.conv1d_backward"), std::string::npos);
  Tensor x2 = rnd({1, 1, 5}, 83);
  EXPECT_LE(max_abs_diff(t({x2})[0], step({x2})[0]), 1e-5);
}
