#pragma once
// Free-function ops (PyTorch names). Every op: checks its arguments (kiln::Error naming the op),
// runs the runtime kernel, records autograd history when an input requires grad, and notifies the
// tracer when one is active.

#include <optional>

#include "kiln/tensor.h"

namespace kiln {

// --- factories
Tensor empty(std::span<const int64_t> sizes, TensorOptions options = {});
Tensor zeros(std::span<const int64_t> sizes, TensorOptions options = {});
Tensor ones(std::span<const int64_t> sizes, TensorOptions options = {});
Tensor full(std::span<const int64_t> sizes, double value, TensorOptions options = {});
inline Tensor empty(std::initializer_list<int64_t> s, TensorOptions o = {}) {
  return empty(Dims(s), o);
}
inline Tensor zeros(std::initializer_list<int64_t> s, TensorOptions o = {}) {
  return zeros(Dims(s), o);
}
inline Tensor ones(std::initializer_list<int64_t> s, TensorOptions o = {}) {
  return ones(Dims(s), o);
}
inline Tensor full(std::initializer_list<int64_t> s, double v, TensorOptions o = {}) {
  return full(Dims(s), v, o);
}
Tensor zeros_like(const Tensor& t, std::optional<DType> dtype = std::nullopt);
Tensor ones_like(const Tensor& t, std::optional<DType> dtype = std::nullopt);
Tensor empty_like(const Tensor& t, std::optional<DType> dtype = std::nullopt);
Tensor full_like(const Tensor& t, double value, std::optional<DType> dtype = std::nullopt);
// [start, end) with step; int64 unless any argument is fractional or a dtype is given.
Tensor arange(double end, TensorOptions options = DType::Int64);
Tensor arange(double start, double end, double step = 1, TensorOptions options = DType::Int64);
Tensor linspace(double start, double end, int64_t steps, TensorOptions options = {});
Tensor eye(int64_t n, std::optional<int64_t> m = std::nullopt, TensorOptions options = {});
// A 0-dim tensor.
Tensor scalar_tensor(double value, TensorOptions options = {});
// Nested initializer lists: tensor({1, 2, 3}), tensor({{1, 2}, {3, 4}}).
Tensor tensor(std::initializer_list<double> values, TensorOptions options = {});
Tensor tensor(std::initializer_list<std::initializer_list<double>> values,
              TensorOptions options = {});
Tensor tensor(const std::vector<float>& values, std::span<const int64_t> sizes,
              TensorOptions options = {});
// Borrows `data` (the caller keeps it alive). Strides default to row-major.
Tensor from_blob(void* data, std::span<const int64_t> sizes, TensorOptions options = {});
Tensor from_blob(void* data, std::span<const int64_t> sizes, std::span<const int64_t> strides,
                 TensorOptions options);

// --- copies
Tensor& copy_(Tensor& dst, const Tensor& src);

}  // namespace kiln

namespace kiln {
// Sums `t` over broadcast dims so that it has `sizes` (the backward of broadcasting).
Tensor sum_to(const Tensor& t, std::span<const int64_t> sizes);
// In-place fill (bumps the version; refused on leaves that require grad unless under NoGradGuard).
Tensor& fill_(Tensor& t, double value);
Tensor& zero_(Tensor& t);
}  // namespace kiln

// --- elementwise (broadcasting, type promotion) --------------------------------------------
namespace kiln {
Tensor add(const Tensor& a, const Tensor& b, double alpha = 1.0);
Tensor sub(const Tensor& a, const Tensor& b, double alpha = 1.0);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);
Tensor rsub(const Tensor& a, double b);  // b - a
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);
Tensor pow(const Tensor& a, double exponent);

// The unary family of the op schema (ir/ops.toml), one function per op named like it:
// neg, abs, exp, log, log1p, sqrt, rsqrt, sin, cos, tanh, sigmoid, relu, silu, erf, floor, ceil,
// round (half to even), sign, reciprocal, ... `Tensor name(const Tensor& x)`, differentiable.
#define KILN_UNARY_OP(name, value, keeps_integers) Tensor name(const Tensor& x);
#include "kiln/runtime/unary_ops.inc"
#undef KILN_UNARY_OP
Tensor gelu(const Tensor& x, bool tanh_approximation = false);
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_not(const Tensor& a);

// In place (bump the version; refused on leaves requiring grad outside NoGradGuard).
Tensor& add_(Tensor& self, const Tensor& other, double alpha = 1.0);
Tensor& sub_(Tensor& self, const Tensor& other, double alpha = 1.0);
Tensor& mul_(Tensor& self, const Tensor& other);
Tensor& div_(Tensor& self, const Tensor& other);
Tensor& add_(Tensor& self, double other);
Tensor& mul_(Tensor& self, double other);
Tensor& relu_(Tensor& self);

Tensor operator-(const Tensor& x);
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, double b);
Tensor operator<(const Tensor& a, double b);
Tensor& operator+=(Tensor& a, const Tensor& b);
Tensor& operator-=(Tensor& a, const Tensor& b);
Tensor& operator*=(Tensor& a, const Tensor& b);
Tensor& operator+=(Tensor& a, double b);
Tensor& operator*=(Tensor& a, double b);

// --- reductions ---------------------------------------------------------------------------
// `dims` empty = all dims.
Tensor sum(const Tensor& x, std::span<const int64_t> dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, std::span<const int64_t> dims = {}, bool keepdim = false);
Tensor prod(const Tensor& x, std::span<const int64_t> dims = {}, bool keepdim = false);
inline Tensor sum(const Tensor& x, std::initializer_list<int64_t> dims, bool keepdim = false) {
  return sum(x, Dims(dims), keepdim);
}
inline Tensor mean(const Tensor& x, std::initializer_list<int64_t> dims, bool keepdim = false) {
  return mean(x, Dims(dims), keepdim);
}
Tensor amax(const Tensor& x, std::span<const int64_t> dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, std::span<const int64_t> dims = {}, bool keepdim = false);
Tensor max(const Tensor& x);  // over all elements
Tensor min(const Tensor& x);
std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor argmin(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor var(const Tensor& x, std::span<const int64_t> dims = {}, bool unbiased = true,
           bool keepdim = false);
Tensor std(const Tensor& x, std::span<const int64_t> dims = {}, bool unbiased = true,
           bool keepdim = false);
Tensor norm(const Tensor& x, double p = 2.0, std::span<const int64_t> dims = {},
            bool keepdim = false);
Tensor logsumexp(const Tensor& x, std::span<const int64_t> dims, bool keepdim = false);
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
Tensor cumsum(const Tensor& x, int64_t dim);

// --- linear algebra ---------------------------------------------------------------------------
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor mm(const Tensor& a, const Tensor& b);
Tensor bmm(const Tensor& a, const Tensor& b);
Tensor mv(const Tensor& a, const Tensor& v);
Tensor dot(const Tensor& a, const Tensor& b);
// beta * bias + alpha * (a @ b)
Tensor addmm(const Tensor& bias, const Tensor& a, const Tensor& b, double beta = 1.0,
             double alpha = 1.0);
// x @ weightᵀ + bias (bias may be undefined)
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});
}  // namespace kiln

// --- indexing, joining, padding -------------------------------------------------------------
namespace kiln {
enum class PadMode { Constant, Reflect, Replicate };

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, double value);
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
// torch.index_copy: x with its slices at `index` along dim replaced by source's, in order (a
// repeated index keeps the last). Gradients: to x except at the copied slices, to source the
// slices it was copied to.
Tensor index_copy(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source);
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source,
                 double alpha = 1.0);
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);
Tensor& masked_fill_(Tensor& x, const Tensor& mask, double value);
Tensor masked_select(const Tensor& x, const Tensor& mask);  // no gradient
Tensor cat(const TensorList& tensors, int64_t dim = 0);
Tensor stack(const TensorList& tensors, int64_t dim = 0);
TensorList split(const Tensor& x, int64_t split_size, int64_t dim = 0);
TensorList split_with_sizes(const Tensor& x, std::span<const int64_t> sizes, int64_t dim = 0);
TensorList chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
// pad = (left, right) pairs from the last dim backwards, as torch.nn.functional.pad.
Tensor pad(const Tensor& x, std::span<const int64_t> pad, PadMode mode = PadMode::Constant,
           double value = 0.0);
inline Tensor pad(const Tensor& x, std::initializer_list<int64_t> p,
                  PadMode mode = PadMode::Constant, double value = 0.0) {
  return pad(x, Dims(p), mode, value);
}
Tensor one_hot(const Tensor& index, int64_t num_classes = -1);
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true,
                               bool sorted = true);
std::pair<Tensor, Tensor> sort(const Tensor& x, int64_t dim = -1, bool descending = false);
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false);
}  // namespace kiln

// --- random (seeded, counter-based: results do not depend on the thread count) ---------------
namespace kiln {
// Seeds the global generator (kiln::manual_seed from the runtime) — re-exported here.
Tensor rand(std::span<const int64_t> sizes, TensorOptions options = {});   // U[0, 1)
Tensor randn(std::span<const int64_t> sizes, TensorOptions options = {});  // N(0, 1)
Tensor randint(int64_t low, int64_t high, std::span<const int64_t> sizes,
               TensorOptions options = DType::Int64);  // [low, high)
Tensor randperm(int64_t n, TensorOptions options = DType::Int64);
inline Tensor rand(std::initializer_list<int64_t> s, TensorOptions o = {}) {
  return rand(Dims(s), o);
}
inline Tensor randn(std::initializer_list<int64_t> s, TensorOptions o = {}) {
  return randn(Dims(s), o);
}
inline Tensor randint(int64_t low, int64_t high, std::initializer_list<int64_t> s,
                      TensorOptions o = DType::Int64) {
  return randint(low, high, Dims(s), o);
}
Tensor& uniform_(Tensor& t, double low = 0.0, double high = 1.0);
Tensor& normal_(Tensor& t, double mean = 0.0, double std = 1.0);
}  // namespace kiln
