#include "kiln/quant/sqnr.h"

#include <cmath>

#include "kiln/runtime/error.h"

namespace kiln::quant {

Sqnr& Sqnr::add(const Tensor& reference, const Tensor& test) {
  KILN_CHECK(reference.sizes() == test.sizes(), "kiln::quant::sqnr", "expected shape ",
             reference.sizes(), " (the reference's), got ", test.sizes());
  const Tensor r = reference.to(DType::Float64).contiguous();
  const Tensor t = test.to(DType::Float64).contiguous();
  const double* a = r.data_ptr<double>();
  const double* b = t.data_ptr<double>();
  for (int64_t i = 0, n = r.numel(); i < n; ++i) {
    signal += a[i] * a[i];
    noise += (a[i] - b[i]) * (a[i] - b[i]);
  }
  return *this;
}

double Sqnr::db() const {
  return noise == 0 ? INFINITY : 10 * std::log10(signal / noise);
}

double sqnr(const Tensor& reference, const Tensor& test) {
  return Sqnr{}.add(reference, test).db();
}

}  // namespace kiln::quant
