#include "kiln/nn/linear.h"

#include <cmath>
#include <sstream>

#include "kiln/autograd.h"
#include "kiln/nn/init.h"
#include "kiln/nn_ops.h"
#include "kiln/ops.h"

namespace kiln::nn {

Linear::Linear(int64_t in, int64_t out, bool with_bias)
    : Module("Linear"),
      in_features(in),
      out_features(out),
      weight(register_parameter("weight", kiln::empty({out, in}))),
      bias(register_parameter("bias", with_bias ? kiln::empty({out}) : Tensor())) {
  KILN_CHECK(in >= 0 && out >= 0, "Linear", "expected non-negative sizes, got in_features=", in,
             " out_features=", out);
  reset_parameters();
}

void Linear::reset_parameters() {
  if (weight.numel() > 0) init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double bound = in_features > 0 ? 1.0 / std::sqrt(static_cast<double>(in_features)) : 0;
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Linear::forward(const Tensor& input) {
  KILN_CHECK(input.dim() >= 1 && input.size(-1) == in_features, "Linear",
             "expected input with last dim ", in_features, ", got ", input.sizes());
  return kiln::linear(input, weight, bias);
}

std::string Linear::extra_repr() const {
  std::ostringstream os;
  os << "in_features=" << in_features << ", out_features=" << out_features
     << ", bias=" << (bias.defined() ? "True" : "False");
  return os.str();
}

Bilinear::Bilinear(int64_t in1, int64_t in2, int64_t out, bool with_bias)
    : Module("Bilinear"),
      in1_features(in1),
      in2_features(in2),
      out_features(out),
      weight(register_parameter("weight", kiln::empty({out, in1, in2}))),
      bias(register_parameter("bias", with_bias ? kiln::empty({out}) : Tensor())) {
  reset_parameters();
}

void Bilinear::reset_parameters() {
  const double bound = 1.0 / std::sqrt(static_cast<double>(weight.size(1)));
  init::uniform_(weight, -bound, bound);
  if (bias.defined()) init::uniform_(bias, -bound, bound);
}

Tensor Bilinear::forward(const Tensor& x1, const Tensor& x2) {
  KILN_CHECK(x1.dim() >= 1 && x1.size(-1) == in1_features && x2.dim() == x1.dim() &&
                 x2.size(-1) == in2_features,
             "Bilinear", "expected inputs [..., ", in1_features, "] and [..., ", in2_features,
             "], got ", x1.sizes(), " and ", x2.sizes());
  Dims lead(std::span<const int64_t>(x1.sizes().begin(), x1.sizes().end() - 1));
  Tensor a = x1.reshape({-1, in1_features});
  Tensor b = x2.reshape({-1, in2_features});
  // t[n, o, j] = sum_i a[n, i] W[o, i, j]
  Tensor w = weight.permute({1, 0, 2}).reshape({in1_features, out_features * in2_features});
  Tensor t = kiln::matmul(a, w).reshape({-1, out_features, in2_features});
  Tensor y = kiln::sum(t * b.unsqueeze(1), {2});
  if (bias.defined()) y = y + bias;
  lead.push_back(out_features);
  return y.reshape(lead);
}

TensorList Bilinear::forward_list(const TensorList& inputs) {
  KILN_CHECK(inputs.size() == 2, "Bilinear", "expected 2 inputs, got ", inputs.size());
  return {forward(inputs[0], inputs[1])};
}

std::string Bilinear::extra_repr() const {
  std::ostringstream os;
  os << "in1_features=" << in1_features << ", in2_features=" << in2_features
     << ", out_features=" << out_features << ", bias=" << (bias.defined() ? "True" : "False");
  return os.str();
}

std::string Flatten::extra_repr() const {
  std::ostringstream os;
  os << "start_dim=" << start_dim << ", end_dim=" << end_dim;
  return os.str();
}

namespace {
std::optional<int64_t> normalize_padding_idx(std::optional<int64_t> idx, int64_t num) {
  if (!idx) return idx;
  KILN_CHECK(*idx < num && *idx >= -num, "Embedding", "padding_idx must be within [", -num, ", ",
             num, "), got ", *idx);
  return *idx < 0 ? *idx + num : *idx;
}
}  // namespace

Embedding::Embedding(int64_t num, int64_t dim, std::optional<int64_t> pad)
    : Module("Embedding"),
      num_embeddings(num),
      embedding_dim(dim),
      padding_idx(normalize_padding_idx(pad, num)),
      weight(register_parameter("weight", kiln::empty({num, dim}))) {
  reset_parameters();
}

void Embedding::reset_parameters() {
  init::normal_(weight);
  if (padding_idx) {
    autograd::NoGradGuard no_grad;
    Tensor row = weight.select(0, *padding_idx);
    zero_(row);
  }
}

Tensor Embedding::forward(const Tensor& indices) {
  return kiln::embedding(weight, indices, padding_idx);
}

std::string Embedding::extra_repr() const {
  std::ostringstream os;
  os << num_embeddings << ", " << embedding_dim;
  if (padding_idx) os << ", padding_idx=" << *padding_idx;
  return os.str();
}

}  // namespace kiln::nn
