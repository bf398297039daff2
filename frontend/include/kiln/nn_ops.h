#pragma once
// Neural-network ops (PyTorch's torch.nn.functional names), each differentiable. First-order
// gradients run the runtime's fused backward kernels.

#include <initializer_list>
#include <optional>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {

// A (height, width) pair that also accepts a single value: stride = 2 or stride = {2, 1}.
struct Pair2 {
  int64_t h, w;
  Pair2(int64_t v) : h(v), w(v) {}  // NOLINT: implicit on purpose
  Pair2(std::initializer_list<int64_t> v)
      : h(*v.begin()), w(v.size() > 1 ? *(v.begin() + 1) : *v.begin()) {}
  Pair2(int64_t h_, int64_t w_) : h(h_), w(w_) {}
};

enum class Reduction { None, Mean, Sum };

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = {}, Pair2 stride = 1,
              Pair2 padding = 0, Pair2 dilation = 1, int64_t groups = 1);
Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias = {},
              int64_t stride = 1, int64_t padding = 0, int64_t dilation = 1, int64_t groups = 1);
Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias = {},
                        Pair2 stride = 1, Pair2 padding = 0, Pair2 output_padding = 0,
                        int64_t groups = 1, Pair2 dilation = 1);

// Values and int64 indices (flat h*W+w per plane).
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, Pair2 kernel,
                                                  std::optional<Pair2> stride = std::nullopt,
                                                  Pair2 padding = 0, Pair2 dilation = 1,
                                                  bool ceil_mode = false);
Tensor max_pool2d(const Tensor& input, Pair2 kernel, std::optional<Pair2> stride = std::nullopt,
                  Pair2 padding = 0, Pair2 dilation = 1, bool ceil_mode = false);
Tensor avg_pool2d(const Tensor& input, Pair2 kernel, std::optional<Pair2> stride = std::nullopt,
                  Pair2 padding = 0, bool ceil_mode = false, bool count_include_pad = true);
Tensor adaptive_avg_pool2d(const Tensor& input, Pair2 output_size);

// running_mean/var are updated in place when training (and defined).
Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight = {}, const Tensor& bias = {}, bool training = false,
                  double momentum = 0.1, double eps = 1e-5);
Tensor layer_norm(const Tensor& input, std::span<const int64_t> normalized_shape,
                  const Tensor& weight = {}, const Tensor& bias = {}, double eps = 1e-5);
Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);

enum class InterpolateMode { Nearest, Bilinear };

// F.interpolate's options (libtorch's InterpolateFuncOptions): exactly one of size ({H, W}, or
// one value for both) and scale_factor ({sh, sw}, or one for both). With a scale factor the
// output is floor(in * scale) and the source step is 1/scale, as in PyTorch, unless
// recompute_scale_factor(true) derives the step from the sizes. align_corners is for bilinear.
class InterpolateOptions {
 public:
  InterpolateOptions& size(std::vector<int64_t> s) {
    size_ = std::move(s);
    return *this;
  }
  InterpolateOptions& scale_factor(std::vector<double> s) {
    scale_factor_ = std::move(s);
    return *this;
  }
  InterpolateOptions& mode(InterpolateMode m) {
    mode_ = m;
    return *this;
  }
  InterpolateOptions& align_corners(bool a) {
    align_corners_ = a;
    return *this;
  }
  InterpolateOptions& recompute_scale_factor(bool r) {
    recompute_scale_factor_ = r;
    return *this;
  }
  const std::optional<std::vector<int64_t>>& size() const { return size_; }
  const std::optional<std::vector<double>>& scale_factor() const { return scale_factor_; }
  InterpolateMode mode() const { return mode_; }
  const std::optional<bool>& align_corners() const { return align_corners_; }
  bool recompute_scale_factor() const { return recompute_scale_factor_; }

 private:
  std::optional<std::vector<int64_t>> size_;
  std::optional<std::vector<double>> scale_factor_;
  InterpolateMode mode_ = InterpolateMode::Nearest;
  std::optional<bool> align_corners_;
  bool recompute_scale_factor_ = false;
};

// Resamples the last two dims of an (N, C, H, W) tensor (nearest or bilinear), differentiable.
Tensor interpolate(const Tensor& input, const InterpolateOptions& options);

Tensor embedding(const Tensor& weight, const Tensor& indices,
                 std::optional<int64_t> padding_idx = std::nullopt);
// Zeroes elements with probability p (seeded from the global generator) and scales the rest by
// 1/(1-p); identity when !training or p == 0.
Tensor dropout(const Tensor& input, double p = 0.5, bool training = true);

Tensor cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight = {},
                     int64_t ignore_index = -100, Reduction reduction = Reduction::Mean,
                     double label_smoothing = 0.0);
Tensor nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight = {},
                int64_t ignore_index = -100, Reduction reduction = Reduction::Mean);
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target,
                      Reduction reduction = Reduction::Mean, double beta = 1.0);
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const Tensor& weight = {}, const Tensor& pos_weight = {},
                                        Reduction reduction = Reduction::Mean);

}  // namespace kiln
