#pragma once
// LSTM and GRU: multi-layer, optionally bidirectional and batch_first, with PyTorch's parameter
// names (weight_ih_l{k}[_reverse], weight_hh_l{k}, bias_ih_l{k}, bias_hh_l{k}), gate order
// (LSTM i, f, g, o; GRU r, z, n) and initialization (all U(±1/sqrt(hidden_size))).

#include "kiln/nn/module.h"
#include "kiln/nn/options.h"

namespace kiln::nn {

struct RNNOptions {
  RNNOptions(int64_t input_size, int64_t hidden_size)
      : input_size_(input_size), hidden_size_(hidden_size) {}
  KILN_NN_ARG(int64_t, input_size);
  KILN_NN_ARG(int64_t, hidden_size);
  KILN_NN_ARG(int64_t, num_layers) = 1;
  KILN_NN_ARG(bool, bias) = true;
  KILN_NN_ARG(bool, batch_first) = false;
  KILN_NN_ARG(double, dropout) = 0.0;  // between layers, while training
  KILN_NN_ARG(bool, bidirectional) = false;
};

// output: (T, N, D * H) — (N, T, D * H) with batch_first, (T, D * H) unbatched;
// h_n (and c_n for LSTM): (num_layers * D, N, H).
struct RNNOutput {
  Tensor output, h_n, c_n;
};

class RNNBase : public Module {
 public:
  RNNBase(const char* type, RNNOptions options, int64_t gate_count);
  void reset_parameters();
  std::string extra_repr() const override;
  // The parameters of one layer and direction: {w_ih, w_hh, b_ih, b_hh} (biases may be undefined).
  TensorList layer_weights(int64_t layer, int64_t direction) const;
  // Returns the output sequence only.
  Tensor forward(const Tensor& input) override;
  // inputs {x, h0[, c0]}; outputs {output, h_n[, c_n]}.
  TensorList forward_list(const TensorList& inputs) override;

  RNNOptions options;

 protected:
  // One time step: this step's input projection xp (N, gates * H), the state {h[, c]} and the
  // layer's weights {w_ih, w_hh, b_ih, b_hh} -> the new state (h first).
  virtual TensorList cell(const Tensor& xp, const TensorList& state, const TensorList& w) = 0;
  RNNOutput run(const Tensor& input, const Tensor& h0, const Tensor& c0, bool is_lstm);

 private:
  // One direction of one layer over the whole sequence x (T, N, I), from `state`; returns
  // (outputs (T, N, H), the final state).
  std::pair<Tensor, TensorList> run_direction(const Tensor& x, TensorList state,
                                              const TensorList& w, bool reverse);

  std::vector<Tensor*> weights_;  // 4 slots per (layer, direction)
};

class LSTM : public RNNBase {
 public:
  explicit LSTM(RNNOptions options) : RNNBase("LSTM", options, 4) {}
  LSTM(int64_t input_size, int64_t hidden_size) : LSTM(RNNOptions(input_size, hidden_size)) {}
  using RNNBase::forward;
  // h0/c0 undefined = zeros.
  RNNOutput forward(const Tensor& input, const Tensor& h0, const Tensor& c0);
  // Through call() (hooks run).
  RNNOutput operator()(const Tensor& input, const Tensor& h0 = {}, const Tensor& c0 = {});

 protected:
  TensorList cell(const Tensor& xp, const TensorList& state, const TensorList& w) override;
};

class GRU : public RNNBase {
 public:
  explicit GRU(RNNOptions options) : RNNBase("GRU", options, 3) {}
  GRU(int64_t input_size, int64_t hidden_size) : GRU(RNNOptions(input_size, hidden_size)) {}
  using RNNBase::forward;
  RNNOutput forward(const Tensor& input, const Tensor& h0);
  RNNOutput operator()(const Tensor& input, const Tensor& h0 = {});

 protected:
  TensorList cell(const Tensor& xp, const TensorList& state, const TensorList& w) override;
};

}  // namespace kiln::nn
