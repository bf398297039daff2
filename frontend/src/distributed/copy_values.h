#pragma once
// One way the distributed code moves values between tensors it owns (collective buffers,
// gradient buckets, parameters): no autograd record, any device, any thread.

#include "kiln/autograd.h"
#include "kiln/tensor.h"

namespace kiln::distributed::detail {

// dst = src (same shape, same device).
inline void copy_values(const Tensor& dst, const Tensor& src) {
  autograd::NoGradGuard no_grad;
  dst.detach().copy_(src.detach());
}

}  // namespace kiln::distributed::detail
