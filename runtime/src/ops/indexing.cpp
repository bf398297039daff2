// Registry entries of the indexing, scattering and sorting ops, and of the random ops with an
// explicit generator state. The functional forms of the in-place kernels (index_add, scatter*,
// masked_fill) copy their input into the output first, then update it; their output may be
// their input's own buffer (update_ok: the copy is then nothing), never another input's, so the
// indices they check stay what they checked.

#include "kiln/runtime/kernels/indexing.h"
#include "common.h"
#include "kiln/runtime/kernels/copy.h"
#include "kiln/runtime/kernels/random.h"

namespace kiln::rt::ops {
namespace {

std::unique_ptr<KernelParams> decode_dim(const AttrMap& a) {
  auto p = std::make_unique<IntParams>();
  p->v[0] = a.i("dim");
  return p;
}
std::unique_ptr<KernelParams> decode_dim_value(const AttrMap& a) {
  auto p = std::make_unique<FloatParams>();
  p->k = a.i("dim");
  p->v[0] = a.f("value");
  return p;
}
std::unique_ptr<KernelParams> decode_dim_alpha(const AttrMap& a) {
  auto p = std::make_unique<FloatParams>();
  p->k = a.i("dim");
  p->v[0] = a.f("alpha");
  return p;
}
std::unique_ptr<KernelParams> decode_value(const AttrMap& a) {
  auto p = std::make_unique<FloatParams>();
  p->v[0] = a.f("value");
  return p;
}
std::unique_ptr<KernelParams> decode_topk(const AttrMap& a) {
  auto p = std::make_unique<IntParams>();
  p->v[0] = a.i("k");
  p->v[1] = a.i("dim");
  p->v[2] = a.b("largest");
  p->flag = a.b("sorted");
  return p;
}
std::unique_ptr<KernelParams> decode_sort(const AttrMap& a) {
  auto p = std::make_unique<IntParams>();
  p->v[0] = a.i("dim");
  p->flag = a.b("descending");
  return p;
}

// out = input, then the in-place update on out.
TensorImpl& init_from_input(const KernelCall& c) {
  kernels::copy_(out(c), in(c, 0));
  return out(c);
}

void run_index_select(const KernelCall& c) {
  kernels::index_select_out(in(c, 0), params<IntParams>(c).v[0], in(c, 1), out(c));
}
void run_index_add(const KernelCall& c) {
  const auto& p = params<FloatParams>(c);
  kernels::index_add_(init_from_input(c), p.k, in(c, 1), in(c, 2), p.v[0]);
}
void run_index_copy(const KernelCall& c) {
  kernels::index_copy_(init_from_input(c), params<IntParams>(c).v[0], in(c, 1), in(c, 2));
}
void run_gather(const KernelCall& c) {
  kernels::gather_out(in(c, 0), params<IntParams>(c).v[0], in(c, 1), out(c));
}
void run_scatter(const KernelCall& c) {
  kernels::scatter_(init_from_input(c), params<IntParams>(c).v[0], in(c, 1), in(c, 2));
}
void run_scatter_value(const KernelCall& c) {
  const auto& p = params<FloatParams>(c);
  kernels::scatter_(init_from_input(c), p.k, in(c, 1), p.v[0]);
}
void run_scatter_add(const KernelCall& c) {
  kernels::scatter_add_(init_from_input(c), params<IntParams>(c).v[0], in(c, 1), in(c, 2));
}
void run_masked_fill(const KernelCall& c) {
  kernels::masked_fill_(init_from_input(c), in(c, 1), params<FloatParams>(c).v[0]);
}
void run_one_hot(const KernelCall& c) {
  kernels::one_hot_out(in(c, 0), out(c));  // the class count is the output's last dim
}
void run_topk(const KernelCall& c) {
  const auto& p = params<IntParams>(c);
  kernels::topk_out(in(c, 0), p.v[0], p.v[1], p.v[2] != 0, p.flag, out(c, 0), out(c, 1));
}
void run_sort(const KernelCall& c) {
  const auto& p = params<IntParams>(c);
  kernels::sort_out(in(c, 0), p.v[0], p.flag, out(c, 0), out(c, 1));
}
void run_argsort(const KernelCall& c) {
  const auto& p = params<IntParams>(c);
  kernels::argsort_out(in(c, 0), p.v[0], p.flag, out(c));
}

// Random ops: input 0 is the Philox state [2] i64 (seed, offset); outputs are the values and the
// state after the draw, so a plan that feeds the next state back draws a fresh stream each run.
std::unique_ptr<KernelParams> decode_two_floats(const AttrMap& a, std::string_view x,
                                                std::string_view y) {
  auto p = std::make_unique<FloatParams>();
  p->v[0] = a.f(x);
  p->v[1] = a.f(y);
  return p;
}
template <typename Fill>
void draw(const KernelCall& c, Fill&& fill) {
  const TensorImpl& s = in(c, 0);
  KILN_CHECK(s.dtype() == DType::Int64 && s.numel() == 2, "random",
             "expected a [2] i64 generator state, got ", describe(s));
  KILN_CHECK(out(c, 1).dtype() == DType::Int64 && out(c, 1).numel() == 2, "random",
             "expected a [2] i64 next-state output, got ", describe(out(c, 1)));
  int64_t state[2];
  kernels::copy_(*from_blob(state, Dims{2}, DType::Int64), s);  // whatever its strides
  Generator gen(static_cast<uint64_t>(state[0]), static_cast<uint64_t>(state[1]));
  fill(out(c, 0), gen);
  state[1] = static_cast<int64_t>(gen.offset());
  kernels::copy_(out(c, 1), *from_blob(state, Dims{2}, DType::Int64));
}
void run_uniform(const KernelCall& c) {
  const auto& p = params<FloatParams>(c);
  draw(c, [&](TensorImpl& t, Generator& g) { kernels::uniform_(t, p.v[0], p.v[1], &g); });
}
void run_normal(const KernelCall& c) {
  const auto& p = params<FloatParams>(c);
  draw(c, [&](TensorImpl& t, Generator& g) { kernels::normal_(t, p.v[0], p.v[1], &g); });
}
std::unique_ptr<KernelParams> decode_randint(const AttrMap& a) {
  auto p = std::make_unique<IntParams>();
  p->v[0] = a.i("low");
  p->v[1] = a.i("high");
  return p;
}
void run_randint(const KernelCall& c) {
  const auto& p = params<IntParams>(c);
  draw(c, [&](TensorImpl& t, Generator& g) { kernels::randint_(t, p.v[0], p.v[1], &g); });
}
void run_dropout_mask(const KernelCall& c) {
  const double prob = params<FloatParams>(c).v[0];
  draw(c, [&](TensorImpl& t, Generator& g) { kernels::dropout_mask_out(prob, t, &g); });
}

}  // namespace

void register_indexing(Registry& r) {
  r.add(with_signature({.name = "index_select", .decode = decode_dim, .run = run_index_select}));
  r.add(with_signature(
      {.name = "index_add", .decode = decode_dim_alpha, .run = run_index_add, .update_ok = true}));
  r.add(with_signature({.name = "gather", .decode = decode_dim, .run = run_gather}));
  r.add(with_signature(
      {.name = "scatter", .decode = decode_dim, .run = run_scatter, .update_ok = true}));
  r.add(with_signature(
      {.name = "index_copy", .decode = decode_dim, .run = run_index_copy, .update_ok = true}));
  r.add(with_signature({.name = "scatter_value",
                        .decode = decode_dim_value,
                        .run = run_scatter_value,
                        .update_ok = true}));
  r.add(with_signature(
      {.name = "scatter_add", .decode = decode_dim, .run = run_scatter_add, .update_ok = true}));
  r.add(with_signature(
      {.name = "masked_fill", .decode = decode_value, .run = run_masked_fill, .update_ok = true}));
  r.add(with_signature({.name = "one_hot", .run = run_one_hot}));
  r.add(with_signature({.name = "topk", .decode = decode_topk, .run = run_topk}));
  r.add(with_signature({.name = "sort", .decode = decode_sort, .run = run_sort}));
  r.add(with_signature({.name = "argsort", .decode = decode_sort, .run = run_argsort}));
}

void register_random(Registry& r) {
  r.add(with_signature(
      {.name = "uniform",
       .decode = [](const AttrMap& a) { return decode_two_floats(a, "low", "high"); },
       .run = run_uniform}));
  r.add(with_signature(
      {.name = "normal",
       .decode = [](const AttrMap& a) { return decode_two_floats(a, "mean", "std"); },
       .run = run_normal}));
  r.add(with_signature({.name = "randint", .decode = decode_randint, .run = run_randint}));
  r.add(with_signature({.name = "dropout_mask",
                        .decode = [](const AttrMap& a) { return decode_two_floats(a, "p", "p"); },
                        .run = run_dropout_mask}));
}

}  // namespace kiln::rt::ops
