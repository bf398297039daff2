#include "kiln/nn/rnn.h"

#include <cmath>
#include <sstream>

#include "kiln/control_flow.h"
#include "kiln/nn/init.h"
#include "kiln/nn_ops.h"
#include "kiln/ops.h"

namespace kiln::nn {

RNNBase::RNNBase(const char* type, RNNOptions o, int64_t gates) : Module(type), options(o) {
  KILN_CHECK(o.input_size() > 0 && o.hidden_size() > 0 && o.num_layers() > 0, type,
             "expected positive input_size, hidden_size and num_layers, got ", o.input_size(), ", ",
             o.hidden_size(), ", ", o.num_layers());
  KILN_CHECK(o.dropout() >= 0.0 && o.dropout() <= 1.0, type, "dropout must be in [0, 1], got ",
             o.dropout());
  const int64_t H = o.hidden_size(), D = o.bidirectional() ? 2 : 1;
  for (int64_t layer = 0; layer < o.num_layers(); ++layer) {
    const int64_t in = layer == 0 ? o.input_size() : H * D;
    for (int64_t d = 0; d < D; ++d) {
      const std::string sfx = "_l" + std::to_string(layer) + (d == 1 ? "_reverse" : "");
      weights_.push_back(&register_parameter("weight_ih" + sfx, kiln::empty({gates * H, in})));
      weights_.push_back(&register_parameter("weight_hh" + sfx, kiln::empty({gates * H, H})));
      weights_.push_back(
          &register_parameter("bias_ih" + sfx, o.bias() ? kiln::empty({gates * H}) : Tensor()));
      weights_.push_back(
          &register_parameter("bias_hh" + sfx, o.bias() ? kiln::empty({gates * H}) : Tensor()));
    }
  }
  reset_parameters();
}

void RNNBase::reset_parameters() {
  const double stdv = 1.0 / std::sqrt(static_cast<double>(options.hidden_size()));
  for (Tensor* w : weights_)
    if (w->defined()) init::uniform_(*w, -stdv, stdv);
}

std::string RNNBase::extra_repr() const {
  std::ostringstream os;
  os << options.input_size() << ", " << options.hidden_size();
  if (options.num_layers() != 1) os << ", num_layers=" << options.num_layers();
  if (!options.bias()) os << ", bias=False";
  if (options.batch_first()) os << ", batch_first=True";
  if (options.dropout() != 0.0) os << ", dropout=" << options.dropout();
  if (options.bidirectional()) os << ", bidirectional=True";
  return os.str();
}

TensorList RNNBase::layer_weights(int64_t layer, int64_t direction) const {
  const int64_t D = options.bidirectional() ? 2 : 1;
  KILN_CHECK(layer >= 0 && layer < options.num_layers() && direction >= 0 && direction < D,
             type_name(), "no layer ", layer, " direction ", direction);
  const size_t base = static_cast<size_t>((layer * D + direction) * 4);
  return {*weights_[base], *weights_[base + 1], *weights_[base + 2], *weights_[base + 3]};
}

RNNOutput RNNBase::run(const Tensor& input, const Tensor& h0_in, const Tensor& c0_in,
                       bool is_lstm) {
  const auto& o = options;
  const int64_t H = o.hidden_size(), D = o.bidirectional() ? 2 : 1, L = o.num_layers();
  KILN_CHECK(input.dim() == 3 || input.dim() == 2, type_name(),
             "expected input of 3 dims (batched) or 2 dims (unbatched), got ", input.sizes());
  const bool batched = input.dim() == 3;
  Tensor x = batched ? input : input.unsqueeze(1);
  if (batched && o.batch_first()) x = x.transpose(0, 1);
  KILN_CHECK(x.size(2) == o.input_size(), type_name(), "expected input size ", o.input_size(),
             " in the last dim, got ", input.sizes());
  const int64_t N = x.size(1);
  auto prep_state = [&](const Tensor& s, const char* what) {
    if (!s.defined()) return kiln::zeros({L * D, N, H}, TensorOptions(x.dtype()));
    Tensor t = batched ? s : s.unsqueeze(1);
    KILN_CHECK(t.dim() == 3 && t.size(0) == L * D && t.size(1) == N && t.size(2) == H, type_name(),
               "expected ", what, " of shape [", L * D, ", ", N, ", ", H, "], got ", s.sizes());
    return t;
  };
  Tensor h0 = prep_state(h0_in, "h0");
  Tensor c0 = is_lstm ? prep_state(c0_in, "c0") : Tensor();

  TensorList h_n, c_n;
  Tensor layer_in = x;
  for (int64_t layer = 0; layer < L; ++layer) {
    TensorList outs;
    for (int64_t d = 0; d < D; ++d) {
      const int64_t idx = layer * D + d;
      TensorList state{h0.select(0, idx)};
      if (is_lstm) state.push_back(c0.select(0, idx));
      auto [output, last] = run_direction(layer_in, state, layer_weights(layer, d), d == 1);
      outs.push_back(output);
      h_n.push_back(last[0]);
      if (is_lstm) c_n.push_back(last[1]);
    }
    layer_in = D == 2 ? kiln::cat(outs, 2) : outs[0];
    if (o.dropout() > 0.0 && is_training() && layer + 1 < L) {
      layer_in = kiln::dropout(layer_in, o.dropout(), true);
    }
  }
  RNNOutput out;
  out.output = layer_in;
  out.h_n = kiln::stack(h_n, 0);
  if (is_lstm) out.c_n = kiln::stack(c_n, 0);
  if (!batched) {
    out.output = out.output.squeeze(1);
    out.h_n = out.h_n.squeeze(1);
    if (is_lstm) out.c_n = out.c_n.squeeze(1);
  } else if (o.batch_first()) {
    out.output = out.output.transpose(0, 1);
  }
  return out;
}

// A trace without gradients records the time steps as one kiln::loop (an scf.for whose body is
// the cell, compiled once) instead of T copies of the cell; eager runs, and traces that record
// gradients, iterate in C++ (kiln::recurrence).
std::pair<Tensor, TensorList> RNNBase::run_direction(const Tensor& x, TensorList state,
                                                     const TensorList& w, bool reverse) {
  const Tensor xp = kiln::linear(x, w[0], w[2]);  // (T, N, gates * H): all input projections
  return kiln::recurrence(
      xp, std::move(state), w, reverse,
      [&](const Tensor& xp_t, const TensorList& s) { return cell(xp_t, s, w); });
}

Tensor RNNBase::forward(const Tensor& input) {
  return forward_list({input})[0];
}

TensorList RNNBase::forward_list(const TensorList& in) {
  const bool is_lstm = type_name() == "LSTM";
  KILN_CHECK(!in.empty() && in.size() <= (is_lstm ? 3u : 2u), type_name(),
             is_lstm ? "expected inputs (x[, h0, c0]), got " : "expected inputs (x[, h0]), got ",
             in.size());
  RNNOutput r =
      run(in[0], in.size() > 1 ? in[1] : Tensor(), in.size() > 2 ? in[2] : Tensor(), is_lstm);
  if (is_lstm) return {r.output, r.h_n, r.c_n};
  return {r.output, r.h_n};
}

RNNOutput LSTM::forward(const Tensor& input, const Tensor& h0, const Tensor& c0) {
  return run(input, h0, c0, true);
}

RNNOutput LSTM::operator()(const Tensor& input, const Tensor& h0, const Tensor& c0) {
  TensorList out = call({input, h0, c0});
  return {out[0], out[1], out[2]};
}

TensorList LSTM::cell(const Tensor& xp, const TensorList& state, const TensorList& w) {
  Tensor gates = xp + kiln::linear(state[0], w[1], w[3]);
  TensorList g = kiln::chunk(gates, 4, 1);
  Tensor i = kiln::sigmoid(g[0]), f = kiln::sigmoid(g[1]);
  Tensor cand = kiln::tanh(g[2]), o = kiln::sigmoid(g[3]);
  Tensor c = f * state[1] + i * cand;
  return {o * kiln::tanh(c), c};
}

RNNOutput GRU::forward(const Tensor& input, const Tensor& h0) {
  return run(input, h0, {}, false);
}

RNNOutput GRU::operator()(const Tensor& input, const Tensor& h0) {
  TensorList out = call({input, h0});
  return {out[0], out[1], Tensor()};
}

TensorList GRU::cell(const Tensor& xp, const TensorList& state, const TensorList& w) {
  const Tensor& h = state[0];
  TensorList xg = kiln::chunk(xp, 3, 1);
  TensorList hg = kiln::chunk(kiln::linear(h, w[1], w[3]), 3, 1);
  Tensor r = kiln::sigmoid(xg[0] + hg[0]);
  Tensor z = kiln::sigmoid(xg[1] + hg[1]);
  Tensor n = kiln::tanh(xg[2] + r * hg[2]);
  return {n + z * (h - n)};  // (1 - z) * n + z * h
}

}  // namespace kiln::nn
