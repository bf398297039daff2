#pragma once
// Shared helpers of the builtin kernel registrations (src/ops/*.cpp): operand access and the
// parameter structs several kernels decode into.

#include <memory>

#include "kiln/runtime/kernels/conv.h"
#include "kiln/runtime/kernels/pool.h"
#include "kiln/runtime/registry.h"

namespace kiln::rt::ops {

inline const TensorImpl& in(const KernelCall& c, size_t i) {
  return *c.inputs[i];
}
inline const TensorImpl* opt_in(const KernelCall& c, size_t i) {
  return i < c.inputs.size() ? c.inputs[i] : nullptr;
}
inline TensorImpl& out(const KernelCall& c, size_t i = 0) {
  return *c.outputs[i];
}

template <typename P>
const P& params(const KernelCall& c) {
  return static_cast<const P&>(*c.params);
}

// Parameters that are one small fixed set of numbers (most kernels).
struct IntParams : KernelParams {
  int64_t v[4] = {0, 0, 0, 0};
  bool flag = false;
};
struct FloatParams : KernelParams {
  double v[2] = {0, 0};
  int64_t k = 0;
};
struct DimsParams : KernelParams {
  Dims dims;
  bool keepdim = false;
  double f = 0;
};

// A stack-allocated strided view of `base` (no heap allocation: Dims keeps 6 dims inline).
inline TensorImpl view_of(const TensorImpl& base, Dims sizes, Dims strides, int64_t offset) {
  return TensorImpl(base.storage(), std::move(sizes), std::move(strides), offset, base.dtype());
}

// Attribute decoders shared by forward and backward entries (defined in nn.cpp).
// conv2d*: stride, padding, dilation, groups.
kernels::Conv2dParams conv2d_params(const AttrMap& a);
// max_pool2d: kernel, stride, padding, dilation, ceil_mode; avg_pool2d(_backward): kernel, stride,
// padding, ceil_mode, count_include_pad.
kernels::Pool2dParams pool2d_params(const AttrMap& a);
struct ConvParams : KernelParams {
  kernels::Conv2dParams p;
};
struct PoolParams : KernelParams {
  kernels::Pool2dParams p;
};

void register_elementwise(Registry& r);
void register_shape(Registry& r);
void register_nn(Registry& r);
void register_reduce(Registry& r);
void register_loss(Registry& r);
void register_backward(Registry& r);
void register_indexing(Registry& r);
void register_random(Registry& r);
void register_checks(Registry& r);
void register_quantize(Registry& r);

}  // namespace kiln::rt::ops
