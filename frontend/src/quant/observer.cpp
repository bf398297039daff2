// The observers of kiln/quant/observer.h: running statistics in float32 and PyTorch 1.13's
// parameter formulas.

#include "kiln/quant/observer.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kiln/autograd.h"
#include "kiln/ops.h"
#include "kiln/quant.h"
#include "kiln/runtime/error.h"
#include "kiln/runtime/kernels/quantize.h"

namespace kiln::quant {
namespace {

constexpr const char* kOp = "observer";

bool symmetric(QScheme q) {
  return q == QScheme::PerTensorSymmetric || q == QScheme::PerChannelSymmetric;
}
bool per_channel(QScheme q) {
  return q == QScheme::PerChannelAffine || q == QScheme::PerChannelSymmetric;
}

// x as a contiguous float32 tensor (observers read values directly).
Tensor as_f32(const Tensor& x) {
  KILN_CHECK(x.defined() && is_floating(x.dtype()), kOp, "expected a floating-point tensor, got ",
             x.defined() ? dtype_name(x.dtype()) : "an undefined tensor");
  return x.detach().to(DType::Float32).contiguous();
}

Tensor scalar(float v) {
  Tensor t(kiln::empty(Dims{}, DType::Float32));
  t.impl()->data_ptr<float>()[0] = v;
  return t;
}

// min and max of x, ignoring NaN (PyTorch's aminmax propagates it; an observer that saw one NaN
// would then give NaN scales, so kiln skips them and says nothing: they quantize to the zero
// point).
std::pair<float, float> finite_min_max(const float* p, int64_t n) {
  float lo = std::numeric_limits<float>::infinity(), hi = -lo;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(p[i])) continue;
    lo = std::min(lo, p[i]);
    hi = std::max(hi, p[i]);
  }
  return {lo, hi};
}

}  // namespace

std::pair<int64_t, int64_t> quant_range(const ObserverOptions& o) {
  int64_t lo = 0, hi = 0;
  switch (o.dtype) {
    case DType::Int8:
      lo = o.reduce_range ? -64 : -128, hi = o.reduce_range ? 63 : 127;
      break;
    case DType::UInt8:
      lo = 0, hi = o.reduce_range ? 127 : 255;
      break;
    case DType::Int32:
      lo = std::numeric_limits<int32_t>::min(), hi = std::numeric_limits<int32_t>::max();
      break;
    default:
      fail(kOp, "expected dtype int8, uint8 or int32, got ", dtype_name(o.dtype));
  }
  KILN_CHECK(o.quant_min.has_value() == o.quant_max.has_value(), kOp,
             "expected both quant_min and quant_max or neither, got only ",
             o.quant_min ? "quant_min" : "quant_max");
  if (o.quant_min) {
    KILN_CHECK(*o.quant_min < *o.quant_max && *o.quant_min >= lo && *o.quant_max <= hi, kOp,
               "expected quant_min < quant_max within ", dtype_name(o.dtype), "'s [", lo, ", ", hi,
               "], got [", *o.quant_min, ", ", *o.quant_max, "]");
    return {*o.quant_min, *o.quant_max};
  }
  return {lo, hi};
}

QParams calculate_qparams(const Tensor& min_val, const Tensor& max_val, const ObserverOptions& o) {
  const auto [qmin, qmax] = quant_range(o);
  QParams out;
  out.axis = o.ch_axis, out.quant_min = qmin, out.quant_max = qmax, out.dtype = o.dtype;
  const bool pc = per_channel(o.qscheme);
  if (!min_val.defined() || !max_val.defined()) {  // nothing observed: PyTorch's defaults
    out.scale = pc ? ones({1}) : scalar(1.0f);
    out.zero_point =
        pc ? zeros({1}, TensorOptions(DType::Int64)) : zeros({}, TensorOptions(DType::Int64));
    return out;
  }
  const Tensor lo = as_f32(min_val), hi = as_f32(max_val);
  KILN_CHECK(lo.sizes() == hi.sizes() && lo.dim() <= 1, kOp,
             "expected min_val and max_val of one shape, 0 or 1 dims, got ", lo.sizes(), " and ",
             hi.sizes());
  const int64_t n = lo.numel();
  Tensor scale(kiln::empty(lo.sizes(), DType::Float32));
  Tensor zero_point(kiln::empty(lo.sizes(), DType::Int64));
  const float eps = std::numeric_limits<float>::epsilon();
  const bool custom = o.quant_min.has_value();
  for (int64_t c = 0; c < n; ++c) {
    const float mn = lo.data_ptr<float>()[c], mx = hi.data_ptr<float>()[c];
    KILN_CHECK(mn <= mx || (std::isinf(mn) && std::isinf(mx)), kOp,
               "expected min_val <= max_val, got ", mn, " > ", mx, " (channel ", c, ")");
    float s = 1.0f;
    int64_t z = 0;
    if (std::isinf(mn) && mn > 0) {  // this channel saw nothing
    } else {
      const float neg = std::min(mn, 0.0f), pos = std::max(mx, 0.0f);
      if (symmetric(o.qscheme)) {
        s = std::max(std::max(-neg, pos) / (static_cast<float>(qmax - qmin) / 2.0f), eps);
        if (o.dtype == DType::UInt8) z = custom ? (qmin + qmax) / 2 : 128;
      } else {
        const kernels::AffineParams a = kernels::affine_qparams(mn, mx, qmin, qmax);
        s = a.scale, z = a.zero_point;
      }
    }
    scale.data_ptr<float>()[c] = s;
    zero_point.data_ptr<int64_t>()[c] = z;
  }
  out.scale = scale, out.zero_point = zero_point;
  return out;
}

Observer::Observer(ObserverOptions options) : options_(options) {
  quant_range(options_);  // checks the options now
}

Tensor Observer::operator()(const Tensor& x) {
  autograd::NoGradGuard no_grad;
  observe(as_f32(x));
  return x;
}

QParams Observer::calculate_qparams() const {
  return quant::calculate_qparams(min_val_, max_val_, options_);
}

MinMaxObserver::MinMaxObserver(ObserverOptions options) : Observer(options) {
  KILN_CHECK(!per_channel(options.qscheme), "MinMaxObserver",
             "expected a per-tensor qscheme (PerChannelMinMaxObserver observes per channel)");
}

void MinMaxObserver::observe(const Tensor& x) {
  const auto [lo, hi] = finite_min_max(x.data_ptr<float>(), x.numel());
  const float mn = min_val_.defined() ? std::min(min_val_.data_ptr<float>()[0], lo) : lo;
  const float mx = max_val_.defined() ? std::max(max_val_.data_ptr<float>()[0], hi) : hi;
  min_val_ = scalar(mn), max_val_ = scalar(mx);
}

MovingAverageMinMaxObserver::MovingAverageMinMaxObserver(ObserverOptions options)
    : Observer(options) {
  KILN_CHECK(!per_channel(options.qscheme), "MovingAverageMinMaxObserver",
             "expected a per-tensor qscheme");
  KILN_CHECK(options.averaging_constant > 0 && options.averaging_constant <= 1,
             "MovingAverageMinMaxObserver", "expected averaging_constant in (0, 1], got ",
             options.averaging_constant);
}

void MovingAverageMinMaxObserver::observe(const Tensor& x) {
  const auto [lo, hi] = finite_min_max(x.data_ptr<float>(), x.numel());
  if (!min_val_.defined() || std::isinf(min_val_.data_ptr<float>()[0])) {
    min_val_ = scalar(lo), max_val_ = scalar(hi);
    return;
  }
  const float c = static_cast<float>(options_.averaging_constant);
  const float mn = min_val_.data_ptr<float>()[0], mx = max_val_.data_ptr<float>()[0];
  min_val_ = scalar(mn + c * (lo - mn));
  max_val_ = scalar(mx + c * (hi - mx));
}

PerChannelMinMaxObserver::PerChannelMinMaxObserver(ObserverOptions options) : Observer(options) {
  KILN_CHECK(per_channel(options.qscheme), "PerChannelMinMaxObserver",
             "expected a per-channel qscheme");
}

void PerChannelMinMaxObserver::observe(const Tensor& x) {
  const int64_t r = x.dim(), axis = options_.ch_axis;
  KILN_CHECK(axis >= -r && axis < r, "PerChannelMinMaxObserver", "expected ch_axis in [", -r, ", ",
             r, ") for an input of ", r, " dims, got ", axis);
  const int64_t a = axis < 0 ? axis + r : axis;
  const int64_t C = x.size(a);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < a; ++d) outer *= x.size(d);
  for (int64_t d = a + 1; d < r; ++d) inner *= x.size(d);
  if (min_val_.defined())
    KILN_CHECK(min_val_.numel() == C, "PerChannelMinMaxObserver", "expected ", min_val_.numel(),
               " channels along axis ", a, " (as the batches before), got ", C);
  Tensor mn(kiln::empty(Dims{C}, DType::Float32)), mx(kiln::empty(Dims{C}, DType::Float32));
  const float* p = x.data_ptr<float>();
  for (int64_t c = 0; c < C; ++c) {
    float lo =
        min_val_.defined() ? min_val_.data_ptr<float>()[c] : std::numeric_limits<float>::infinity();
    float hi = max_val_.defined() ? max_val_.data_ptr<float>()[c] : -lo;
    if (!min_val_.defined()) hi = -std::numeric_limits<float>::infinity();
    for (int64_t o = 0; o < outer; ++o) {
      const auto [l, h] = finite_min_max(p + (o * C + c) * inner, inner);
      lo = std::min(lo, l), hi = std::max(hi, h);
    }
    mn.data_ptr<float>()[c] = lo, mx.data_ptr<float>()[c] = hi;
  }
  min_val_ = mn, max_val_ = mx;
}

PercentileObserver::PercentileObserver(ObserverOptions options) : Observer(options) {
  KILN_CHECK(!per_channel(options.qscheme), "PercentileObserver", "expected a per-tensor qscheme");
  KILN_CHECK(options.percentile > 50 && options.percentile <= 100, "PercentileObserver",
             "expected percentile in (50, 100], got ", options.percentile);
  KILN_CHECK(options.bins >= 16 && options.bins <= (int64_t(1) << 24), "PercentileObserver",
             "expected 16 to 2^24 bins, got ", options.bins);
}

void PercentileObserver::observe(const Tensor& x) {
  const float* p = x.data_ptr<float>();
  const auto [lo, hi] = finite_min_max(p, x.numel());
  if (!(lo <= hi)) return;  // nothing finite
  const int64_t B = options_.bins;
  if (histogram_.empty()) {
    histogram_.assign(B, 0.0);
    lo_ = lo, hi_ = hi > lo ? hi : lo + 1e-12;
  } else if (lo < lo_ || hi > hi_) {
    // Widen the range and move each old bin's count to the new bin holding its centre.
    const double nlo = std::min<double>(lo_, lo), nhi = std::max<double>(hi_, hi);
    std::vector<double> wider(B, 0.0);
    const double ow = (hi_ - lo_) / B, nw = (nhi - nlo) / B;
    for (int64_t b = 0; b < B; ++b) {
      const double centre = lo_ + (b + 0.5) * ow;
      wider[std::clamp<int64_t>(int64_t((centre - nlo) / nw), 0, B - 1)] += histogram_[b];
    }
    histogram_.swap(wider);
    lo_ = nlo, hi_ = nhi;
  }
  const double w = (hi_ - lo_) / B;
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (std::isnan(p[i])) continue;
    histogram_[std::clamp<int64_t>(int64_t((p[i] - lo_) / w), 0, B - 1)] += 1.0;
  }
  min_val_ = scalar(static_cast<float>(lo_)), max_val_ = scalar(static_cast<float>(hi_));
}

QParams PercentileObserver::calculate_qparams() const {
  if (histogram_.empty()) return Observer::calculate_qparams();
  double total = 0;
  for (double h : histogram_) total += h;
  // The values below the lower tail's share and above the upper one's are cut; each threshold is
  // interpolated linearly within its bin.
  const double tail = total * (1.0 - options_.percentile / 100.0) / 2.0;
  const int64_t B = options_.bins;
  const double w = (hi_ - lo_) / B;
  auto threshold = [&](bool from_low) {
    double seen = 0;
    for (int64_t k = 0; k < B; ++k) {
      const int64_t b = from_low ? k : B - 1 - k;
      if (seen + histogram_[b] > tail) {
        const double frac = histogram_[b] > 0 ? (tail - seen) / histogram_[b] : 0.0;
        return from_low ? lo_ + (b + frac) * w : lo_ + (b + 1 - frac) * w;
      }
      seen += histogram_[b];
    }
    return from_low ? hi_ : lo_;
  };
  const float mn = static_cast<float>(threshold(true)), mx = static_cast<float>(threshold(false));
  return quant::calculate_qparams(scalar(mn), scalar(std::max(mn, mx)), options_);
}

FakeQuantize::FakeQuantize(std::shared_ptr<Observer> observer) : observer_(std::move(observer)) {
  KILN_CHECK(observer_ != nullptr, "FakeQuantize", "expected an observer, got null");
  qparams_ = observer_->calculate_qparams();
}

Tensor FakeQuantize::operator()(const Tensor& x) {
  if (observe_) {
    (*observer_)(x);
    qparams_ = observer_->calculate_qparams();
  }
  if (!fake_quant_) return x;
  const QParams& q = qparams_;
  return fake_quantize(x, q.scale, q.zero_point, q.quant_min, q.quant_max, q.axis);
}

}  // namespace kiln::quant
