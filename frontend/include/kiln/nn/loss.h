#pragma once
// Losses as modules: loss(input, target).

#include "kiln/nn/module.h"
#include "kiln/nn_ops.h"

namespace kiln::nn {

// A module called with (input, target).
class Loss : public Module {
 public:
  Loss(const char* type, Reduction reduction) : Module(type), reduction(reduction) {}
  using Module::forward;
  virtual Tensor forward(const Tensor& input, const Tensor& target) = 0;
  TensorList forward_list(const TensorList& inputs) override;
  Tensor operator()(const Tensor& input, const Tensor& target) { return call({input, target})[0]; }
  Reduction reduction;
};

// Class weights become the buffer "weight" (as PyTorch; absent when not given).
class CrossEntropyLoss : public Loss {
 public:
  explicit CrossEntropyLoss(const Tensor& weight = {}, int64_t ignore_index = -100,
                            Reduction reduction = Reduction::Mean, double label_smoothing = 0.0);
  using Loss::forward;
  Tensor forward(const Tensor& input, const Tensor& target) override;
  Tensor& weight;
  int64_t ignore_index;
  double label_smoothing;
};

class NLLLoss : public Loss {
 public:
  explicit NLLLoss(const Tensor& weight = {}, int64_t ignore_index = -100,
                   Reduction reduction = Reduction::Mean);
  using Loss::forward;
  Tensor forward(const Tensor& input, const Tensor& target) override;
  Tensor& weight;
  int64_t ignore_index;
};

class MSELoss : public Loss {
 public:
  explicit MSELoss(Reduction reduction = Reduction::Mean) : Loss("MSELoss", reduction) {}
  using Loss::forward;
  Tensor forward(const Tensor& input, const Tensor& target) override;
};

// Buffers "weight" and "pos_weight" when given.
class BCEWithLogitsLoss : public Loss {
 public:
  explicit BCEWithLogitsLoss(const Tensor& weight = {}, Reduction reduction = Reduction::Mean,
                             const Tensor& pos_weight = {});
  using Loss::forward;
  Tensor forward(const Tensor& input, const Tensor& target) override;
  Tensor& weight;
  Tensor& pos_weight;
};

class SmoothL1Loss : public Loss {
 public:
  explicit SmoothL1Loss(Reduction reduction = Reduction::Mean, double beta = 1.0)
      : Loss("SmoothL1Loss", reduction), beta(beta) {}
  using Loss::forward;
  Tensor forward(const Tensor& input, const Tensor& target) override;
  double beta;
};

}  // namespace kiln::nn
