#pragma once
// The CNN layers on CUDA tensors: convolution through cuDNN 9's graph API (loaded with dlopen),
// and pooling, batch normalization, softmax and the classification losses as kiln's own CUDA C
// kernels (compiled by NVRTC). The
// runtime's kernels::conv2d_out / max_pool2d_out / batch_norm_out / ... come here when their
// tensors are on the device, so nn::Conv2d, nn::BatchNorm2d, the pools and their gradients run
// on the GPU unchanged. float32 only; the semantics are the CPU kernels' (kernels/conv.h,
// pool.h, norm.h).

#include <string>

#include "kiln/runtime/kernels/conv.h"
#include "kiln/runtime/kernels/loss.h"
#include "kiln/runtime/kernels/pool.h"
#include "kiln/runtime/tensor.h"

namespace kiln::cuda {

struct ConvOptions {
  // TF32 tensor cores for float32 convolutions (10-bit mantissa products); on by default, as
  // PyTorch's torch.backends.cudnn.allow_tf32 (unlike matmuls, see MatmulOptions). Off: only
  // cuDNN engines without the tensor-core numerical note run. Engines that convert float32 inputs
  // down to 16 bits never run.
  bool allow_tf32 = true;
};
// The options eager convolutions on CUDA tensors use; set once at start-up.
ConvOptions& conv_options();

// cuDNN's version ("9.14.0"); throws where libcudnn.so.9 is not found.
std::string cudnn_version();

// out = conv2d(input, weight) (+ bias[C_out]) (then relu): NCHW input, OIHW weight, any groups,
// stride, padding and dilation. One cuDNN execution plan per shape, chosen once (the heuristic's
// candidates timed on the first call of a large convolution) and kept.
void conv2d_out(const TensorImpl& input, const TensorImpl& weight, const TensorImpl* bias,
                const kernels::Conv2dParams& p, bool relu, TensorImpl& out);
// The gradients (any may be null): grad_input through cuDNN's backward-data operation,
// grad_weight through backward-filter, grad_bias a sum over N, H, W.
void conv2d_backward_out(const TensorImpl& grad_output, const TensorImpl& input,
                         const TensorImpl& weight, const kernels::Conv2dParams& p,
                         TensorImpl* grad_input, TensorImpl* grad_weight, TensorImpl* grad_bias);

// Pooling (kernels/pool.h): indices are int64 device tensors (flat positions in each plane).
void max_pool2d_out(const TensorImpl& input, const kernels::Pool2dParams& p, TensorImpl& out,
                    TensorImpl* indices);
void max_pool2d_backward_out(const TensorImpl& grad_output, const TensorImpl& indices,
                             TensorImpl& grad_input);
void avg_pool2d_out(const TensorImpl& input, const kernels::Pool2dParams& p, TensorImpl& out);
void avg_pool2d_backward_out(const TensorImpl& grad_output, const kernels::Pool2dParams& p,
                             TensorImpl& grad_input);
void adaptive_avg_pool2d_out(const TensorImpl& input, TensorImpl& out);
void adaptive_avg_pool2d_backward_out(const TensorImpl& grad_output, TensorImpl& grad_input);

// Batch normalization (kernels/norm.h's batch_norm_out / batch_norm_backward_out): per-channel
// statistics accumulated in double over blocks that each take a slice of a channel.
void batch_norm_out(const TensorImpl& input, const TensorImpl* weight, const TensorImpl* bias,
                    TensorImpl* running_mean, TensorImpl* running_var, bool training,
                    double momentum, double eps, TensorImpl& out, TensorImpl* save_mean,
                    TensorImpl* save_invstd);
void batch_norm_backward_out(const TensorImpl& grad_output, const TensorImpl& input,
                             const TensorImpl* weight, const TensorImpl* running_mean,
                             const TensorImpl* running_var, const TensorImpl* save_mean,
                             const TensorImpl* save_invstd, bool training, double eps,
                             TensorImpl* grad_input, TensorImpl* grad_weight,
                             TensorImpl* grad_bias);

// softmax / log_softmax along `dim` and their gradients (kernels/reduce.h): one block per row,
// the max subtracted before exp.
void softmax_out(const TensorImpl& self, int64_t dim, bool log, TensorImpl& out);
void softmax_backward_out(const TensorImpl& grad_output, const TensorImpl& output, int64_t dim,
                          bool log, TensorImpl& grad_input);

// cross_entropy from logits (log_softmax over dim 1, then the negative log-likelihood) and
// nll_loss from log-probabilities, with class weights, ignore_index, label smoothing
// (cross_entropy only) and reductions (kernels/loss.h). Targets are int64 device tensors; a
// target outside [0, C) other than ignore_index is an error naming it (which reads one flag back
// from the device).
void cross_entropy_out(const TensorImpl& input, const TensorImpl& target,
                       const kernels::CrossEntropyOptions& opt, bool log_input, TensorImpl& out);
void cross_entropy_backward_out(const TensorImpl& grad_output, const TensorImpl& input,
                                const TensorImpl& target, const kernels::CrossEntropyOptions& opt,
                                bool log_input, TensorImpl& grad_input);

// The CUDA C of the pooling, batch-norm, softmax and loss kernels (the NVRTC tests compile them).
std::string pool_source();
std::string batch_norm_source();
std::string softmax_loss_source();

}  // namespace kiln::cuda
