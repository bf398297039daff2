#include "kiln/nn/transformer.h"

#include <cmath>
#include <limits>

#include "kiln/nn/init.h"
#include "kiln/nn_ops.h"
#include "kiln/ops.h"

namespace kiln::nn {

namespace {
// A mask as an additive float mask of dtype `dt`: bool true -> -inf, float as is.
Tensor additive_mask(const Tensor& mask, DType dt) {
  if (mask.dtype() == DType::Bool || mask.dtype() == DType::UInt8) {
    Tensor m = mask.dtype() == DType::Bool ? mask : mask.to(DType::Bool);
    return kiln::masked_fill(kiln::zeros(m.sizes(), TensorOptions(dt)), m,
                             -std::numeric_limits<double>::infinity());
  }
  return mask.to(dt);
}
}  // namespace

MultiheadAttention::MultiheadAttention(MultiheadAttentionOptions o)
    : Module("MultiheadAttention"),
      options(o),
      head_dim(o.num_heads() > 0 ? o.embed_dim() / o.num_heads() : 0),
      in_proj_weight(
          register_parameter("in_proj_weight", kiln::empty({3 * o.embed_dim(), o.embed_dim()}))),
      in_proj_bias(register_parameter("in_proj_bias",
                                      o.bias() ? kiln::empty({3 * o.embed_dim()}) : Tensor())) {
  KILN_CHECK(o.num_heads() > 0 && o.embed_dim() % o.num_heads() == 0, "MultiheadAttention",
             "embed_dim must be divisible by num_heads, got embed_dim=", o.embed_dim(),
             " num_heads=", o.num_heads());
  out_proj =
      register_module("out_proj", std::make_shared<Linear>(o.embed_dim(), o.embed_dim(), o.bias()));
  reset_parameters();
}

void MultiheadAttention::reset_parameters() {
  init::xavier_uniform_(in_proj_weight);
  if (in_proj_bias.defined()) {
    init::zeros_(in_proj_bias);
    init::zeros_(out_proj->bias);
  }
}

std::pair<Tensor, Tensor> MultiheadAttention::forward(const Tensor& query, const Tensor& key,
                                                      const Tensor& value,
                                                      const Tensor& key_padding_mask,
                                                      bool need_weights, const Tensor& attn_mask,
                                                      bool average_attn_weights) {
  const int64_t E = options.embed_dim(), H = options.num_heads();
  KILN_CHECK(query.dim() == 3 || query.dim() == 2, "MultiheadAttention",
             "expected query of 3 dims (batched) or 2 dims (unbatched), got ", query.sizes());
  KILN_CHECK(key.dim() == query.dim() && value.dim() == query.dim(), "MultiheadAttention",
             "query, key and value must have the same number of dims, got ", query.sizes(), ", ",
             key.sizes(), ", ", value.sizes());
  const bool batched = query.dim() == 3;
  Tensor q = query, k = key, v = value;
  if (!batched) {
    q = q.unsqueeze(1);
    k = k.unsqueeze(1);
    v = v.unsqueeze(1);
  } else if (options.batch_first()) {
    q = q.transpose(0, 1);
    k = k.transpose(0, 1);
    v = v.transpose(0, 1);
  }
  const int64_t L = q.size(0), N = q.size(1), S = k.size(0);
  KILN_CHECK(q.size(2) == E && k.size(2) == E && v.size(2) == E, "MultiheadAttention",
             "expected embedding dim ", E, ", got query ", query.sizes(), ", key ", key.sizes(),
             ", value ", value.sizes());
  KILN_CHECK(k.size(1) == N && v.size(1) == N && v.size(0) == S, "MultiheadAttention",
             "key and value must match the query's batch and each other's length, got query ",
             query.sizes(), ", key ", key.sizes(), ", value ", value.sizes());

  // Input projections.
  Tensor qp, kp, vp;
  if (query.is_same(key) && key.is_same(value)) {
    TensorList qkv = kiln::chunk(kiln::linear(q, in_proj_weight, in_proj_bias), 3, -1);
    qp = qkv[0];
    kp = qkv[1];
    vp = qkv[2];
  } else {
    auto w = [&](int64_t i) { return in_proj_weight.slice(0, i * E, (i + 1) * E); };
    auto b = [&](int64_t i) {
      return in_proj_bias.defined() ? in_proj_bias.slice(0, i * E, (i + 1) * E) : Tensor();
    };
    qp = kiln::linear(q, w(0), b(0));
    kp = kiln::linear(k, w(1), b(1));
    vp = kiln::linear(v, w(2), b(2));
  }
  // (L, N, E) -> (N * H, L, hd)
  qp = qp.contiguous().view({L, N * H, head_dim}).transpose(0, 1);
  kp = kp.contiguous().view({S, N * H, head_dim}).transpose(0, 1);
  vp = vp.contiguous().view({S, N * H, head_dim}).transpose(0, 1);

  // Masks merged into one additive (N * H or 1, L, S) mask.
  const DType dt = qp.dtype();
  Tensor mask;
  if (attn_mask.defined()) {
    if (attn_mask.dim() == 2) {
      KILN_CHECK(attn_mask.size(0) == L && attn_mask.size(1) == S, "MultiheadAttention",
                 "expected a 2-D attn_mask of shape [", L, ", ", S, "], got ", attn_mask.sizes());
      mask = additive_mask(attn_mask, dt).unsqueeze(0);
    } else {
      KILN_CHECK(attn_mask.dim() == 3 && attn_mask.size(0) == N * H && attn_mask.size(1) == L &&
                     attn_mask.size(2) == S,
                 "MultiheadAttention", "expected a 3-D attn_mask of shape [", N * H, ", ", L, ", ",
                 S, "], got ", attn_mask.sizes());
      mask = additive_mask(attn_mask, dt);
    }
  }
  if (key_padding_mask.defined()) {
    Tensor kpm = batched ? key_padding_mask : key_padding_mask.unsqueeze(0);
    KILN_CHECK(kpm.dim() == 2 && kpm.size(0) == N && kpm.size(1) == S, "MultiheadAttention",
               "expected key_padding_mask of shape [", N, ", ", S, "], got ",
               key_padding_mask.sizes());
    Tensor add =
        additive_mask(kpm, dt).view({N, 1, 1, S}).expand({N, H, 1, S}).reshape({N * H, 1, S});
    mask = mask.defined() ? mask + add : add;
  }

  Tensor scores = kiln::bmm(qp / std::sqrt(static_cast<double>(head_dim)), kp.transpose(1, 2));
  if (mask.defined()) scores = scores + mask;
  Tensor attn = kiln::softmax(scores, -1);
  if (options.dropout() > 0.0 && is_training()) attn = kiln::dropout(attn, options.dropout(), true);
  Tensor out = kiln::bmm(attn, vp);  // (N * H, L, hd)
  out = out.transpose(0, 1).contiguous().view({L * N, E});
  out = (*out_proj)(out).view({L, N, E});

  Tensor weights;
  if (need_weights) {
    weights = attn.view({N, H, L, S});
    if (average_attn_weights) weights = kiln::mean(weights, {1});
    if (!batched) weights = weights.squeeze(0);
  }
  if (!batched) {
    out = out.squeeze(1);
  } else if (options.batch_first()) {
    out = out.transpose(0, 1);
  }
  return {out, weights};
}

std::pair<Tensor, Tensor> MultiheadAttention::operator()(const Tensor& query, const Tensor& key,
                                                         const Tensor& value,
                                                         const Tensor& key_padding_mask,
                                                         bool need_weights, const Tensor& attn_mask,
                                                         bool average_attn_weights) {
  call_need_weights_ = need_weights;
  call_average_ = average_attn_weights;
  TensorList out = call({query, key, value, key_padding_mask, attn_mask});
  call_need_weights_ = true;
  call_average_ = true;
  return {out[0], out.size() > 1 ? out[1] : Tensor()};
}

Tensor MultiheadAttention::forward(const Tensor& x) {
  return forward(x, x, x, {}, false).first;
}

TensorList MultiheadAttention::forward_list(const TensorList& in) {
  KILN_CHECK(!in.empty() && in.size() <= 5, "MultiheadAttention",
             "expected inputs (query[, key, value, key_padding_mask, attn_mask]), got ", in.size());
  const Tensor& q = in[0];
  const Tensor& k = in.size() > 1 && in[1].defined() ? in[1] : q;
  const Tensor& v = in.size() > 2 && in[2].defined() ? in[2] : k;
  auto [out, w] = forward(q, k, v, in.size() > 3 ? in[3] : Tensor(), call_need_weights_,
                          in.size() > 4 ? in[4] : Tensor(), call_average_);
  return {out, w};
}

TransformerEncoderLayer::TransformerEncoderLayer(TransformerEncoderLayerOptions o)
    : Module("TransformerEncoderLayer"), options(o) {
  self_attn = register_module("self_attn", std::make_shared<MultiheadAttention>(
                                               MultiheadAttentionOptions(o.d_model(), o.nhead())
                                                   .dropout(o.dropout())
                                                   .batch_first(o.batch_first())));
  linear1 = register_module("linear1", std::make_shared<Linear>(o.d_model(), o.dim_feedforward()));
  dropout = register_module("dropout", std::make_shared<Dropout>(o.dropout()));
  linear2 = register_module("linear2", std::make_shared<Linear>(o.dim_feedforward(), o.d_model()));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(o.d_model(), o.layer_norm_eps()));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(o.d_model(), o.layer_norm_eps()));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(o.dropout()));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(o.dropout()));
}

Tensor TransformerEncoderLayer::sa_block(const Tensor& x, const Tensor& mask, const Tensor& kpm) {
  Tensor y = (*self_attn)(x, x, x, kpm, /*need_weights=*/false, mask).first;
  return (*dropout1)(y);
}

Tensor TransformerEncoderLayer::ff_block(const Tensor& x) {
  Tensor h = (*linear1)(x);
  h = options.activation() == Activation::GELU ? kiln::gelu(h) : kiln::relu(h);
  return (*dropout2)((*linear2)((*dropout)(h)));
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const Tensor& src_mask,
                                        const Tensor& src_key_padding_mask) {
  Tensor x = src;
  if (options.norm_first()) {
    x = x + sa_block((*norm1)(x), src_mask, src_key_padding_mask);
    x = x + ff_block((*norm2)(x));
  } else {
    x = (*norm1)(x + sa_block(x, src_mask, src_key_padding_mask));
    x = (*norm2)(x + ff_block(x));
  }
  return x;
}

TensorList TransformerEncoderLayer::forward_list(const TensorList& in) {
  KILN_CHECK(!in.empty() && in.size() <= 3, "TransformerEncoderLayer",
             "expected inputs (src[, src_mask, src_key_padding_mask]), got ", in.size());
  return {forward(in[0], in.size() > 1 ? in[1] : Tensor(), in.size() > 2 ? in[2] : Tensor())};
}

}  // namespace kiln::nn
