#pragma once
// Identity, Linear, Bilinear, Flatten, Embedding (torch.nn names, parameter names and defaults).

#include <optional>

#include "kiln/nn/module.h"

namespace kiln::nn {

class Identity : public Module {
 public:
  Identity() : Module("Identity") {}
  Tensor forward(const Tensor& input) override { return input; }
};

// y = x Wᵀ + b. weight [out, in]: kaiming_uniform_(a = sqrt(5)); bias [out]: U(±1/sqrt(in)).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& input) override;
  void reset_parameters();
  std::string extra_repr() const override;

  int64_t in_features, out_features;
  Tensor& weight;
  Tensor& bias;  // undefined when bias = false
};

// y = x1ᵀ W x2 + b. weight [out, in1, in2], bias [out]: both U(±1/sqrt(in1)).
class Bilinear : public Module {
 public:
  Bilinear(int64_t in1_features, int64_t in2_features, int64_t out_features, bool bias = true);
  using Module::forward;
  Tensor forward(const Tensor& input1, const Tensor& input2);
  TensorList forward_list(const TensorList& inputs) override;
  Tensor operator()(const Tensor& input1, const Tensor& input2) {
    return call({input1, input2})[0];
  }
  void reset_parameters();
  std::string extra_repr() const override;

  int64_t in1_features, in2_features, out_features;
  Tensor& weight;
  Tensor& bias;
};

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1)
      : Module("Flatten"), start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& input) override { return input.flatten(start_dim, end_dim); }
  std::string extra_repr() const override;
  int64_t start_dim, end_dim;
};

// weight [num_embeddings, embedding_dim] ~ N(0, 1), the padding_idx row zeroed (and given no
// gradient).
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim,
            std::optional<int64_t> padding_idx = std::nullopt);
  Tensor forward(const Tensor& indices) override;
  void reset_parameters();
  std::string extra_repr() const override;

  int64_t num_embeddings, embedding_dim;
  std::optional<int64_t> padding_idx;
  Tensor& weight;
};

}  // namespace kiln::nn
