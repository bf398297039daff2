#pragma once
// Signal-to-quantization-noise ratio, the measure of how far a quantized model strays from its
// float one: 10 log10(sum ref^2 / sum (ref - test)^2) in dB, sums in float64. Sqnr keeps the two
// sums so that batches add up (the SQNR of several batches is not the mean of theirs).

#include "kiln/tensor.h"

namespace kiln::quant {

struct Sqnr {
  double signal = 0, noise = 0;
  // Adds `test` against `reference` (same shape, else kiln::Error naming both).
  Sqnr& add(const Tensor& reference, const Tensor& test);
  Sqnr& operator+=(const Sqnr& other) {
    signal += other.signal;
    noise += other.noise;
    return *this;
  }
  // In dB; infinity when there is no noise.
  double db() const;
};

// Sqnr{}.add(reference, test).db().
double sqnr(const Tensor& reference, const Tensor& test);

}  // namespace kiln::quant
