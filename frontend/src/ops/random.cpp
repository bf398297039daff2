// Random factories and dropout on the runtime's counter-based Philox generator.

#include "kiln/runtime/kernels/random.h"

#include "kiln/autograd.h"
#include "kiln/dispatch.h"
#include "kiln/nn_ops.h"
#include "kiln/ops.h"
#include "kiln/runtime/kernels/embedding.h"

namespace kiln {

namespace detail {
void check_inplace(const Tensor& t, const char* op);
}

namespace {
// Under tracing, a random op becomes an IR op that draws from an explicit (seed, offset) state
// operand instead of a baked-in tensor: the tracer needs the stream position before the draw.
// The op records the size it draws (its result type is inferred from it).
struct RandomTrace {
  uint64_t seed = default_generator().seed(), offset = default_generator().offset();
  void operator()(const char* op, const Tensor& out, dispatch::Attrs attrs) const {
    if (!dispatch::tracer()) return;
    attrs.emplace_back("size", Dims(out.sizes()));
    attrs.emplace_back("seed", static_cast<int64_t>(seed));
    attrs.emplace_back("offset", static_cast<int64_t>(offset));
    dispatch::trace(op, {}, {out}, attrs);
  }
};

Tensor finish(Tensor t, const TensorOptions& o) {
  if (o.requires_grad_) t.requires_grad_(true);
  return t;
}
}  // namespace

Tensor rand(std::span<const int64_t> sizes, TensorOptions o) {
  KILN_CHECK(is_floating(o.dtype_), "rand", "expected a floating dtype, got ", o.dtype_);
  Tensor t(kiln::empty(sizes, o.dtype_));
  RandomTrace trace;
  kernels::uniform_(*t.impl(), 0.0, 1.0);
  trace("uniform", t, {{"low", 0.0}, {"high", 1.0}, {"dtype", static_cast<int64_t>(o.dtype_)}});
  return finish(std::move(t), o);
}

Tensor randn(std::span<const int64_t> sizes, TensorOptions o) {
  KILN_CHECK(is_floating(o.dtype_), "randn", "expected a floating dtype, got ", o.dtype_);
  Tensor t(kiln::empty(sizes, o.dtype_));
  RandomTrace trace;
  kernels::normal_(*t.impl(), 0.0, 1.0);
  trace("normal", t, {{"mean", 0.0}, {"std", 1.0}, {"dtype", static_cast<int64_t>(o.dtype_)}});
  return finish(std::move(t), o);
}

Tensor randint(int64_t low, int64_t high, std::span<const int64_t> sizes, TensorOptions o) {
  KILN_CHECK(low < high, "randint", "expected low < high, got [", low, ", ", high, ")");
  Tensor t(kiln::empty(sizes, o.dtype_));
  RandomTrace trace;
  kernels::randint_(*t.impl(), low, high);
  trace("randint", t, {{"low", low}, {"high", high}, {"dtype", static_cast<int64_t>(o.dtype_)}});
  return t;
}

Tensor randperm(int64_t n, TensorOptions o) {
  KILN_CHECK(n >= 0, "randperm", "expected n >= 0, got ", n);
  Tensor t(kiln::empty(Dims{n}, o.dtype_));
  RandomTrace trace;
  kernels::randperm_out(n, *t.impl());
  trace("randperm", t, {});  // no IR counterpart yet: tracing refuses it rather than freezing it
  return t;
}

Tensor& uniform_(Tensor& t, double low, double high) {
  detail::check_inplace(t, "uniform_");
  RandomTrace trace;
  kernels::uniform_(*t.impl(), low, high);
  trace("uniform_", t, {{"low", low}, {"high", high}});
  autograd::bump_version(t);
  return t;
}

Tensor& normal_(Tensor& t, double mean, double std) {
  detail::check_inplace(t, "normal_");
  RandomTrace trace;
  kernels::normal_(*t.impl(), mean, std);
  trace("normal_", t, {{"mean", mean}, {"std", std}});
  autograd::bump_version(t);
  return t;
}

Tensor dropout(const Tensor& input, double p, bool training) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, "dropout", "probability must be in [0, 1], got ", p);
  if (!training || p == 0.0) return input;
  // The mask is an explicit operand (seeded, reproducible); in a trace it is an input of the op.
  Tensor mask(kiln::empty(input.sizes(), DType::Bool, input.device()));
  RandomTrace trace;
  kernels::dropout_mask_out(p, *mask.impl());
  trace("dropout_mask", mask, {{"p", p}});
  Tensor out(kiln::empty(input.sizes(), input.dtype(), input.device()));
  kernels::dropout_out(*input.impl(), *mask.impl(), p, *out.impl());
  autograd::record(
      "DropoutBackward", {input}, {out}, {mask}, {}, [p](const TensorList& s, const TensorList& g) {
        // grad * mask / (1 - p), in tensor ops (differentiable again, traceable)
        return TensorList{p >= 1.0 ? zeros_like(g[0]) : g[0] * s[0].to(g[0].dtype()) / (1.0 - p)};
      });
  KILN_TRACE("dropout", TensorList({input, mask}), {out}, {"p", p});
  return out;
}

}  // namespace kiln
