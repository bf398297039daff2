// check_trace: eager vs. the trace on input sets the trace did not see.

#include <algorithm>
#include <cmath>
#include <sstream>

#include "kiln/autograd.h"
#include "kiln/ops.h"
#include "kiln/trace/trace.h"

namespace kiln::jit {

namespace {

// The first difference between an eager and a traced output beyond rtol/atol, or "".
std::string compare(const Tensor& eager, const Tensor& traced, double rtol, double atol) {
  std::ostringstream os;
  if (eager.sizes() != traced.sizes() || eager.dtype() != traced.dtype()) {
    os << "eager gives " << eager.sizes() << " " << dtype_short_name(eager.dtype())
       << ", the trace " << traced.sizes() << " " << dtype_short_name(traced.dtype());
    return os.str();
  }
  const Tensor e = eager.detach().to(DType::Float64).contiguous();
  const Tensor t = traced.detach().to(DType::Float64).contiguous();
  const double* pe = e.data_ptr<double>();
  const double* pt = t.data_ptr<double>();
  double worst = 0;
  int64_t at = -1;
  for (int64_t i = 0; i < e.numel(); ++i) {
    const bool same = pe[i] == pt[i] || (std::isnan(pe[i]) && std::isnan(pt[i]));  // inf too
    const double diff = same ? 0 : std::abs(pe[i] - pt[i]);
    const bool within = diff <= atol + rtol * std::abs(pe[i]);  // NaN diff: not within
    if (!within && (at < 0 || !(diff <= worst))) {
      worst = diff;
      at = i;
    }
  }
  if (at < 0) return "";
  os << "element " << at << ": eager " << pe[at] << ", the trace " << pt[at] << " (difference "
     << worst << ")";
  return os.str();
}

}  // namespace

TraceCheck check_trace(const std::function<TensorList(const TensorList&)>& fn,
                       const std::vector<TensorList>& input_sets, double rtol, double atol,
                       const TraceOptions& options) {
  KILN_CHECK(!input_sets.empty(), "check_trace", "expected at least one input set, got none");
  const TracedFunction traced = trace(fn, input_sets[0], options);
  TraceCheck check;
  auto report = [&](size_t set, const std::string& what) {
    check.ok = false;
    check.report += "input set " + std::to_string(set) + ": " + what + "\n";
  };
  for (size_t k = 1; k < input_sets.size(); ++k) {
    TensorList eager;
    {
      autograd::NoGradGuard no_grad;
      eager = fn(input_sets[k]);
    }
    TensorList got;
    try {
      got = traced(input_sets[k]);
    } catch (const GuardError& e) {
      report(k, std::string("the trace refuses it: ") + e.what());
      continue;
    } catch (const Error& e) {
      report(k, std::string("the trace fails: ") + e.what());
      continue;
    }
    if (eager.size() != got.size()) {
      report(k, "eager returns " + std::to_string(eager.size()) + " outputs, the trace " +
                    std::to_string(got.size()));
      continue;
    }
    for (size_t i = 0; i < eager.size(); ++i) {
      const std::string diff = compare(eager[i], got[i], rtol, atol);
      if (!diff.empty()) report(k, "output " + std::to_string(i) + ": " + diff);
    }
  }
  return check;
}

}  // namespace kiln::jit
