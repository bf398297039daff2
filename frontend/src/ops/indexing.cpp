// Indexing, joining and padding ops with their gradients.

#include "kiln/runtime/kernels/indexing.h"
#include "kiln/autograd.h"
#include "kiln/dispatch.h"
#include "kiln/ops.h"

namespace kiln {

namespace detail {
void check_inplace(const Tensor& t, const char* op);
}

namespace {

Tensor like(const Tensor& t) {
  return Tensor(kiln::empty(t.sizes(), t.dtype()));
}
Tensor new_tensor(std::span<const int64_t> sizes, DType dtype) {
  return Tensor(kiln::empty(sizes, dtype));
}
std::vector<const TensorImpl*> impls(const TensorList& ts) {
  std::vector<const TensorImpl*> out;
  out.reserve(ts.size());
  for (const Tensor& t : ts) out.push_back(t.impl());
  return out;
}

// zeros of `sizes` with `src` added at `index` along `dim` (the adjoint of index_select).
Tensor index_add_into_zeros(const Dims& sizes, int64_t dim, const Tensor& index,
                            const Tensor& src) {
  return index_add(Tensor(kiln::zeros(sizes, src.dtype())), dim, index, src);
}

}  // namespace

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  Tensor out = new_tensor(kernels::index_select_shape(*x.impl(), dim, *index.impl()), x.dtype());
  kernels::index_select_out(*x.impl(), dim, *index.impl(), *out.impl());
  Dims in = x.sizes();
  autograd::record("IndexSelectBackward", {x}, {out}, {index}, {},
                   [in, dim](const TensorList& s, const TensorList& g) {
                     return TensorList{index_add_into_zeros(in, dim, s[0], g[0])};
                   });
  KILN_TRACE("index_select", TensorList({x, index}), {out}, {"dim", dim});
  return out;
}

Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source,
                 double alpha) {
  Tensor out = x.detach().clone();
  kernels::index_add_(*out.impl(), dim, *index.impl(), *source.impl(), alpha);
  autograd::record("IndexAddBackward", {x, source}, {out}, {index}, {},
                   [dim, alpha](const TensorList& s, const TensorList& g) {
                     return TensorList{g[0], index_select(g[0], dim, s[0]) * alpha};
                   });
  KILN_TRACE("index_add", TensorList({x, index, source}), {out}, {"dim", dim}, {"alpha", alpha});
  return out;
}

Tensor index_copy(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source) {
  Tensor out = x.detach().clone();
  kernels::index_copy_(*out.impl(), dim, *index.impl(), *source.impl());
  Dims src_sizes = source.sizes();
  autograd::record(
      "IndexCopyBackward", {x, source}, {out}, {index}, {},
      [dim, src_sizes](const TensorList& s, const TensorList& g) {
        Tensor zero(kiln::zeros(src_sizes, g[0].dtype()));
        return TensorList{index_copy(g[0], dim, s[0], zero), index_select(g[0], dim, s[0])};
      });
  KILN_TRACE("index_copy", TensorList({x, index, source}), {out}, {"dim", dim});
  return out;
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  Tensor out = new_tensor(index.sizes(), x.dtype());
  kernels::gather_out(*x.impl(), dim, *index.impl(), *out.impl());
  Dims in = x.sizes();
  autograd::record(
      "GatherBackward", {x}, {out}, {index}, {},
      [in, dim](const TensorList& s, const TensorList& g) {
        return TensorList{scatter_add(Tensor(kiln::zeros(in, g[0].dtype())), dim, s[0], g[0])};
      });
  KILN_TRACE("gather", TensorList({x, index}), {out}, {"dim", dim});
  return out;
}

Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  Tensor out = x.detach().clone();
  kernels::scatter_(*out.impl(), dim, *index.impl(), *src.impl());
  autograd::record("ScatterBackward", {x, src}, {out}, {index}, {},
                   [dim](const TensorList& s, const TensorList& g) {
                     return TensorList{scatter(g[0], dim, s[0], 0.0), gather(g[0], dim, s[0])};
                   });
  KILN_TRACE("scatter", TensorList({x, index, src}), {out}, {"dim", dim});
  return out;
}

Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, double value) {
  Tensor out = x.detach().clone();
  kernels::scatter_(*out.impl(), dim, *index.impl(), value);
  autograd::record("ScatterBackward", {x}, {out}, {index}, {},
                   [dim](const TensorList& s, const TensorList& g) {
                     return TensorList{scatter(g[0], dim, s[0], 0.0)};
                   });
  KILN_TRACE("scatter_value", TensorList({x, index}), {out}, {"dim", dim}, {"value", value});
  return out;
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  Tensor out = x.detach().clone();
  kernels::scatter_add_(*out.impl(), dim, *index.impl(), *src.impl());
  autograd::record("ScatterAddBackward", {x, src}, {out}, {index}, {},
                   [dim](const TensorList& s, const TensorList& g) {
                     return TensorList{g[0], gather(g[0], dim, s[0])};
                   });
  KILN_TRACE("scatter_add", TensorList({x, index, src}), {out}, {"dim", dim});
  return out;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  Tensor out = x.detach().clone();
  kernels::masked_fill_(*out.impl(), *mask.impl(), value);
  autograd::record("MaskedFillBackward", {x}, {out}, {mask}, {},
                   [](const TensorList& s, const TensorList& g) {
                     return TensorList{where(s[0], zeros_like(g[0]), g[0])};
                   });
  KILN_TRACE("masked_fill", TensorList({x, mask}), {out}, {"value", value});
  return out;
}

Tensor& masked_fill_(Tensor& x, const Tensor& mask, double value) {
  detail::check_inplace(x, "masked_fill_");
  kernels::masked_fill_(*x.impl(), *mask.impl(), value);
  autograd::bump_version(x);
  if (autograd::any_requires_grad({&x})) {
    auto node = std::make_shared<autograd::FunctionNode>(
        "MaskedFillBackward", [](const TensorList& s, const TensorList& g) {
          return TensorList{where(s[0], zeros_like(g[0]), g[0])};
        });
    node->save(mask);
    autograd::set_history(node, {x}, {x});
  }
  KILN_TRACE("masked_fill_", TensorList({x, mask}), {x}, {"value", value});
  return x;
}

Tensor masked_select(const Tensor& x, const Tensor& mask) {
  KILN_CHECK(!autograd::any_requires_grad({&x}), "masked_select",
             "gradient is not implemented; use where() or masked_fill() for differentiable code");
  Tensor out(kernels::masked_select(*x.impl(), *mask.impl()));
  KILN_TRACE("masked_select", TensorList({x, mask}), {out});
  return out;
}

Tensor cat(const TensorList& tensors, int64_t dim) {
  KILN_CHECK(!tensors.empty(), "cat", "expected a non-empty list of tensors");
  auto list = impls(tensors);
  DType dtype = tensors[0].dtype();
  for (const Tensor& t : tensors) dtype = promote_types(dtype, t.dtype());
  Tensor out = new_tensor(kernels::cat_shape(list, dim), dtype);
  kernels::cat_out(list, dim, *out.impl());
  if (autograd::any_requires_grad(tensors)) {
    const int64_t d = wrap_dim(dim, out.dim(), "cat");
    std::vector<int64_t> lengths;
    for (const Tensor& t : tensors)
      lengths.push_back(t.numel() == 0 && t.dim() == 1 ? 0 : t.size(d));
    std::vector<DType> dtypes;
    for (const Tensor& t : tensors) dtypes.push_back(t.dtype());
    autograd::record("CatBackward", tensors, {out}, {}, {},
                     [d, lengths, dtypes](const TensorList&, const TensorList& g) {
                       TensorList grads;
                       int64_t offset = 0;
                       for (size_t i = 0; i < lengths.size(); ++i) {
                         grads.push_back(g[0].narrow(d, offset, lengths[i]).to(dtypes[i]));
                         offset += lengths[i];
                       }
                       return grads;
                     });
  }
  KILN_TRACE("cat", tensors, {out}, {"dim", dim});
  return out;
}

Tensor stack(const TensorList& tensors, int64_t dim) {
  KILN_CHECK(!tensors.empty(), "stack", "expected a non-empty list of tensors");
  auto list = impls(tensors);
  Tensor out = new_tensor(kernels::stack_shape(list, dim), tensors[0].dtype());
  kernels::stack_out(list, dim, *out.impl());
  if (autograd::any_requires_grad(tensors)) {
    const int64_t d = wrap_dim(dim, out.dim(), "stack");
    const size_t n = tensors.size();
    autograd::record("StackBackward", tensors, {out}, {}, {},
                     [d, n](const TensorList&, const TensorList& g) {
                       TensorList grads;
                       for (size_t i = 0; i < n; ++i) grads.push_back(g[0].select(d, i));
                       return grads;
                     });
  }
  KILN_TRACE("stack", tensors, {out}, {"dim", dim});
  return out;
}

TensorList split_with_sizes(const Tensor& x, std::span<const int64_t> sizes, int64_t dim) {
  KILN_CHECK(x.dim() > 0, "split", "cannot split a 0-dim tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    KILN_CHECK(s >= 0, "split", "split sizes must be non-negative, got ", Dims(sizes));
    total += s;
  }
  KILN_CHECK(total == x.size(d), "split", "split sizes ", Dims(sizes), " sum to ", total,
             ", expected the size of dim ", d, " (", x.size(d), ")");
  TensorList out;
  int64_t offset = 0;
  for (int64_t s : sizes) {
    out.push_back(x.narrow(d, offset, s));
    offset += s;
  }
  return out;
}

TensorList split(const Tensor& x, int64_t split_size, int64_t dim) {
  KILN_CHECK(split_size > 0, "split", "split_size must be positive, got ", split_size);
  KILN_CHECK(x.dim() > 0, "split", "cannot split a 0-dim tensor");
  const int64_t n = x.size(dim);
  Dims sizes;
  for (int64_t off = 0; off < n; off += split_size) sizes.push_back(std::min(split_size, n - off));
  if (n == 0) sizes.push_back(0);
  return split_with_sizes(x, sizes, dim);
}

TensorList chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  KILN_CHECK(chunks > 0, "chunk", "number of chunks must be positive, got ", chunks);
  KILN_CHECK(x.dim() > 0, "chunk", "cannot chunk a 0-dim tensor");
  const int64_t n = x.size(dim);
  return split(x, std::max<int64_t>(1, (n + chunks - 1) / chunks), dim);
}

namespace {
// For each output position along a padded dim, the input position it reads (reflect/replicate).
Tensor pad_source_index(int64_t n, int64_t left, int64_t right, PadMode mode) {
  const int64_t m = n + left + right;
  Tensor idx(kiln::empty(Dims{m}, DType::Int64));
  // Through the impl: the index depends only on sizes, so it is a constant of any trace.
  int64_t* p = idx.impl()->data_ptr<int64_t>();
  for (int64_t j = 0; j < m; ++j) {
    int64_t i = j - left;
    if (mode == PadMode::Reflect) {
      if (i < 0) i = -i;
      if (i >= n) i = 2 * (n - 1) - i;
    } else {
      i = std::min(std::max<int64_t>(i, 0), n - 1);
    }
    p[j] = i;
  }
  return idx;
}
}  // namespace

Tensor pad(const Tensor& x, std::span<const int64_t> p, PadMode mode, double value) {
  Dims spec(p);
  Tensor out = new_tensor(kernels::pad_shape(x.sizes(), spec), x.dtype());
  const auto kmode = mode == PadMode::Constant  ? kernels::PadMode::Constant
                     : mode == PadMode::Reflect ? kernels::PadMode::Reflect
                                                : kernels::PadMode::Replicate;
  kernels::pad_out(*x.impl(), spec, kmode, value, *out.impl());
  Dims in = x.sizes();
  autograd::record(
      "PadBackward", {x}, {out}, {}, {}, [in, spec, mode](const TensorList&, const TensorList& g) {
        Tensor grad = g[0];
        const int64_t rank = static_cast<int64_t>(in.size());
        for (size_t k = 0; k < spec.size() / 2; ++k) {
          const int64_t d = rank - 1 - static_cast<int64_t>(k);
          const int64_t left = spec[2 * k], right = spec[2 * k + 1];
          if (mode == PadMode::Constant) {
            KILN_CHECK(left >= 0 && right >= 0, "pad",
                       "backward of negative (cropping) pads is not supported");
            grad = grad.narrow(d, left, in[d]);
          } else {
            Dims sizes = grad.sizes();
            sizes[d] = in[d];
            grad = index_add_into_zeros(sizes, d, pad_source_index(in[d], left, right, mode), grad);
          }
        }
        return TensorList{grad};
      });
  KILN_TRACE("pad", {x}, {out}, {"pad", spec}, {"mode", static_cast<int64_t>(mode)},
             {"value", value});
  return out;
}

Tensor one_hot(const Tensor& index, int64_t num_classes) {
  Tensor out = new_tensor(kernels::one_hot_shape(*index.impl(), num_classes), DType::Int64);
  kernels::one_hot_out(*index.impl(), *out.impl());
  KILN_TRACE("one_hot", {index}, {out}, {"num_classes", num_classes});
  return out;
}

namespace {
std::pair<Tensor, Tensor> selection_result(const char* name, const Tensor& x, Tensor values,
                                           Tensor indices, int64_t dim) {
  Dims in = x.sizes();
  autograd::record(name, {x}, {values}, {indices}, {},
                   [in, dim](const TensorList& s, const TensorList& g) {
                     Tensor z(kiln::zeros(in, g[0].dtype()));
                     return TensorList{scatter_add(z, dim, s[0], g[0])};
                   });
  return {values, indices};
}
}  // namespace

std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted) {
  Dims shape = kernels::topk_shape(*x.impl(), k, dim);
  Tensor values = new_tensor(shape, x.dtype());
  Tensor indices = new_tensor(shape, DType::Int64);
  kernels::topk_out(*x.impl(), k, dim, largest, sorted, *values.impl(), *indices.impl());
  KILN_TRACE("topk", {x}, TensorList({values, indices}), {"k", k}, {"dim", dim},
             {"largest", largest}, {"sorted", sorted});
  return selection_result("TopkBackward", x, values, indices, dim);
}

std::pair<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending) {
  Tensor values = like(x);
  Tensor indices = new_tensor(x.sizes(), DType::Int64);
  kernels::sort_out(*x.impl(), dim, descending, *values.impl(), *indices.impl());
  KILN_TRACE("sort", {x}, TensorList({values, indices}), {"dim", dim}, {"descending", descending});
  return selection_result("SortBackward", x, values, indices, dim);
}

Tensor argsort(const Tensor& x, int64_t dim, bool descending) {
  Tensor indices = new_tensor(x.sizes(), DType::Int64);
  kernels::argsort_out(*x.impl(), dim, descending, *indices.impl());
  KILN_TRACE("argsort", {x}, {indices}, {"dim", dim}, {"descending", descending});
  return indices;
}

}  // namespace kiln
