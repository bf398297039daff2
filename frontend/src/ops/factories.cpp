// Tensor factories and copies.

#include <cmath>
#include <cstring>

#include "kiln/autograd.h"
#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "kiln/runtime/cuda/cuda.h"
#include "kiln/runtime/cuda/eager.h"
#include "kiln/runtime/kernels/copy.h"
#include "kiln/runtime/views.h"

namespace kiln {

namespace {
Tensor finish(Tensor t, const TensorOptions& o) {
  if (o.requires_grad_) t.requires_grad_(true);
  return t;
}
// Writes `value` (converted to t's dtype) everywhere in t.
void fill_raw(const Tensor& t, double value) {
  double v = value;
  auto src = kiln::from_blob(&v, Dims{}, DType::Float64);
  kernels::copy_(*t.impl(), *src);
}
}  // namespace

Tensor empty(std::span<const int64_t> sizes, TensorOptions o) {
  return finish(Tensor(kiln::empty(sizes, o.dtype_)), o);
}

Tensor zeros(std::span<const int64_t> sizes, TensorOptions o) {
  return finish(Tensor(kiln::zeros(sizes, o.dtype_)), o);
}

Tensor full(std::span<const int64_t> sizes, double value, TensorOptions o) {
  Tensor t(kiln::empty(sizes, o.dtype_));
  fill_raw(t, value);
  return finish(std::move(t), o);
}

Tensor ones(std::span<const int64_t> sizes, TensorOptions o) {
  return full(sizes, 1.0, o);
}

namespace {
// A tensor like `t` (its sizes, the dtype given or t's) on t's device. On CUDA, float32 and
// integral int64 fills run on the device (a host copy would wait for the stream); other dtypes
// are made on the CPU and copied.
Tensor full_on_device_of(const Tensor& t, double value, DType dtype) {
  if (t.device() == Device::CPU) return full(t.sizes(), value, TensorOptions(dtype));
  if (dtype == DType::Int64 && value == static_cast<double>(static_cast<int64_t>(value))) {
    Tensor out(kiln::empty(t.sizes(), dtype, t.device()));
    cuda::fill_int64(*out.impl(), static_cast<int64_t>(value));
    return out;
  }
  if (dtype != DType::Float32) return full(t.sizes(), value, TensorOptions(dtype)).to(t.device());
  Tensor out(kiln::empty(t.sizes(), dtype, t.device()));
  const float f = static_cast<float>(value);
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  cuda::fill32(reinterpret_cast<uintptr_t>(out.impl()->raw_data()), bits, out.impl()->nbytes(),
               cuda::current_stream());
  return out;
}
}  // namespace

Tensor zeros_like(const Tensor& t, std::optional<DType> d) {
  return full_on_device_of(t, 0.0, d.value_or(t.dtype()));
}
Tensor ones_like(const Tensor& t, std::optional<DType> d) {
  return full_on_device_of(t, 1.0, d.value_or(t.dtype()));
}
Tensor empty_like(const Tensor& t, std::optional<DType> d) {
  return Tensor(kiln::empty(t.sizes(), d.value_or(t.dtype()), t.device()));
}
Tensor full_like(const Tensor& t, double value, std::optional<DType> d) {
  return full_on_device_of(t, value, d.value_or(t.dtype()));
}

Tensor arange(double end, TensorOptions o) {
  return arange(0, end, 1, o);
}

Tensor arange(double start, double end, double step, TensorOptions o) {
  KILN_CHECK(step != 0 && std::isfinite(step), "arange", "expected a finite non-zero step, got ",
             step);
  KILN_CHECK(std::isfinite(start) && std::isfinite(end), "arange", "expected finite bounds, got ",
             start, " and ", end);
  const double span = (end - start) / step;
  // Checked before the conversion: a double beyond int64's range converts to undefined behaviour.
  KILN_CHECK(span < 0x1p62, "arange", "expected fewer than 2^62 elements, got (", end, " - ", start,
             ") / ", step, " = ", span);
  const int64_t n = span > 0 ? static_cast<int64_t>(std::ceil(span)) : 0;
  std::vector<double> values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = start + static_cast<double>(i) * step;
  Tensor t(kiln::empty(Dims{n}, o.dtype_));
  if (n > 0) {
    auto src = kiln::from_blob(values.data(), Dims{n}, DType::Float64);
    kernels::copy_(*t.impl(), *src);
  }
  return finish(std::move(t), o);
}

Tensor linspace(double start, double end, int64_t steps, TensorOptions o) {
  KILN_CHECK(steps >= 0, "linspace", "number of steps must be non-negative, got ", steps);
  std::vector<double> values(steps);
  const double step = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0.0;
  // Symmetric evaluation from both ends, as PyTorch does, so the last value is exactly `end`.
  for (int64_t i = 0; i < steps; ++i) {
    values[i] = i < steps / 2 ? start + step * static_cast<double>(i)
                              : end - step * static_cast<double>(steps - 1 - i);
  }
  Tensor t(kiln::empty(Dims{steps}, o.dtype_));
  if (steps > 0)
    kernels::copy_(*t.impl(), *kiln::from_blob(values.data(), Dims{steps}, DType::Float64));
  return finish(std::move(t), o);
}

Tensor eye(int64_t n, std::optional<int64_t> m_opt, TensorOptions o) {
  const int64_t m = m_opt.value_or(n);
  KILN_CHECK(n >= 0 && m >= 0, "eye", "sizes must be non-negative, got ", n, " and ", m);
  Tensor t(kiln::zeros(Dims{n, m}, o.dtype_));
  const int64_t k = std::min(n, m);
  if (k > 0) {
    auto diag = views::as_strided(*t.impl(), Dims{k}, Dims{m + 1}, 0);
    double one = 1.0;
    kernels::copy_(*diag, *kiln::from_blob(&one, Dims{}, DType::Float64));
  }
  return finish(std::move(t), o);
}

Tensor scalar_tensor(double value, TensorOptions o) {
  return full(Dims{}, value, o);
}

Tensor tensor(std::initializer_list<double> values, TensorOptions o) {
  std::vector<double> v(values);
  const int64_t n = static_cast<int64_t>(v.size());
  Tensor t(kiln::empty(Dims{n}, o.dtype_));
  if (n) kernels::copy_(*t.impl(), *kiln::from_blob(v.data(), Dims{n}, DType::Float64));
  return finish(std::move(t), o);
}

Tensor tensor(std::initializer_list<std::initializer_list<double>> rows, TensorOptions o) {
  const int64_t r = static_cast<int64_t>(rows.size());
  const int64_t c = r ? static_cast<int64_t>(rows.begin()->size()) : 0;
  std::vector<double> v;
  v.reserve(r * c);
  for (const auto& row : rows) {
    KILN_CHECK(static_cast<int64_t>(row.size()) == c, "tensor", "expected rows of equal length ", c,
               ", got a row of ", row.size());
    v.insert(v.end(), row.begin(), row.end());
  }
  Tensor t(kiln::empty(Dims{r, c}, o.dtype_));
  if (r * c != 0) kernels::copy_(*t.impl(), *kiln::from_blob(v.data(), Dims{r, c}, DType::Float64));
  return finish(std::move(t), o);
}

Tensor tensor(const std::vector<float>& values, std::span<const int64_t> sizes, TensorOptions o) {
  const int64_t n = checked_numel(sizes, "tensor");
  KILN_CHECK(n == static_cast<int64_t>(values.size()), "tensor", "shape ", Dims(sizes), " needs ",
             n, " values, got ", values.size());
  Tensor t(kiln::empty(sizes, o.dtype_));
  if (n) {
    kernels::copy_(*t.impl(),
                   *kiln::from_blob(const_cast<float*>(values.data()), sizes, DType::Float32));
  }
  return finish(std::move(t), o);
}

Tensor from_blob(void* data, std::span<const int64_t> sizes, TensorOptions o) {
  return finish(Tensor(kiln::from_blob(data, sizes, o.dtype_)), o);
}

Tensor from_blob(void* data, std::span<const int64_t> sizes, std::span<const int64_t> strides,
                 TensorOptions o) {
  return finish(Tensor(kiln::from_blob(data, sizes, o.dtype_, strides)), o);
}

// --- in-place writes ----------------------------------------------------------------------------

namespace detail {
// Checks shared by every in-place op on `t` (the tensor being written).
void check_inplace(const Tensor& t, const char* op) {
  if (!autograd::grad_enabled()) return;
  auto* m = t.autograd_meta();
  if (!m) return;
  KILN_CHECK(!(m->requires_grad && !m->grad_fn), op,
             "a leaf tensor that requires grad is being used in an in-place operation; wrap the "
             "update in NoGradGuard (as optimizers do)");
  KILN_CHECK(!m->is_view, op,
             "in-place write to a view of a tensor that requires grad is not supported; "
             "write to a clone() instead");
}
}  // namespace detail

Tensor& fill_(Tensor& t, double value) {
  detail::check_inplace(t, "fill_");
  fill_raw(t, value);
  autograd::bump_version(t);
  if (autograd::grad_enabled() && t.requires_grad()) {
    // The old value no longer matters: no gradient flows past the fill.
    auto node = std::make_shared<autograd::FunctionNode>(
        "FillBackward", [](const TensorList&, const TensorList&) { return TensorList{Tensor()}; });
    autograd::set_history(node, {}, {t});
  }
  KILN_TRACE("fill_", {t}, {t}, {"value", value});
  return t;
}

Tensor& zero_(Tensor& t) {
  return fill_(t, 0.0);
}

Tensor& copy_(Tensor& dst, const Tensor& src) {
  detail::check_inplace(dst, "copy_");
  kernels::copy_(*dst.impl(), *src.impl());
  autograd::bump_version(dst);
  if (autograd::any_requires_grad({&dst, &src})) {
    Dims src_sizes = src.sizes();
    DType src_dtype = src.dtype();
    auto node = std::make_shared<autograd::FunctionNode>(
        "CopyBackward", [src_sizes, src_dtype](const TensorList&, const TensorList& g) {
          return TensorList{sum_to(g[0], src_sizes).to(src_dtype)};
        });
    autograd::set_history(node, {src}, {dst});
  }
  KILN_TRACE("copy_", TensorList({dst, src}), {dst});
  return dst;
}

}  // namespace kiln
