// LSTM and GRU of ONNX's default domain over the (static) sequence with kiln's eager ops: the
// input projection for every step at once, then one recurrent step per time step. Traced (kiln
// import), the steps are one kiln::loop whose body is the cell, compiled once, as nn::LSTM and
// nn::GRU record theirs; evaluated eagerly, a C++ loop. Layout 0 ([seq, batch, features]), the
// default activations, no peepholes, no clipping: what PyTorch exports; anything else is refused
// by name.

#include "graph.h"
#include "kiln/control_flow.h"

namespace kiln::onnx::detail {
namespace {

using C = const NodeContext&;

struct Rnn {
  int64_t hidden = 0, directions = 1, gates = 0;
  std::string direction;
};

Rnn check(C c, int64_t gates, const char* default_activations) {
  Rnn r;
  r.hidden = c.i("hidden_size");
  r.direction = c.s("direction", "forward");
  r.gates = gates;
  if (r.direction != "forward" && r.direction != "reverse" && r.direction != "bidirectional")
    c.fail("direction '" + r.direction + "' is not forward, reverse or bidirectional");
  r.directions = r.direction == "bidirectional" ? 2 : 1;
  if (c.i("layout", 0) != 0) c.fail("layout = 1 (batch first) is not supported");
  if (c.has_attr("clip")) c.fail("clip is not supported");
  if (c.i("input_forget", 0) != 0) c.fail("input_forget is not supported");
  if (c.has_attr("activations"))
    c.fail(std::string("only the default activations (") + default_activations + ") are supported");
  const Tensor& x = c.in(0);
  if (x.dim() != 3) c.fail("X must be [seq, batch, input]");
  const Tensor& w = c.in(1);
  if (w.dim() != 3 || w.size(0) != r.directions || w.size(1) != gates * r.hidden ||
      w.size(2) != x.size(2))
    c.fail("W must be [directions, " + std::to_string(gates) + " * hidden_size, input_size]");
  if (c.has(4)) {  // sequence_lens: only the full length for every batch entry
    for (int64_t len : c.ints_of(4))
      if (len != x.size(0)) c.fail("sequence_lens shorter than the sequence are not supported");
  }
  return r;
}

// The initial state of direction d ([batch, hidden]), zeros when the input is omitted.
Tensor initial(C c, size_t input, int64_t d, const Tensor& x, int64_t hidden) {
  if (c.has(input)) return c.in(input).select(0, d);
  return zeros(Dims{x.size(1), hidden}, TensorOptions(x.dtype()));
}

// Input projection of every step, with both biases folded in: [seq, batch, gates * hidden].
Tensor project_inputs(C c, const Tensor& x, int64_t d, const Rnn& r, Tensor& recurrent_bias) {
  Tensor xw = matmul(x, c.in(1).select(0, d).transpose(0, 1));
  recurrent_bias = Tensor();
  if (c.has(3)) {
    Tensor b = c.in(3).select(0, d);  // [2 * gates * hidden]: W's biases then R's
    xw = add(xw, b.slice(0, 0, r.gates * r.hidden));
    recurrent_bias = b.slice(0, r.gates * r.hidden, 2 * r.gates * r.hidden);
  }
  return xw;
}

bool backwards(const Rnn& r, int64_t d) {
  return r.direction == "reverse" || (r.direction == "bidirectional" && d == 1);
}

TensorList lstm(C c) {
  const Rnn r = check(c, 4, "Sigmoid, Tanh, Tanh");
  if (c.has(7)) c.fail("peepholes (P) are not supported");
  const Tensor& x = c.in(0);
  const int64_t H = r.hidden;
  TensorList ys, hs, cs;
  for (int64_t d = 0; d < r.directions; ++d) {
    Tensor rb;
    const Tensor xw = project_inputs(c, x, d, r, rb);
    const Tensor rt = c.in(2).select(0, d).transpose(0, 1);  // [hidden, 4 * hidden]
    auto step = [&](const Tensor& xw_t, const TensorList& state) {
      Tensor g = add(xw_t, matmul(state[0], rt));
      if (rb.defined()) g = add(g, rb);
      const TensorList parts = chunk(g, 4, 1);  // ONNX's gate order: i, o, f, c
      const Tensor i = sigmoid(parts[0]), o = sigmoid(parts[1]), f = sigmoid(parts[2]);
      const Tensor cell = add(mul(f, state[1]), mul(i, tanh(parts[3])));
      return TensorList{mul(o, tanh(cell)), cell};
    };
    auto [y, last] = recurrence(xw, {initial(c, 5, d, x, H), initial(c, 6, d, x, H)}, {rt, rb},
                                backwards(r, d), step);
    ys.push_back(y);
    hs.push_back(last[0]);
    cs.push_back(last[1]);
  }
  // Y [seq, directions, batch, hidden].
  return {stack(ys, 1), stack(hs, 0), stack(cs, 0)};
}

TensorList gru(C c) {
  const Rnn r = check(c, 3, "Sigmoid, Tanh");
  const bool linear_before_reset = c.i("linear_before_reset", 0) != 0;
  const Tensor& x = c.in(0);
  const int64_t H = r.hidden;
  TensorList ys, hs;
  for (int64_t d = 0; d < r.directions; ++d) {
    Tensor rb;
    const Tensor xw = project_inputs(c, x, d, r, rb);
    const Tensor rt = c.in(2).select(0, d).transpose(0, 1);  // [hidden, 3 * hidden]
    const Tensor rzr = rt.slice(1, 0, 2 * H), rh = rt.slice(1, 2 * H, 3 * H);
    const Tensor rb_zr = rb.defined() ? rb.slice(0, 0, 2 * H) : Tensor(),
                 rb_h = rb.defined() ? rb.slice(0, 2 * H, 3 * H) : Tensor();
    auto step = [&](const Tensor& xw_t, const TensorList& state) {
      const Tensor& h = state[0];
      const TensorList xs = chunk(xw_t, 3, 1);  // ONNX's gate order: z, r, h
      Tensor zr = add(xw_t.slice(1, 0, 2 * H), matmul(h, rzr));
      if (rb_zr.defined()) zr = add(zr, rb_zr);
      const Tensor z = sigmoid(zr.slice(1, 0, H)), reset = sigmoid(zr.slice(1, H, 2 * H));
      Tensor candidate;
      if (linear_before_reset) {
        Tensor hr = matmul(h, rh);
        if (rb_h.defined()) hr = add(hr, rb_h);
        candidate = tanh(add(xs[2], mul(reset, hr)));
      } else {
        Tensor hr = matmul(mul(reset, h), rh);
        if (rb_h.defined()) hr = add(hr, rb_h);
        candidate = tanh(add(xs[2], hr));
      }
      return TensorList{add(mul(rsub(z, 1.0), candidate), mul(z, h))};  // (1 - z) cand + z h
    };
    auto [y, last] = recurrence(xw, {initial(c, 5, d, x, H)}, {rt, rb}, backwards(r, d), step);
    ys.push_back(y);
    hs.push_back(last[0]);
  }
  return {stack(ys, 1), stack(hs, 0)};
}

}  // namespace

std::vector<OpDef> rnn_ops() {
  return {{"LSTM", 7, lstm}, {"GRU", 7, gru}};
}

}  // namespace kiln::onnx::detail
