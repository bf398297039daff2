#pragma once
// Observers: they watch calibration batches (eager, outside any trace) and choose the scale and
// zero point of a tensor, as PyTorch's torch.ao.quantization observers do (1.13's formulas:
// _ObserverBase._calculate_qparams, in float32).
//
//   affine:    scale = (max(max_val, 0) - min(min_val, 0)) / (quant_max - quant_min)
//              zero_point = clamp(quant_min - round_half_even(min(min_val, 0) / scale))
//   symmetric: scale = max(-min(min_val, 0), max(max_val, 0)) / ((quant_max - quant_min) / 2)
//              zero_point = 0 (int8) or 128 (uint8; the range's midpoint for a custom range)
//   scale >= float32 epsilon; an observer that saw nothing gives scale 1, zero point 0.
//
// Ranges: int8 [-128, 127], uint8 [0, 255], int32 its full range; reduce_range halves int8 and
// uint8 (one bit less: [-64, 63], [0, 127]), for kernels whose products would otherwise saturate.

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::quant {

enum class QScheme { PerTensorAffine, PerTensorSymmetric, PerChannelAffine, PerChannelSymmetric };

struct ObserverOptions {
  DType dtype = DType::UInt8;  // int8, uint8 or int32
  QScheme qscheme = QScheme::PerTensorAffine;
  bool reduce_range = false;
  std::optional<int64_t> quant_min, quant_max;  // both or neither: a custom range
  int64_t ch_axis = 0;                          // per-channel schemes
  double averaging_constant = 0.01;             // moving-average observers
  double percentile = 99.99;                    // PercentileObserver: the kept share, in %
  int64_t bins = 2048;                          // PercentileObserver
};

// What quantize / fake_quantize take: scale (float32) and zero_point (int64), 0-dim per tensor
// or 1-dim along `axis`, and the range.
struct QParams {
  Tensor scale, zero_point;
  int64_t axis = 0;
  int64_t quant_min = 0, quant_max = 255;
  DType dtype = DType::UInt8;
  bool per_channel() const { return scale.dim() == 1; }
};

// The range options give; throws kiln::Error for an inconsistent one (a custom range outside the
// dtype's, or quant_min >= quant_max).
std::pair<int64_t, int64_t> quant_range(const ObserverOptions& options);

// The scale and zero point for observed minima and maxima (0-dim, or 1-dim per channel), as above.
QParams calculate_qparams(const Tensor& min_val, const Tensor& max_val,
                          const ObserverOptions& options);

class Observer {
 public:
  explicit Observer(ObserverOptions options);
  virtual ~Observer() = default;
  // Records x's statistics and returns x (float32; no gradient flows through the recording).
  Tensor operator()(const Tensor& x);
  virtual QParams calculate_qparams() const;
  const ObserverOptions& options() const { return options_; }
  // The running minimum and maximum (0-dim, or one per channel); undefined before any batch.
  const Tensor& min_val() const { return min_val_; }
  const Tensor& max_val() const { return max_val_; }

 protected:
  virtual void observe(const Tensor& x) = 0;
  ObserverOptions options_;
  Tensor min_val_, max_val_;
};

// The running minimum and maximum over every batch.
class MinMaxObserver : public Observer {
 public:
  explicit MinMaxObserver(ObserverOptions options = {});

 protected:
  void observe(const Tensor& x) override;
};

// min += c * (batch min - min) (the first batch sets them).
class MovingAverageMinMaxObserver : public Observer {
 public:
  explicit MovingAverageMinMaxObserver(ObserverOptions options = {});

 protected:
  void observe(const Tensor& x) override;
};

// Per channel along ch_axis (weights: per_channel_symmetric int8, ch_axis 0).
class PerChannelMinMaxObserver : public Observer {
 public:
  explicit PerChannelMinMaxObserver(ObserverOptions options = {});

 protected:
  void observe(const Tensor& x) override;
};

// A histogram of every batch (bins over the observed range, re-binned as it widens); the range
// kept is the central `percentile` % of the values (ONNX Runtime's "Percentile" calibration):
// outliers beyond it saturate instead of coarsening every other value's step.
class PercentileObserver : public Observer {
 public:
  explicit PercentileObserver(ObserverOptions options = {});
  QParams calculate_qparams() const override;

 protected:
  void observe(const Tensor& x) override;

 private:
  std::vector<double> histogram_;
  double lo_ = 0, hi_ = 0;
};

// Quantization-aware training's fake quantization (PyTorch's FakeQuantize): each call observes x
// (while observation is on) and fake-quantizes it with the parameters observed so far (while fake
// quantization is on), the gradient passing straight through where x is in range. Turn
// observation off once the ranges have settled to freeze the parameters.
class FakeQuantize {
 public:
  explicit FakeQuantize(std::shared_ptr<Observer> observer);
  Tensor operator()(const Tensor& x);
  void enable_observer(bool on) { observe_ = on; }
  void enable_fake_quant(bool on) { fake_quant_ = on; }
  // The parameters the last call used (PyTorch's defaults, scale 1 and zero point 0, before).
  const QParams& qparams() const { return qparams_; }
  Observer& observer() { return *observer_; }

 private:
  std::shared_ptr<Observer> observer_;
  QParams qparams_;
  bool observe_ = true, fake_quant_ = true;
};

}  // namespace kiln::quant
