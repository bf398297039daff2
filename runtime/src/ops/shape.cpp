// Registry entries of the shape ops. Artifact values are contiguous, so a view op is either an
// alias (the memory plan put its result on its input's bytes: nothing to do) or a copy of a
// strided view of the input into the output (transpose, permute, slice, select, expand).

#include <cstring>

#include "common.h"
#include "kiln/runtime/checked_math.h"
#include "kiln/runtime/kernels/copy.h"
#include "kiln/runtime/kernels/indexing.h"

namespace kiln::rt::ops {
namespace {

// Copies the strided view (sizes, strides, offset relative to `x`'s first element) of `x` into
// `o`, after checking that every element the view reads lies inside `x` (attributes come from
// the file).
void copy_view(std::string_view op, const TensorImpl& x, const Dims& sizes, const Dims& strides,
               int64_t offset, TensorImpl& o) {
  for (int64_t n : sizes) KILN_CHECK(n >= 0, op, "negative size ", n);
  ViewExtent ext;
  KILN_CHECK(view_extent_ok(sizes, strides, offset, ext), op, "view extent overflows");
  KILN_CHECK(ext.empty || (ext.lo >= 0 && ext.hi < x.numel()), op, "view reads elements [", ext.lo,
             ", ", ext.hi, "] of an input with ", x.numel(), " elements");
  TensorImpl v = view_of(x, sizes, strides, x.storage_offset() + offset);
  kernels::copy_(o, v);
}

void run_reshape(const KernelCall& c) {
  const TensorImpl& x = in(c, 0);
  TensorImpl& o = out(c);
  KILN_CHECK(x.numel() == o.numel() && x.dtype() == o.dtype(), "reshape", "expected ", o.numel(),
             " elements of ", dtype_short_name(o.dtype()), ", got ", x.numel(), " ",
             dtype_short_name(x.dtype()));
  if (x.data() == o.data()) return;  // planned as an alias
  if (x.is_contiguous()) {
    std::memmove(o.data(), x.data(), o.nbytes());
  } else {
    kernels::copy_(o, x);
  }
}

std::unique_ptr<KernelParams> decode_transpose(const AttrMap& a) {
  auto p = std::make_unique<IntParams>();
  p->v[0] = a.i("dim0");
  p->v[1] = a.i("dim1");
  return p;
}
void run_transpose(const KernelCall& c) {
  const TensorImpl& x = in(c, 0);
  const auto& p = params<IntParams>(c);
  const int64_t d0 = wrap_dim(p.v[0], x.dim(), "transpose");
  const int64_t d1 = wrap_dim(p.v[1], x.dim(), "transpose");
  Dims sizes = x.sizes(), strides = x.strides();
  std::swap(sizes[d0], sizes[d1]);
  std::swap(strides[d0], strides[d1]);
  copy_view("transpose", x, sizes, strides, 0, out(c));
}

std::unique_ptr<KernelParams> decode_dims(const AttrMap& a) {
  auto p = std::make_unique<DimsParams>();
  const char* key = a.op() == "permute" ? "dims" : "shape";
  std::span<const int64_t> d = a.ints(key);
  KILN_CHECK(d.size() <= 6, a.op(), "attribute '", key, "': at most 6 dims, got ", d.size());
  p->dims = Dims(std::vector<int64_t>(d.begin(), d.end()));
  return p;
}
void run_permute(const KernelCall& c) {
  const TensorImpl& x = in(c, 0);
  const Dims& perm = params<DimsParams>(c).dims;
  KILN_CHECK(static_cast<int64_t>(perm.size()) == x.dim(), "permute", "expected ", x.dim(),
             " dims, got ", perm.size());
  Dims sizes = x.sizes(), strides = x.strides();
  uint32_t seen = 0;
  for (size_t i = 0; i < perm.size(); ++i) {
    const int64_t d = wrap_dim(perm[i], x.dim(), "permute");
    KILN_CHECK(!(seen & (1u << d)), "permute", "dim ", d, " repeats");
    seen |= 1u << d;
    sizes[i] = x.sizes()[d];
    strides[i] = x.strides()[d];
  }
  copy_view("permute", x, sizes, strides, 0, out(c));
}

void run_expand(const KernelCall& c) {
  // Broadcasting copy: the kernel broadcasts the input into the output's shape.
  kernels::copy_(out(c), in(c, 0));
}

std::unique_ptr<KernelParams> decode_slice(const AttrMap& a) {
  auto p = std::make_unique<IntParams>();
  p->v[0] = a.i("dim");
  p->v[1] = a.i("start");
  p->v[2] = a.i("end");
  p->v[3] = a.i("step");
  KILN_CHECK(p->v[3] >= 1, "slice", "expected step >= 1, got ", p->v[3]);
  return p;
}
void run_slice(const KernelCall& c) {
  const TensorImpl& x = in(c, 0);
  const auto& p = params<IntParams>(c);
  const int64_t d = wrap_dim(p.v[0], x.dim(), "slice");
  const int64_t n = x.sizes()[d];
  int64_t start = p.v[1] < 0 ? p.v[1] + n : p.v[1];
  int64_t end = p.v[2] < 0 ? p.v[2] + n : p.v[2];
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Dims sizes = x.sizes(), strides = x.strides();
  // Without forming len + step - 1 or stride * step for a step near 2^63 (an artifact's):
  // a slice of at most one element keeps its stride.
  const int64_t len = end - start;
  sizes[d] = len == 0 ? 0 : 1 + (len - 1) / p.v[3];
  if (sizes[d] > 1) {
    KILN_CHECK(mul_ok(strides[d], p.v[3], strides[d]), "slice",
               "expected a step whose stride fits in 64 bits, got step ", p.v[3], " over stride ",
               x.strides()[d]);
  }
  copy_view("slice", x, sizes, strides, start * x.strides()[d], out(c));
}

std::unique_ptr<KernelParams> decode_select(const AttrMap& a) {
  auto p = std::make_unique<IntParams>();
  p->v[0] = a.i("dim");
  p->v[1] = a.i("index");
  return p;
}
void run_select(const KernelCall& c) {
  const TensorImpl& x = in(c, 0);
  const auto& p = params<IntParams>(c);
  const int64_t d = wrap_dim(p.v[0], x.dim(), "select");
  const int64_t n = x.sizes()[d];
  const int64_t idx = p.v[1] < 0 ? p.v[1] + n : p.v[1];
  KILN_CHECK(idx >= 0 && idx < n, "select", "index ", p.v[1], " out of range for size ", n);
  Dims sizes, strides;
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (i == d) continue;
    sizes.push_back(x.sizes()[i]);
    strides.push_back(x.strides()[i]);
  }
  copy_view("select", x, sizes, strides, idx * x.strides()[d], out(c));
}

struct StridedParams : KernelParams {
  Dims sizes, strides;
  int64_t offset = 0;
};
std::unique_ptr<KernelParams> decode_as_strided(const AttrMap& a) {
  auto p = std::make_unique<StridedParams>();
  std::span<const int64_t> s = a.ints("sizes"), t = a.ints("strides");
  KILN_CHECK(s.size() == t.size() && s.size() <= 6, "as_strided",
             "expected sizes and strides of the same rank (<= 6), got ", s.size(), " and ",
             t.size());
  p->sizes = Dims(std::vector<int64_t>(s.begin(), s.end()));
  p->strides = Dims(std::vector<int64_t>(t.begin(), t.end()));
  p->offset = a.i("offset");
  return p;
}
void run_as_strided(const KernelCall& c) {
  const auto& p = params<StridedParams>(c);
  copy_view("as_strided", in(c, 0), p.sizes, p.strides, p.offset, out(c));
}

std::unique_ptr<KernelParams> decode_dim(const AttrMap& a) {
  auto p = std::make_unique<IntParams>();
  p->v[0] = a.i("dim");
  return p;
}
void run_cat(const KernelCall& c) {
  kernels::cat_out(std::span<const TensorImpl* const>(c.inputs.data(), c.inputs.size()),
                   params<IntParams>(c).v[0], out(c));
}
void run_stack(const KernelCall& c) {
  kernels::stack_out(std::span<const TensorImpl* const>(c.inputs.data(), c.inputs.size()),
                     params<IntParams>(c).v[0], out(c));
}

struct PadParams : KernelParams {
  std::vector<int64_t> pad;
  kernels::PadMode mode = kernels::PadMode::Constant;
  double value = 0;
};
std::unique_ptr<KernelParams> decode_pad(const AttrMap& a) {
  auto p = std::make_unique<PadParams>();
  std::span<const int64_t> pad = a.ints("pad");
  p->pad.assign(pad.begin(), pad.end());
  const int64_t mode = a.i("mode");
  KILN_CHECK(mode >= 0 && mode <= 2, "pad", "expected mode 0..2, got ", mode);
  p->mode = static_cast<kernels::PadMode>(mode);
  p->value = a.f("value");
  return p;
}
void run_pad(const KernelCall& c) {
  const auto& p = params<PadParams>(c);
  kernels::pad_out(in(c, 0), p.pad, p.mode, p.value, out(c));
}

}  // namespace

void register_shape(Registry& r) {
  r.add(with_signature({.name = "view", .run = run_reshape, .inplace_ok = true}));
  r.add(with_signature({.name = "reshape", .run = run_reshape, .inplace_ok = true}));
  r.add(with_signature({.name = "transpose", .decode = decode_transpose, .run = run_transpose}));
  r.add(with_signature({.name = "permute", .decode = decode_dims, .run = run_permute}));
  r.add(with_signature({.name = "expand", .run = run_expand}));
  r.add(with_signature({.name = "slice", .decode = decode_slice, .run = run_slice}));
  r.add(with_signature({.name = "select", .decode = decode_select, .run = run_select}));
  r.add(with_signature({.name = "as_strided", .decode = decode_as_strided, .run = run_as_strided}));
  r.add(with_signature({.name = "cat", .decode = decode_dim, .run = run_cat}));
  r.add(with_signature({.name = "stack", .decode = decode_dim, .run = run_stack}));
  r.add(with_signature({.name = "pad", .decode = decode_pad, .run = run_pad}));
}

}  // namespace kiln::rt::ops
