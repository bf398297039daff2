// Registry entries of the reductions (kernels/reduce.h).

#include <climits>

#include "common.h"
#include "kiln/runtime/kernels/reduce.h"

namespace kiln::rt::ops {
namespace {

std::unique_ptr<KernelParams> decode_dims(const AttrMap& a) {
  auto p = std::make_unique<DimsParams>();
  auto d = a.ints("dims");
  KILN_CHECK(d.size() <= 6, a.op(), "expected at most 6 dims, got ", d.size());
  p->dims = Dims(std::vector<int64_t>(d.begin(), d.end()));
  p->keepdim = a.b("keepdim");
  if (a.op() == "var") p->f = a.b("unbiased") ? 1.0 : 0.0;
  if (a.op() == "norm") p->f = a.f("p");
  return p;
}

#define KILN_REDUCE(name)                                     \
  void run_##name(const KernelCall& c) {                      \
    const auto& p = params<DimsParams>(c);                    \
    kernels::name##_out(in(c, 0), p.dims, p.keepdim, out(c)); \
  }
KILN_REDUCE(sum)
KILN_REDUCE(mean)
KILN_REDUCE(prod)
KILN_REDUCE(amax)
KILN_REDUCE(amin)
KILN_REDUCE(logsumexp)
#undef KILN_REDUCE

void run_var(const KernelCall& c) {
  const auto& p = params<DimsParams>(c);
  kernels::var_out(in(c, 0), p.dims, p.f, p.keepdim, out(c));
}
void run_norm(const KernelCall& c) {
  const auto& p = params<DimsParams>(c);
  kernels::norm_out(in(c, 0), p.f, p.dims, p.keepdim, out(c));
}

std::unique_ptr<KernelParams> decode_dim(const AttrMap& a) {
  auto p = std::make_unique<IntParams>();
  p->v[0] = a.i("dim");
  if (a.declares("keepdim")) p->flag = a.b("keepdim");  // cumsum shares this decoder
  return p;
}
void run_max(const KernelCall& c) {
  const auto& p = params<IntParams>(c);
  kernels::max_out(in(c, 0), p.v[0], p.flag, out(c, 0), out(c, 1));
}
void run_min(const KernelCall& c) {
  const auto& p = params<IntParams>(c);
  kernels::min_out(in(c, 0), p.v[0], p.flag, out(c, 0), out(c, 1));
}
// dim == INT64_MIN: over the flattened input.
void run_argmax(const KernelCall& c) {
  const auto& p = params<IntParams>(c);
  kernels::argmax_out(in(c, 0), p.v[0] == INT64_MIN ? std::nullopt : std::optional(p.v[0]), p.flag,
                      out(c));
}
void run_argmin(const KernelCall& c) {
  const auto& p = params<IntParams>(c);
  kernels::argmin_out(in(c, 0), p.v[0] == INT64_MIN ? std::nullopt : std::optional(p.v[0]), p.flag,
                      out(c));
}
void run_cumsum(const KernelCall& c) {
  kernels::cumsum_out(in(c, 0), params<IntParams>(c).v[0], out(c));
}

}  // namespace

void register_reduce(Registry& r) {
  r.add(with_signature({.name = "sum", .decode = decode_dims, .run = run_sum}));
  r.add(with_signature({.name = "mean", .decode = decode_dims, .run = run_mean}));
  r.add(with_signature({.name = "prod", .decode = decode_dims, .run = run_prod}));
  r.add(with_signature({.name = "amax", .decode = decode_dims, .run = run_amax}));
  r.add(with_signature({.name = "amin", .decode = decode_dims, .run = run_amin}));
  r.add(with_signature({.name = "logsumexp", .decode = decode_dims, .run = run_logsumexp}));
  r.add(with_signature({.name = "var", .decode = decode_dims, .run = run_var}));
  r.add(with_signature({.name = "norm", .decode = decode_dims, .run = run_norm}));
  r.add(with_signature({.name = "max", .decode = decode_dim, .run = run_max}));
  r.add(with_signature({.name = "min", .decode = decode_dim, .run = run_min}));
  r.add(with_signature({.name = "argmax", .decode = decode_dim, .run = run_argmax}));
  r.add(with_signature({.name = "argmin", .decode = decode_dim, .run = run_argmin}));
  r.add(with_signature({.name = "cumsum", .decode = decode_dim, .run = run_cumsum}));
}

}  // namespace kiln::rt::ops
