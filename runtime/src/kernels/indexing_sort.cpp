// sort / argsort / topk along one dim. Each line is copied into a (value, index) buffer and
// ordered with a strict total order (NaN above every number, ties broken by index), which makes
// std::sort behave as a stable sort. topk uses partial_sort. Lines run in parallel.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kiln/runtime/kernels/copy.h"
#include "kiln/runtime/kernels/indexing.h"
#include "kiln/runtime/kernels/loop.h"
#include "kiln/runtime/thread_pool.h"
#include "kiln/runtime/views.h"
#include "reduce_common.h"

namespace kiln::kernels {

using namespace red;

namespace {

template <typename C>
struct Item {
  C v;
  int64_t i;
};

template <typename C>
inline bool is_nan(C v) {
  if constexpr (std::is_floating_point_v<C>) {
    return v != v;
  } else {
    return false;
  }
}

// a before b in ascending order (NaN last) or descending order (NaN first); ties by index.
template <typename C, bool Desc>
struct Before {
  bool operator()(const Item<C>& a, const Item<C>& b) const {
    const bool an = is_nan(a.v), bn = is_nan(b.v);
    if (an || bn) {
      if (an && bn) return a.i < b.i;
      return Desc ? an : bn;
    }
    if (a.v != b.v) return Desc ? a.v > b.v : a.v < b.v;
    return a.i < b.i;
  }
};

// Orders each line of self along dim, keeping the first k; writes values (optional) and indices
// into contiguous [outer, k, inner] buffers.
template <typename T>
void order_lines(const TensorImpl& self, int64_t d, int64_t k, bool desc, bool partial, T* values,
                 int64_t* indices) {
  using C = compute_t<T>;
  int64_t outer = 1, D = 1, inner = 1;
  for (int64_t i = 0; i < self.dim(); ++i) {
    if (i < d) outer *= self.sizes()[i];
    if (i == d) D = self.sizes()[i];
    if (i > d) inner *= self.sizes()[i];
  }
  auto x = views::contiguous(self);
  const T* src = x->data_ptr<T>();
  const int64_t lines = outer * inner;
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, D * 8));
  parallel_for(0, lines, grain, [&](int64_t b, int64_t e) {
    std::vector<Item<C>> buf(static_cast<size_t>(D));
    for (int64_t line = b; line < e; ++line) {
      const int64_t o = line / inner, j = line % inner;
      const T* p = src + o * D * inner + j;
      for (int64_t t = 0; t < D; ++t) buf[t] = {to<C>(p[t * inner]), t};
      auto run = [&](auto before) {
        if (partial && k < D) {
          std::partial_sort(buf.begin(), buf.begin() + k, buf.end(), before);
        } else {
          std::sort(buf.begin(), buf.end(), before);
        }
      };
      if (desc) {
        run(Before<C, true>{});
      } else {
        run(Before<C, false>{});
      }
      const int64_t base = o * k * inner + j;
      for (int64_t t = 0; t < k; ++t) {
        if (values) values[base + t * inner] = from<T>(buf[t].v);
        indices[base + t * inner] = buf[t].i;
      }
    }
  });
}

void order_impl(const TensorImpl& self, int64_t dim, int64_t k, bool desc, bool partial,
                TensorImpl* values, TensorImpl& indices, std::string_view op) {
  const int64_t d = wrap_dim(dim, self.dim(), op);
  Dims shape = self.sizes();
  if (self.dim() > 0) shape[d] = k;
  if (values) {
    KILN_CHECK(values->sizes() == shape, op, "expected values of shape ", shape, ", got ",
               values->sizes());
    KILN_CHECK(values->dtype() == self.dtype(), op, "expected values of dtype ",
               dtype_name(self.dtype()), ", got ", dtype_name(values->dtype()));
  }
  KILN_CHECK(indices.sizes() == shape, op, "expected indices of shape ", shape, ", got ",
             indices.sizes());
  KILN_CHECK(indices.dtype() == DType::Int64, op, "expected indices of dtype int64, got ",
             dtype_name(indices.dtype()));
  if (indices.numel() == 0) return;
  const bool vdirect = !values || values->is_contiguous();
  const bool idirect = indices.is_contiguous();
  TensorImplPtr vbuf = values && !vdirect ? empty(shape, self.dtype()) : TensorImplPtr();
  TensorImplPtr ibuf = idirect ? TensorImplPtr() : empty(shape, DType::Int64);
  int64_t* iptr = idirect ? indices.data_ptr<int64_t>() : ibuf->data_ptr<int64_t>();
  visit_dtype(self.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* vptr = values ? (vdirect ? values->data_ptr<T>() : vbuf->data_ptr<T>()) : nullptr;
    order_lines<T>(self, d, k, desc, partial, vptr, iptr);
  });
  if (vbuf) copy_(*values, *vbuf);
  if (ibuf) copy_(indices, *ibuf);
}

}  // namespace

Dims topk_shape(const TensorImpl& self, int64_t k, int64_t dim) {
  constexpr std::string_view op = "topk";
  const int64_t d = wrap_dim(dim, self.dim(), op);
  const int64_t size = self.dim() ? self.sizes()[d] : 1;
  KILN_CHECK(k >= 0 && k <= size, op, "expected k in [0, ", size, "] (the size of dim ", dim,
             "), got ", k);
  Dims s = self.sizes();
  if (self.dim() > 0) s[d] = k;
  return s;
}

void topk_out(const TensorImpl& self, int64_t k, int64_t dim, bool largest, bool sorted,
              TensorImpl& values, TensorImpl& indices) {
  topk_shape(self, k, dim);
  order_impl(self, dim, k, largest, true, &values, indices, "topk");
}

void sort_out(const TensorImpl& self, int64_t dim, bool descending, TensorImpl& values,
              TensorImpl& indices) {
  const int64_t d = wrap_dim(dim, self.dim(), "sort");
  const int64_t size = self.dim() ? self.sizes()[d] : 1;
  order_impl(self, dim, size, descending, false, &values, indices, "sort");
}

void argsort_out(const TensorImpl& self, int64_t dim, bool descending, TensorImpl& indices) {
  const int64_t d = wrap_dim(dim, self.dim(), "argsort");
  const int64_t size = self.dim() ? self.sizes()[d] : 1;
  order_impl(self, dim, size, descending, false, nullptr, indices, "argsort");
}

}  // namespace kiln::kernels
