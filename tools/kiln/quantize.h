#pragma once
// The CLI's int8 options (`kiln export` / `kiln import` --quantize int8 --calibration X.npy, or
// --quantize dynamic):
// parsing, and kiln::quant's prepare -> calibrate -> convert on a traced function.

#include <string>
#include <utility>
#include <vector>

#include "kiln/trace/trace.h"

namespace kiln::cli {

struct QuantizeArgs {
  std::string scheme;       // "" (float), "int8" or "dynamic"
  std::string calibration;  // .npy: calibration inputs along the batch axis
  std::string method = "minmax";
  std::string sqnr_input;  // .npy the per-value SQNR is measured on (default: calibration batch 0)
};

// The help text of the options below.
extern const char* kQuantizeHelp;

// Consumes option `a` (taking its value from `value()`) when it is one of --quantize,
// --calibration, --calibration-method, --sqnr-input; returns whether it did.
template <typename Value>
bool parse_quantize_arg(const std::string& a, Value value, QuantizeArgs& q) {
  if (a == "--quantize") {
    q.scheme = value();
  } else if (a == "--calibration") {
    q.calibration = value();
  } else if (a == "--calibration-method") {
    q.method = value();
  } else if (a == "--sqnr-input") {
    q.sqnr_input = value();
  } else {
    return false;
  }
  return true;
}

// Quantizes `fn` (one input) on the batches of q.calibration, prints the layer report and the
// SQNR at each observed value, and appends what was done to `metadata` (the SQNR table as
// "quant.sqnr", one "name<TAB>dB" line per value, which `kiln quant-report` prints). Throws
// kiln::Error naming the option for bad arguments or calibration data of the wrong shape or dtype.
jit::TracedFunction quantize_traced(jit::TracedFunction fn, const QuantizeArgs& q, const char* who,
                                    std::vector<std::pair<std::string, std::string>>& metadata);

}  // namespace kiln::cli
