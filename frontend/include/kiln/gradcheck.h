#pragma once
// Finite-difference checks of gradients (float64 inputs recommended, as in PyTorch).

#include <functional>
#include <string>

#include "kiln/tensor.h"

namespace kiln::autograd {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
};

struct GradcheckResult {
  bool ok = true;
  std::string message;  // first mismatch: input, element, analytical vs numerical
  explicit operator bool() const { return ok; }
};

using TensorFn = std::function<TensorList(const TensorList&)>;

// Compares the analytical vector-Jacobian products of fn at `inputs` (those requiring grad)
// with central differences, one input element at a time.
GradcheckResult gradcheck(const TensorFn& fn, const TensorList& inputs,
                          GradcheckOptions options = {});
// The same for the gradient of sum(fn(inputs) · v) with a fixed random v: checks double backward.
GradcheckResult gradgradcheck(const TensorFn& fn, const TensorList& inputs,
                              GradcheckOptions options = {});

}  // namespace kiln::autograd
