#pragma once
// kiln::quant::prepare / convert — post-training static int8 quantization of a traced inference
// function (PyTorch's prepare_fx / convert_fx, ONNX Runtime's quantize_static):
//
//   auto prepared = kiln::quant::prepare(*model, {example});    // traced in eval mode, or
//   auto prepared = kiln::quant::prepare(std::move(traced));    // a trace / jit::import_onnx
//   for (const Tensor& batch : calibration) prepared.calibrate({batch});
//   std::printf("%s", prepared.report().c_str());              // what runs int8, what stays fp32
//   kiln::jit::TracedFunction q = kiln::quant::convert(std::move(prepared));
//   kiln::jit::save(q, "model-int8.kiln");                      // kiln.qconv2d / kiln.qlinear
//
// Every kiln.conv2d and kiln.linear with constant weights (and a constant bias or none) becomes an
// integer layer: weights int8, symmetric, per output channel (per tensor when asked); its input
// and its output (after a relu that only it feeds) are observed during calibration and quantized
// per tensor with the parameters the observers choose (observer.h's formulas). The converted
// function holds quantize/dequantize pairs at those values and int8 weight constants: run by the
// interpreter it simulates the integer arithmetic in float32; jit::save (the inference pipeline's
// --kiln-fold-qdq) turns each layer into kiln.qconv2d / kiln.qlinear, so consecutive layers hand
// int8 tensors to each other. A residual add of two quantized values gets its output observed
// too and becomes kiln.qadd; max pooling runs on the bytes, and so does an average pool whose
// output is observed (a classifier's global pool before its linear: kiln.qavg_pool2d), and a
// cat of observed values, whose inputs and output share one observer (one scale and zero
// point). Other ops (softmax, ...) run in float32 between a dequantize and a quantize; report()
// lists them.
//
// kiln::quant::quantize_dynamic (PyTorch's quantize_dynamic) needs no calibration: every
// kiln.linear with a constant weight, inside loops too (an LSTM's projections), becomes
// kiln.qlinear_dynamic, int8 weights and the float input quantized to uint8 per call over its
// own range; results stay float32.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/quant/sqnr.h"
#include "kiln/tensor.h"
#include "kiln/trace/trace.h"

namespace kiln::quant {

enum class Calibration {
  MinMax,               // the range over every batch
  MovingAverageMinMax,  // min += 0.01 * (batch min - min)
  Percentile,           // the central `percentile` % of the values (outliers saturate)
};

struct QConfig {
  // Activations: uint8 (affine, the default of FBGEMM, oneDNN and XNNPACK) or int8.
  DType activation_dtype = DType::UInt8;
  bool symmetric_activations = false;
  Calibration calibration = Calibration::MinMax;
  double percentile = 99.99;
  // Weights are int8 and symmetric (zero point 0, what the VNNI kernels take), per output channel
  // unless this is false.
  bool per_channel_weights = true;
};

// One conv2d / linear of the traced function.
struct LayerReport {
  std::string op;        // "conv2d" or "linear"
  int64_t index = 0;     // its position among @forward's conv2d and linear ops
  std::string location;  // where the tracer recorded it
  Dims weight_shape;
  bool quantized = false;
  std::string reason;  // why it stays float32 (when it does)
};

// The quantized function's error at one value: an output, or a point calibration observed.
struct PointError {
  std::string name;  // "output 0", "output of conv2d #3", ...
  Sqnr sqnr;         // sqnr.db(); the sums add over batches
};

class Prepared {
 public:
  Prepared(Prepared&&) noexcept;
  Prepared& operator=(Prepared&&) noexcept;
  ~Prepared();

  // Runs the function on one calibration batch (the traced inputs' shapes and dtypes) and
  // updates every observer. Throws kiln::Error for inputs of another shape or dtype (naming the
  // expected one) and for NaN or Inf reaching an observer (naming it).
  void calibrate(const TensorList& inputs);
  int64_t num_batches() const;
  const std::vector<LayerReport>& layers() const;
  // Ops that read a dequantized value and run in float32 ("kiln.max_pool2d x1, kiln.add x8").
  std::vector<std::string> float_ops() const;
  // A readable summary: one line per layer, then the float ops.
  std::string report() const;
  // How far the quantized function (as convert() would make it, with the parameters calibrated
  // so far) strays from the float one on `inputs`: SQNR (dB) at every output and every observed
  // value, in graph order, so the layer where it drops is the one that hurts (PyTorch's Numeric
  // Suite, ONNX Runtime's qdq_loss_debug). The quantized side simulates the integer layers in
  // float32 (the QDQ graph on the interpreter).
  std::vector<PointError> compare(const TensorList& inputs) const;
  // The same over several batches (each one set of inputs), the errors summed.
  std::vector<PointError> compare(const std::vector<TensorList>& batches) const;

 private:
  friend Prepared prepare(jit::TracedFunction fn, const QConfig& config);
  friend jit::TracedFunction convert(Prepared prepared);
  void calibrate_checks(const TensorList& inputs, const char* who) const;

 public:
  struct Impl;  // quantize.cpp's

 private:
  const Impl& impl(const char* who) const;  // throws once moved from
  explicit Prepared(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Freezes `fn` (an inference function: not a training step), runs the eval-mode folds and batch
// norm folding, and places the observers.
Prepared prepare(jit::TracedFunction fn, const QConfig& config = {});
// The same for an eager module (PyTorch's prepare_fx on a module): its forward traced on
// `example_inputs` in eval mode without autograd (the module's mode is restored); the
// calibration batches then have the example inputs' shapes and dtypes.
Prepared prepare(nn::Module& module, const TensorList& example_inputs, const QConfig& config = {});

// The quantized function (see the top of this file). Throws kiln::Error if no batch was
// calibrated.
jit::TracedFunction convert(Prepared prepared);

struct DynamicQConfig {
  // Weights int8 symmetric, per output channel unless this is false.
  bool per_channel_weights = true;
};
// Dynamic quantization of `fn` (frozen first; an inference function, not a training step): each
// kiln.linear with a constant float32 weight becomes kiln.qlinear_dynamic. `layers`, when given,
// receives one entry per linear, quantized or not and why.
jit::TracedFunction quantize_dynamic(jit::TracedFunction fn, const DynamicQConfig& config = {},
                                     std::vector<LayerReport>* layers = nullptr);
// The same for an eager module, traced as prepare(module, ...) traces it.
jit::TracedFunction quantize_dynamic(nn::Module& module, const TensorList& example_inputs,
                                     const DynamicQConfig& config = {},
                                     std::vector<LayerReport>* layers = nullptr);

}  // namespace kiln::quant
