#pragma once
// MultiheadAttention and TransformerEncoderLayer with torch.nn's parameter names, defaults and
// mask conventions (bool masks: true = not allowed to attend; float masks are added).

#include <memory>
#include <string>
#include <utility>

#include "kiln/nn/activation.h"
#include "kiln/nn/linear.h"
#include "kiln/nn/module.h"
#include "kiln/nn/normalization.h"
#include "kiln/nn/options.h"

namespace kiln::nn {

struct MultiheadAttentionOptions {
  MultiheadAttentionOptions(int64_t embed_dim, int64_t num_heads)
      : embed_dim_(embed_dim), num_heads_(num_heads) {}
  KILN_NN_ARG(int64_t, embed_dim);
  KILN_NN_ARG(int64_t, num_heads);
  KILN_NN_ARG(double, dropout) = 0.0;  // on the attention weights, while training
  KILN_NN_ARG(bool, bias) = true;
  KILN_NN_ARG(bool, batch_first) = false;
};

// Parameters: in_proj_weight [3E, E] (xavier_uniform_), in_proj_bias [3E] (zeros),
// out_proj.weight [E, E] (Linear's default), out_proj.bias [E] (zeros).
// Inputs (L, N, E) — (N, L, E) with batch_first — or unbatched (L, E).
class MultiheadAttention : public Module {
 public:
  explicit MultiheadAttention(MultiheadAttentionOptions options);
  MultiheadAttention(int64_t embed_dim, int64_t num_heads)
      : MultiheadAttention(MultiheadAttentionOptions(embed_dim, num_heads)) {}

  // Returns (attn_output, attn_weights). attn_weights is (N, L, S) averaged over heads, or
  // (N, H, L, S) when !average_attn_weights; undefined when !need_weights.
  // key_padding_mask: (N, S); attn_mask: (L, S) or (N * H, L, S).
  std::pair<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& key_padding_mask = {}, bool need_weights = true,
                                    const Tensor& attn_mask = {}, bool average_attn_weights = true);
  // The same through call() (hooks run; inputs {q, k, v, key_padding_mask, attn_mask}).
  std::pair<Tensor, Tensor> operator()(const Tensor& query, const Tensor& key, const Tensor& value,
                                       const Tensor& key_padding_mask = {},
                                       bool need_weights = true, const Tensor& attn_mask = {},
                                       bool average_attn_weights = true);
  using Module::operator();
  // Self-attention of x; returns the output only.
  Tensor forward(const Tensor& x) override;
  TensorList forward_list(const TensorList& inputs) override;
  void reset_parameters();

  MultiheadAttentionOptions options;
  int64_t head_dim;
  Tensor& in_proj_weight;
  Tensor& in_proj_bias;
  std::shared_ptr<Linear> out_proj;

 private:
  bool call_need_weights_ = true;
  bool call_average_ = true;
};

enum class Activation { ReLU, GELU };

struct TransformerEncoderLayerOptions {
  TransformerEncoderLayerOptions(int64_t d_model, int64_t nhead)
      : d_model_(d_model), nhead_(nhead) {}
  KILN_NN_ARG(int64_t, d_model);
  KILN_NN_ARG(int64_t, nhead);
  KILN_NN_ARG(int64_t, dim_feedforward) = 2048;
  KILN_NN_ARG(double, dropout) = 0.1;
  KILN_NN_ARG(Activation, activation) = Activation::ReLU;
  KILN_NN_ARG(double, layer_norm_eps) = 1e-5;
  KILN_NN_ARG(bool, batch_first) = false;
  KILN_NN_ARG(bool, norm_first) = false;
};

// Post-norm: x = norm1(x + sa(x)); x = norm2(x + ff(x)).
// Pre-norm (norm_first): x = x + sa(norm1(x)); x = x + ff(norm2(x)).
// Children (as PyTorch): self_attn, linear1, dropout, linear2, norm1, norm2, dropout1, dropout2.
class TransformerEncoderLayer : public Module {
 public:
  explicit TransformerEncoderLayer(TransformerEncoderLayerOptions options);
  TransformerEncoderLayer(int64_t d_model, int64_t nhead)
      : TransformerEncoderLayer(TransformerEncoderLayerOptions(d_model, nhead)) {}
  Tensor forward(const Tensor& src) override { return forward(src, {}, {}); }
  Tensor forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask);
  // Through call(): inputs {src, src_mask, src_key_padding_mask}.
  Tensor operator()(const Tensor& src, const Tensor& src_mask = {},
                    const Tensor& src_key_padding_mask = {}) {
    return call({src, src_mask, src_key_padding_mask})[0];
  }
  TensorList forward_list(const TensorList& inputs) override;

  TransformerEncoderLayerOptions options;
  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<Linear> linear1;
  std::shared_ptr<Dropout> dropout;
  std::shared_ptr<Linear> linear2;
  std::shared_ptr<LayerNorm> norm1, norm2;
  std::shared_ptr<Dropout> dropout1, dropout2;

 private:
  Tensor sa_block(const Tensor& x, const Tensor& mask, const Tensor& kpm);
  Tensor ff_block(const Tensor& x);
};

}  // namespace kiln::nn
