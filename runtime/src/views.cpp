#include "kiln/runtime/views.h"

#include <algorithm>

#include "kiln/runtime/checked_math.h"
#include "kiln/runtime/kernels/copy.h"

namespace kiln::views {

Dims infer_size(std::span<const int64_t> sizes, int64_t numel, std::string_view op) {
  Dims out(sizes);
  int64_t known = 1, extent = 1;  // extent: the product of the non-zero sizes, bounded
  int infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      KILN_CHECK(infer < 0, op, "only one dimension can be -1, got ", out);
      infer = static_cast<int>(i);
    } else {
      KILN_CHECK(out[i] >= 0, op, "invalid size ", out[i], " in ", out);
      KILN_CHECK(mul_ok(extent, std::max<int64_t>(out[i], 1), extent), op, "shape ", out,
                 " overflows int64 elements");
      known *= out[i];  // |known| <= extent
    }
  }
  if (infer >= 0) {
    KILN_CHECK(known != 0 && numel % known == 0, op, "shape ", out,
               " is invalid for input of size ", numel);
    out[infer] = numel / known;
  } else {
    KILN_CHECK(known == numel, op, "shape ", out, " is invalid for input of size ", numel);
  }
  return out;
}

bool compute_view_strides(const TensorImpl& t, std::span<const int64_t> sizes, Dims& strides_out) {
  const Dims& old_sizes = t.sizes();
  const Dims& old_strides = t.strides();
  strides_out = Dims(sizes.size());
  if (t.numel() == 0 || t.dim() == 0) {
    strides_out = contiguous_strides(sizes);
    return true;
  }
  // Walk the old dims from the innermost; each maximal chunk of old dims that is contiguous in
  // memory can be re-split into any new dims whose product matches it.
  int64_t view_d = static_cast<int64_t>(sizes.size()) - 1;
  int64_t chunk_base_stride = old_strides.empty() ? 1 : old_strides.back();
  int64_t tensor_numel = 1;
  int64_t view_numel = 1;
  for (int64_t d = static_cast<int64_t>(old_sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_sizes[d];
    if (d == 0 ||
        (old_sizes[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || sizes[view_d] == 1)) {
        strides_out[view_d] = view_numel * chunk_base_stride;
        view_numel *= sizes[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = old_strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

TensorImplPtr view(const TensorImpl& t, std::span<const int64_t> sizes) {
  Dims shape = infer_size(sizes, t.numel(), "view");
  Dims strides;
  KILN_CHECK(compute_view_strides(t, shape, strides), "view", "view size ", shape,
             " is not compatible with input sizes ", t.sizes(), " and strides ", t.strides(),
             " (at least one dimension spans two contiguous subspaces); use reshape");
  return make_view(t, std::move(shape), std::move(strides), t.storage_offset());
}

TensorImplPtr reshape(const TensorImpl& t, std::span<const int64_t> sizes) {
  Dims shape = infer_size(sizes, t.numel(), "reshape");
  Dims strides;
  if (compute_view_strides(t, shape, strides)) {
    return make_view(t, std::move(shape), std::move(strides), t.storage_offset());
  }
  auto c = contiguous(t);
  return make_view(*c, shape, contiguous_strides(shape), c->storage_offset());
}

TensorImplPtr transpose(const TensorImpl& t, int64_t dim0, int64_t dim1) {
  const int64_t r = t.dim();
  dim0 = wrap_dim(dim0, r, "transpose");
  dim1 = wrap_dim(dim1, r, "transpose");
  Dims sizes = t.sizes(), strides = t.strides();
  if (r > 0) {
    std::swap(sizes[dim0], sizes[dim1]);
    std::swap(strides[dim0], strides[dim1]);
  }
  return make_view(t, std::move(sizes), std::move(strides), t.storage_offset());
}

TensorImplPtr permute(const TensorImpl& t, std::span<const int64_t> order) {
  const int64_t r = t.dim();
  KILN_CHECK(static_cast<int64_t>(order.size()) == r, "permute", "expected ", r,
             " dims in the order, got ", order.size());
  Dims sizes(r), strides(r);
  std::vector<bool> used(r, false);
  for (int64_t i = 0; i < r; ++i) {
    const int64_t d = wrap_dim(order[i], r, "permute");
    KILN_CHECK(!used[d], "permute", "dim ", d, " repeats in ", Dims(order));
    used[d] = true;
    sizes[i] = t.sizes()[d];
    strides[i] = t.strides()[d];
  }
  return make_view(t, std::move(sizes), std::move(strides), t.storage_offset());
}

TensorImplPtr slice(const TensorImpl& t, int64_t dim, int64_t start, int64_t end, int64_t step) {
  KILN_CHECK(t.dim() > 0, "slice", "cannot slice a 0-dim tensor");
  dim = wrap_dim(dim, t.dim(), "slice");
  KILN_CHECK(step > 0, "slice", "step must be positive, got ", step);
  const int64_t n = t.sizes()[dim];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Dims sizes = t.sizes(), strides = t.strides();
  // Without forming len + step - 1 or stride * step for a step near 2^63: a slice of at most
  // one element keeps its stride.
  const int64_t len = end - start;
  sizes[dim] = len == 0 ? 0 : 1 + (len - 1) / step;
  if (sizes[dim] > 1) {
    KILN_CHECK(mul_ok(strides[dim], step, strides[dim]), "slice",
               "expected a step whose stride fits in 64 bits, got step ", step, " over stride ",
               t.strides()[dim]);
  }
  return make_view(t, std::move(sizes), std::move(strides),
                   t.storage_offset() + start * t.strides()[dim]);
}

TensorImplPtr narrow(const TensorImpl& t, int64_t dim, int64_t start, int64_t length) {
  KILN_CHECK(t.dim() > 0, "narrow", "cannot narrow a 0-dim tensor");
  dim = wrap_dim(dim, t.dim(), "narrow");
  const int64_t n = t.sizes()[dim];
  if (start < 0) start += n;
  KILN_CHECK(start >= 0 && length >= 0 && start + length <= n, "narrow", "start ", start,
             " + length ", length, " exceeds dimension size ", n);
  return slice(t, dim, start, start + length, 1);
}

TensorImplPtr select(const TensorImpl& t, int64_t dim, int64_t index) {
  KILN_CHECK(t.dim() > 0, "select", "cannot select from a 0-dim tensor");
  dim = wrap_dim(dim, t.dim(), "select");
  const int64_t n = t.sizes()[dim];
  KILN_CHECK(index >= -n && index < n, "select", "index ", index, " out of range for dimension ",
             dim, " of size ", n);
  if (index < 0) index += n;
  Dims sizes = t.sizes(), strides = t.strides();
  const int64_t offset = t.storage_offset() + index * strides[dim];
  sizes.erase(dim);
  strides.erase(dim);
  return make_view(t, std::move(sizes), std::move(strides), offset);
}

TensorImplPtr expand(const TensorImpl& t, std::span<const int64_t> target) {
  const int64_t r = t.dim(), nr = static_cast<int64_t>(target.size());
  KILN_CHECK(nr >= r, "expand", "the number of sizes (", nr,
             ") must be at least the tensor's rank (", r, "), got ", Dims(target), " for ",
             t.sizes());
  Dims sizes(nr), strides(nr);
  for (int64_t i = nr - 1; i >= 0; --i) {
    const int64_t j = i - (nr - r);
    const int64_t want = target[i];
    if (j < 0) {
      KILN_CHECK(want >= 0, "expand", "size -1 not allowed in a new leading dim: ", Dims(target));
      sizes[i] = want;
      strides[i] = 0;
      continue;
    }
    const int64_t have = t.sizes()[j];
    if (want == -1 || want == have) {
      sizes[i] = have;
      strides[i] = t.strides()[j];
    } else {
      KILN_CHECK(have == 1, "expand", "the expanded size ", want, " must match the existing size ",
                 have, " at non-singleton dim ", i, ": target ", Dims(target), ", tensor ",
                 t.sizes());
      sizes[i] = want;
      strides[i] = 0;
    }
  }
  return make_view(t, std::move(sizes), std::move(strides), t.storage_offset());
}

TensorImplPtr squeeze(const TensorImpl& t) {
  Dims sizes, strides;
  for (int64_t i = 0; i < t.dim(); ++i) {
    if (t.sizes()[i] != 1) {
      sizes.push_back(t.sizes()[i]);
      strides.push_back(t.strides()[i]);
    }
  }
  return make_view(t, std::move(sizes), std::move(strides), t.storage_offset());
}

TensorImplPtr squeeze(const TensorImpl& t, int64_t dim) {
  if (t.dim() == 0) return make_view(t, t.sizes(), t.strides(), t.storage_offset());
  dim = wrap_dim(dim, t.dim(), "squeeze");
  Dims sizes = t.sizes(), strides = t.strides();
  if (sizes[dim] == 1) {
    sizes.erase(dim);
    strides.erase(dim);
  }
  return make_view(t, std::move(sizes), std::move(strides), t.storage_offset());
}

TensorImplPtr unsqueeze(const TensorImpl& t, int64_t dim) {
  dim = wrap_dim(dim, t.dim() + 1, "unsqueeze");
  Dims sizes = t.sizes(), strides = t.strides();
  const int64_t stride = dim < t.dim() ? sizes[dim] * strides[dim] : 1;
  sizes.insert(dim, 1);
  strides.insert(dim, stride);
  return make_view(t, std::move(sizes), std::move(strides), t.storage_offset());
}

TensorImplPtr flatten(const TensorImpl& t, int64_t start_dim, int64_t end_dim) {
  if (t.dim() == 0) return reshape(t, Dims{1});
  start_dim = wrap_dim(start_dim, t.dim(), "flatten");
  end_dim = wrap_dim(end_dim, t.dim(), "flatten");
  KILN_CHECK(start_dim <= end_dim, "flatten", "start_dim ", start_dim,
             " must not come after end_dim ", end_dim);
  Dims sizes;
  for (int64_t i = 0; i < start_dim; ++i) sizes.push_back(t.sizes()[i]);
  int64_t merged = 1;
  for (int64_t i = start_dim; i <= end_dim; ++i) merged *= t.sizes()[i];
  sizes.push_back(merged);
  for (int64_t i = end_dim + 1; i < t.dim(); ++i) sizes.push_back(t.sizes()[i]);
  return reshape(t, sizes);
}

TensorImplPtr as_strided(const TensorImpl& t, std::span<const int64_t> sizes,
                         std::span<const int64_t> strides, int64_t storage_offset) {
  KILN_CHECK(storage_offset >= 0, "as_strided", "negative storage offset ", storage_offset);
  for (int64_t s : strides) KILN_CHECK(s >= 0, "as_strided", "negative stride in ", Dims(strides));
  return make_view(t, Dims(sizes), Dims(strides), storage_offset);
}

TensorImplPtr contiguous(const TensorImpl& t) {
  if (t.is_contiguous()) return TensorImplPtr(const_cast<TensorImpl*>(&t));
  auto out = empty(t.sizes(), t.dtype(), t.device());
  kernels::copy_(*out, t);
  return out;
}

}  // namespace kiln::views
