#include "kiln/models.h"
#include "kiln/nn/init.h"
#include "kiln/ops.h"

namespace kiln::models {

TransformerClassifier::TransformerClassifier(TransformerClassifierOptions o)
    : Module("TransformerClassifier"),
      options(o),
      pos_embedding(register_parameter("pos_embedding", kiln::empty({o.max_len, o.d_model}))) {
  KILN_CHECK(o.vocab_size > 0 && o.num_classes > 0 && o.num_layers > 0 && o.max_len > 0,
             "TransformerClassifier", "expected positive vocab_size, num_classes, num_layers and ",
             "max_len");
  nn::init::normal_(pos_embedding, 0.0, 0.02);
  embedding = register_module(
      "embedding", std::make_shared<nn::Embedding>(o.vocab_size, o.d_model, o.padding_idx));
  layers = register_module("layers", std::make_shared<nn::ModuleList>());
  for (int64_t i = 0; i < o.num_layers; ++i) {
    layers->push_back(std::make_shared<nn::TransformerEncoderLayer>(
        nn::TransformerEncoderLayerOptions(o.d_model, o.nhead)
            .dim_feedforward(o.dim_feedforward)
            .dropout(o.dropout)
            .activation(nn::Activation::GELU)
            .batch_first(true)
            .norm_first(true)));
  }
  norm = register_module("norm", std::make_shared<nn::LayerNorm>(o.d_model));
  head = register_module("head", std::make_shared<nn::Linear>(o.d_model, o.num_classes));
}

Tensor TransformerClassifier::forward(const Tensor& tokens) {
  KILN_CHECK(tokens.dim() == 2 && !tokens.is_floating_point(), "TransformerClassifier",
             "expected integer tokens (N, T), got ", tokens.sizes(), " ", tokens.dtype());
  const int64_t T = tokens.size(1);
  KILN_CHECK(T <= options.max_len, "TransformerClassifier", "sequence length ", T,
             " exceeds max_len ", options.max_len);
  Tensor x = (*embedding)(tokens) + pos_embedding.slice(0, 0, T);
  Tensor pad;
  if (options.padding_idx) {
    pad = kiln::eq(tokens, kiln::scalar_tensor(static_cast<double>(*options.padding_idx),
                                               TensorOptions(tokens.dtype())));
  }
  for (const auto& layer : *layers) {
    auto* l = static_cast<nn::TransformerEncoderLayer*>(layer.get());
    x = (*l)(x, {}, pad);
  }
  x = (*norm)(x);
  if (pad.defined()) {
    Tensor keep = kiln::logical_not(pad).to(x.dtype()).unsqueeze(-1);  // (N, T, 1)
    Tensor count = kiln::clamp(kiln::sum(keep, {1}), 1.0, std::nullopt);
    x = kiln::sum(x * keep, {1}) / count;
  } else {
    x = kiln::mean(x, {1});
  }
  return (*head)(x);
}

std::shared_ptr<TransformerClassifier> transformer_classifier(int64_t vocab_size,
                                                              int64_t num_classes, int64_t d_model,
                                                              int64_t nhead, int64_t num_layers) {
  TransformerClassifierOptions o{vocab_size, num_classes};
  o.d_model = d_model;
  o.nhead = nhead;
  o.num_layers = num_layers;
  o.dim_feedforward = 2 * d_model;
  return std::make_shared<TransformerClassifier>(o);
}

LSTMClassifier::LSTMClassifier(LSTMClassifierOptions o) : Module("LSTMClassifier"), options(o) {
  embedding =
      register_module("embedding", std::make_shared<nn::Embedding>(o.vocab_size, o.embedding_dim));
  lstm = register_module("lstm",
                         std::make_shared<nn::LSTM>(nn::RNNOptions(o.embedding_dim, o.hidden_size)
                                                        .num_layers(o.num_layers)
                                                        .batch_first(true)
                                                        .bidirectional(o.bidirectional)
                                                        .dropout(o.dropout)));
  fc = register_module(
      "fc", std::make_shared<nn::Linear>(o.hidden_size * (o.bidirectional ? 2 : 1), o.num_classes));
}

Tensor LSTMClassifier::forward(const Tensor& tokens) {
  KILN_CHECK(tokens.dim() == 2 && !tokens.is_floating_point(), "LSTMClassifier",
             "expected integer tokens (N, T), got ", tokens.sizes(), " ", tokens.dtype());
  nn::RNNOutput r = (*lstm)((*embedding)(tokens));
  const int64_t last = r.h_n.size(0) - 1;
  Tensor h = options.bidirectional
                 ? kiln::cat({r.h_n.select(0, last - 1), r.h_n.select(0, last)}, 1)
                 : r.h_n.select(0, last);
  return (*fc)(h);
}

std::shared_ptr<LSTMClassifier> lstm_classifier(int64_t vocab_size, int64_t num_classes,
                                                int64_t embedding_dim, int64_t hidden_size) {
  LSTMClassifierOptions o{vocab_size, num_classes};
  o.embedding_dim = embedding_dim;
  o.hidden_size = hidden_size;
  return std::make_shared<LSTMClassifier>(o);
}

}  // namespace kiln::models
