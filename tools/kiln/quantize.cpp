#include "quantize.h"

#include "batches.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "kiln/jit/quantize.h"
#include "kiln/kiln.h"
#include "kiln/serialize.h"

namespace kiln::cli {

const char* kQuantizeHelp =
    "  --quantize int8   post-training static int8: conv2d and linear layers run as integer\n"
    "                    kernels (weights int8 per output channel, activations uint8 per tensor)\n"
    "  --calibration X.npy  calibration inputs along the batch axis (needed with --quantize),\n"
    "                    cut into batches of the input shape's batch size\n"
    "  --calibration-method M  minmax (default), percentile (99.99%) or moving-average\n"
    "  --sqnr-input X.npy  inputs (along the batch axis) to measure the int8 model's SQNR at\n"
    "                    every output and layer on (default: the first calibration batch)\n"
    "  --quantize dynamic  dynamic quantization: linear layers (LSTM/GRU projections too) get\n"
    "                    int8 weights and quantize their input per call; no calibration\n";

namespace {

// --quantize dynamic: quant::quantize_dynamic, its layer report, and the SQNR at each output on
// --sqnr-input when given.
jit::TracedFunction quantize_dynamic(jit::TracedFunction fn, const QuantizeArgs& q, const char* who,
                                     std::vector<std::pair<std::string, std::string>>& metadata) {
  KILN_CHECK(q.calibration.empty(), who,
             "--quantize dynamic takes no --calibration (inputs are quantized per call)");
  std::vector<Tensor> measure;
  if (!q.sqnr_input.empty()) {
    KILN_CHECK(fn.num_inputs() == 1 && !fn.guards().empty(), who,
               "--sqnr-input gives one input of the traced shape; the model takes ",
               fn.num_inputs());
    const jit::Guard guard = fn.guards()[0];
    measure = read_batches(q.sqnr_input, guard.sizes, guard.dtype, who, "--sqnr-input");
  }
  autograd::NoGradGuard no_grad;
  std::vector<TensorList> want;  // float32 outputs, before the function is quantized
  for (const Tensor& b : measure) want.push_back(fn({b}));
  std::vector<quant::LayerReport> layers;
  jit::TracedFunction out = quant::quantize_dynamic(std::move(fn), {}, &layers);
  int64_t n = 0;
  for (const quant::LayerReport& r : layers) n += r.quantized;
  std::printf("%lld of %zu linear layers int8 (dynamic: inputs quantized per call)\n",
              static_cast<long long>(n), layers.size());
  for (const quant::LayerReport& r : layers)
    if (!r.quantized)
      std::printf("  linear #%lld: float32, %s\n", static_cast<long long>(r.index),
                  r.reason.c_str());
  if (!measure.empty()) {
    std::vector<quant::Sqnr> total(want[0].size());
    for (size_t k = 0; k < measure.size(); ++k) {
      const TensorList got = out({measure[k]});
      for (size_t i = 0; i < total.size(); ++i) total[i].add(want[k][i], got[i]);
    }
    std::printf("SQNR of the int8 model against float32 on %s (%zu batches):\n",
                std::filesystem::path(q.sqnr_input).filename().string().c_str(), measure.size());
    for (size_t i = 0; i < total.size(); ++i)
      std::printf("  output %-21zu %6.1f dB\n", i, total[i].db());
  }
  metadata.emplace_back("quantize", "dynamic int8");
  return out;
}

}  // namespace

jit::TracedFunction quantize_traced(jit::TracedFunction fn, const QuantizeArgs& q, const char* who,
                                    std::vector<std::pair<std::string, std::string>>& metadata) {
  if (q.scheme == "dynamic") return quantize_dynamic(std::move(fn), q, who, metadata);
  KILN_CHECK(q.scheme == "int8", who, "--quantize: expected int8 or dynamic, got '", q.scheme, "'");
  KILN_CHECK(!q.calibration.empty(), who,
             "--quantize int8 needs --calibration X.npy (calibration inputs along the batch axis)");
  quant::QConfig config;
  if (q.method == "minmax") {
    config.calibration = quant::Calibration::MinMax;
  } else if (q.method == "percentile") {
    config.calibration = quant::Calibration::Percentile;
  } else if (q.method == "moving-average") {
    config.calibration = quant::Calibration::MovingAverageMinMax;
  } else {
    fail(who, "--calibration-method: expected minmax, percentile or moving-average, got '",
         q.method, "'");
  }
  KILN_CHECK(fn.num_inputs() == 1, who, "--calibration gives one input; the model takes ",
             fn.num_inputs());
  KILN_CHECK(!fn.guards().empty(), who, "the traced model records no input shape to calibrate");
  const jit::Guard guard = fn.guards()[0];
  const std::vector<Tensor> calibration =
      read_batches(q.calibration, guard.sizes, guard.dtype, who, "--calibration");
  std::vector<Tensor> measure;
  if (!q.sqnr_input.empty())
    measure = read_batches(q.sqnr_input, guard.sizes, guard.dtype, who, "--sqnr-input");

  autograd::NoGradGuard no_grad;
  quant::Prepared prepared = quant::prepare(std::move(fn), config);
  for (const Tensor& b : calibration) prepared.calibrate({b});
  std::printf("%s", prepared.report().c_str());

  std::vector<TensorList> measured;
  for (const Tensor& b : measure.empty() ? std::vector<Tensor>{calibration[0]} : measure)
    measured.push_back({b});
  const std::vector<quant::PointError> total = prepared.compare(measured);
  const std::string on = measure.empty() ? "the first calibration batch"
                                         : std::filesystem::path(q.sqnr_input).filename().string() +
                                               " (" + std::to_string(measure.size()) + " batches)";
  std::printf("SQNR of the int8 model against float32 on %s:\n", on.c_str());
  std::string table = "measured on " + on + "\n";
  for (const quant::PointError& e : total) {
    const double db = e.sqnr.db();
    std::printf("  %-28s %6.1f dB\n", e.name.c_str(), db);
    char line[96];
    std::snprintf(line, sizeof line, "%s\t%.1f\n", e.name.c_str(), db);
    table += line;
  }
  metadata.emplace_back("quantize", "int8");
  metadata.emplace_back("calibration", std::filesystem::path(q.calibration).filename().string() +
                                           " (" + std::to_string(calibration.size()) +
                                           " batches, " + q.method + ")");
  metadata.emplace_back("quant.sqnr", table);
  return quant::convert(std::move(prepared));
}

}  // namespace kiln::cli
