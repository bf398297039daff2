#pragma once
// The CUDA side of the runtime's eager kernels: kernels::binary_out / unary_out / copy come here
// when a tensor is on the device, so the frontend's ops (and their gradients, built from the same
// ops) run on CUDA tensors unchanged. Every tensor of a call must be on one device: a mix is an
// error naming both devices.

#include <span>

#include "kiln/runtime/kernels/elementwise.h"
#include "kiln/runtime/tensor.h"

namespace kiln::cuda {

// out = op(a, b) with a tensor or a scalar on each side (a_tensor/b_tensor null for a scalar).
void binary_out(kernels::BinaryOp op, const TensorImpl* a_tensor, const kernels::Scalar& a_scalar,
                const TensorImpl* b_tensor, const kernels::Scalar& b_scalar, TensorImpl& out,
                const kernels::Scalar& alpha);
void unary_out(kernels::UnaryOp op, const TensorImpl& x, TensorImpl& out,
               const kernels::UnaryParams& params);
// out = kiln::kernels::scalar::<formula>(grad, saved, params...) (the activations' backward
// formulas of unary_formulas.h); grad and saved broadcast to out.
void formula_out(std::string_view op, const char* formula, const TensorImpl& grad,
                 const TensorImpl& saved, std::span<const double> params, TensorImpl& out);
// out = sum (or mean) of x over `dims` (all dims when empty); out contiguous, of the kept dims.
void reduce_out(std::string_view op, const TensorImpl& x, std::span<const int64_t> dims, bool mean,
                TensorImpl& out);
// The CUDA C of reduce_out's kernel (the NVRTC tests compile it).
std::string reduce_source();
// Every element of a contiguous int64 device tensor set to `value`, ordered on the eager stream
// (no host copy, so no wait: batch norm's counter increments by a device one each step).
void fill_int64(TensorImpl& out, int64_t value);
// The CUDA C of the int64 add/sub/mul kernel binary_out runs for int64 outputs, and of the
// byte-to-float conversion copy_out runs for masks.
std::string int64_source();
// out = mse loss of (input, target) with kernels::LossReduction r (0 none, 1 mean, 2 sum), and its
// gradient w.r.t. input.
void mse_loss_out(const TensorImpl& input, const TensorImpl& target, int reduction,
                  TensorImpl& out);
void mse_loss_backward_out(const TensorImpl& grad, const TensorImpl& input,
                           const TensorImpl& target, int reduction, TensorImpl& grad_input);
// kernels::copy_ where either tensor is on the device.
void copy_out(TensorImpl& dst, const TensorImpl& src);
// A contiguous copy of `t` on `device` (cpu <-> cuda; cuda -> cuda is a device copy).
TensorImplPtr to_device(const TensorImpl& t, Device device);
// Throws "op: expected all tensors on one device, got <d0> (<what0>) and <d1> (<what1>)".
void check_same_device(std::string_view op, const TensorImpl& a, const char* a_what,
                       const TensorImpl& b, const char* b_what);

}  // namespace kiln::cuda
