#pragma once
// Random fills and dropout on CUDA tensors. The kernels run the CPU's Philox4x32-10 streams
// (kernels/random.h): a fill of a device tensor consumes the generator's counter blocks exactly as
// the same fill on the CPU and gives each element the same block and word, so the values are the
// CPU's: bernoulli exactly, uniform to one rounding (the host compiler may fuse its multiply-add),
// normal to the device's float log, sin and cos. The
// runtime's kernels::uniform_ / normal_ / bernoulli_ / dropout_mask_out / dropout_out come here
// for device tensors.

#include <string>

#include "kiln/runtime/kernels/random.h"
#include "kiln/runtime/tensor.h"

namespace kiln::cuda {

// float32 tensors (any strides).
void uniform_(TensorImpl& t, double lo, double hi, Generator& g);
void normal_(TensorImpl& t, double mean, double std, Generator& g);
// float32, or contiguous bool / uint8.
void bernoulli_(TensorImpl& t, double p, Generator& g);
// The keep-mask (1 with probability 1 - p): a contiguous bool or uint8 tensor.
void dropout_mask_out(double p, TensorImpl& mask, Generator& g);
// out = input * mask / (1 - p) (0 where the mask is 0; all 0 for p = 1); errors name `op`
// (dropout, or dropout_backward for the same product on the gradient).
void dropout_out(std::string_view op, const TensorImpl& input, const TensorImpl& mask, double p,
                 TensorImpl& out);

// The CUDA C of the fills (the NVRTC tests compile it).
std::string random_source();

}  // namespace kiln::cuda
