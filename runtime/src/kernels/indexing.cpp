// index_select / index_add_, gather / scatter, masked_fill_ / masked_select, cat / stack / split /
// chunk, pad, one_hot. Data movement works on element bytes (1, 2, 4 or 8), so one instantiation
// serves every dtype of that width; arithmetic (index_add_, scatter_add_) visits the dtype.
// Indices are validated in a serial pass before any write (a worker thread never throws).
#include "kiln/runtime/kernels/indexing.h"

#include <algorithm>
#include <cstring>

#include "kiln/runtime/checked_math.h"
#include "kiln/runtime/kernels/copy.h"
#include "kiln/runtime/kernels/loop.h"
#include "kiln/runtime/thread_pool.h"
#include "kiln/runtime/views.h"
#include "reduce_common.h"

namespace kiln::kernels {

using namespace red;

namespace {

template <typename Fn>
decltype(auto) visit_bytes(size_t size, Fn&& fn) {
  switch (size) {
    case 1:
      return fn(uint8_t{});
    case 2:
      return fn(uint16_t{});
    case 4:
      return fn(uint32_t{});
    default:
      return fn(uint64_t{});
  }
}

void check_index_dtype(const TensorImpl& index, std::string_view op) {
  KILN_CHECK(index.dtype() == DType::Int64 || index.dtype() == DType::Int32, op,
             "expected index of dtype int64 or int32, got ", dtype_name(index.dtype()));
}

template <typename Fn>
decltype(auto) visit_index(DType dt, Fn&& fn) {
  if (dt == DType::Int32) return fn(int32_t{});
  return fn(int64_t{});
}

Dims byte_strides(const Dims& strides, size_t item) {
  Dims b = strides;
  for (auto& v : b) v *= static_cast<int64_t>(item);
  return b;
}

// Calls fn(ptrs, strides, n) over the plan on the calling thread, rows in row-major order.
template <size_t N, typename Fn>
void serial_for_each(const LoopPlan<N>& p, Fn&& fn) {
  const size_t rank = p.shape.size();
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < rank; ++d) rows *= p.shape[d];
  if (rows == 0 || p.shape[rank - 1] == 0) return;
  run_rows(p, 0, rows, fn);
}

// Every value of `index` (any layout) in row-major order.
template <typename Fn>
void for_each_index(const TensorImpl& index, Fn&& fn) {
  if (index.numel() == 0) return;
  auto plan = plan_loop<1>(index.sizes(), {static_cast<char*>(index.data())},
                           {byte_strides(index.strides(), index.itemsize())});
  visit_index(index.dtype(), [&](auto tag) {
    using I = decltype(tag);
    serial_for_each(plan, [&](char** p, const int64_t* s, int64_t n) {
      for (int64_t k = 0; k < n; ++k)
        fn(static_cast<int64_t>(*reinterpret_cast<I*>(p[0] + k * s[0])));
    });
  });
}

void check_bound(int64_t idx, int64_t size, int64_t dim, std::string_view op) {
  KILN_CHECK(idx >= 0 && idx < size, op, "index ", idx, " is out of bounds for dim ", dim,
             " with size ", size);
}

std::vector<int64_t> index_vector(const TensorImpl& index) {
  std::vector<int64_t> v;
  v.reserve(static_cast<size_t>(index.numel()));
  for_each_index(index, [&](int64_t i) { v.push_back(i); });
  return v;
}

// The bytes of `value` converted to dtype dt (in the low bytes of the result).
uint64_t scalar_bits(double value, DType dt) {
  uint64_t bits = 0;
  visit_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    const T v = from<T>(is_half_v<T> ? static_cast<double>(static_cast<float>(value)) : value);
    std::memcpy(&bits, &v, sizeof(T));
  });
  return bits;
}

void check_out(const TensorImpl& out, const Dims& shape, DType dt, std::string_view op,
               const char* what = "out") {
  KILN_CHECK(out.sizes() == shape, op, "expected ", what, " of shape ", shape, ", got ",
             out.sizes());
  KILN_CHECK(out.dtype() == dt, op, "expected ", what, " of dtype ", dtype_name(dt), ", got ",
             dtype_name(out.dtype()));
}

// dst += alpha * src, same shapes, same dtype.
void add_scaled_(TensorImpl& dst, const TensorImpl& src, double alpha) {
  if (dst.numel() == 0) return;
  const size_t item = dst.itemsize();
  auto plan =
      plan_loop<2>(dst.sizes(), {static_cast<char*>(dst.data()), static_cast<char*>(src.data())},
                   {byte_strides(dst.strides(), item), byte_strides(src.strides(), item)});
  visit_dtype(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using C = std::conditional_t<std::is_same_v<T, bool>, int64_t, compute_t<T>>;
    const C a = static_cast<C>(alpha);
    for_each_strided(plan, [&](char** p, const int64_t* s, int64_t n) {
      for (int64_t k = 0; k < n; ++k) {
        T* d = reinterpret_cast<T*>(p[0] + k * s[0]);
        const T* x = reinterpret_cast<const T*>(p[1] + k * s[1]);
        *d = from<T>(to<C>(*d) + a * to<C>(*x));
      }
    });
  });
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// index_select / index_add_

Dims index_select_shape(const TensorImpl& self, int64_t dim, const TensorImpl& index) {
  constexpr std::string_view op = "index_select";
  KILN_CHECK(index.dim() <= 1, op, "expected index of at most 1 dim, got ", index.sizes());
  const int64_t d = wrap_dim(dim, self.dim(), op);
  Dims s = self.sizes();
  if (self.dim() == 0) {
    KILN_CHECK(index.numel() == 1, op, "expected one index for a 0-dim self, got ", index.numel());
  } else {
    s[d] = index.numel();
  }
  return s;
}

void index_select_out(const TensorImpl& self, int64_t dim, const TensorImpl& index,
                      TensorImpl& out) {
  constexpr std::string_view op = "index_select";
  check_index_dtype(index, op);
  check_out(out, index_select_shape(self, dim, index), self.dtype(), op);
  const int64_t d = wrap_dim(dim, self.dim(), op);
  const int64_t size = self.dim() ? self.sizes()[d] : 1;
  const auto idx = index_vector(index);
  for (int64_t i : idx) check_bound(i, size, dim, op);
  if (out.numel() == 0) return;
  if (self.dim() == 0) {
    copy_(out, self);
    return;
  }
  const int64_t n = static_cast<int64_t>(idx.size());
  if (self.is_contiguous() && out.is_contiguous()) {
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < d; ++i) outer *= self.sizes()[i];
    for (int64_t i = d + 1; i < self.dim(); ++i) inner *= self.sizes()[i];
    const size_t row = static_cast<size_t>(inner) * self.itemsize();
    const char* src = static_cast<const char*>(self.data());
    char* dst = static_cast<char*>(out.data());
    parallel_for(0, outer * n, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(inner, 1)),
                 [&](int64_t b, int64_t e) {
                   for (int64_t t = b; t < e; ++t) {
                     const int64_t o = t / n, i = t % n;
                     std::memcpy(dst + t * row, src + (o * size + idx[i]) * row, row);
                   }
                 });
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    auto o = views::select(out, d, i);
    copy_(*o, *views::select(self, d, idx[i]));
  }
}

namespace {
// index_copy_ / index_add_'s checks: a 1-D index within self's dim, source shaped like self with
// index.numel() along it. Returns the wrapped dim and the index values.
std::pair<int64_t, std::vector<int64_t>> check_index_source(const TensorImpl& self, int64_t dim,
                                                            const TensorImpl& index,
                                                            const TensorImpl& source,
                                                            std::string_view op) {
  check_index_dtype(index, op);
  KILN_CHECK(index.dim() <= 1, op, "expected index of at most 1 dim, got ", index.sizes());
  const int64_t d = wrap_dim(dim, self.dim(), op);
  Dims want = self.sizes();
  if (self.dim() > 0) want[d] = index.numel();
  check_out(source, want, self.dtype(), op, "source");
  const int64_t size = self.dim() ? self.sizes()[d] : 1;
  auto idx = index_vector(index);
  for (int64_t i : idx) check_bound(i, size, dim, op);
  return {d, std::move(idx)};
}
}  // namespace

void index_copy_(TensorImpl& self, int64_t dim, const TensorImpl& index, const TensorImpl& source) {
  constexpr std::string_view op = "index_copy_";
  const auto [d, idx] = check_index_source(self, dim, index, source, op);
  if (self.dim() == 0) {
    if (!idx.empty()) copy_(self, source);
    return;
  }
  const int64_t n = static_cast<int64_t>(idx.size()), size = self.sizes()[d];
  if (self.is_contiguous() && source.is_contiguous()) {
    // Whole rows of `inner` elements (an RNN step writing its output row: one memcpy).
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < d; ++i) outer *= self.sizes()[i];
    for (int64_t i = d + 1; i < self.dim(); ++i) inner *= self.sizes()[i];
    const size_t row = static_cast<size_t>(inner) * self.itemsize();
    const char* src = static_cast<const char*>(source.data());
    char* dst = static_cast<char*>(self.data());
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < n; ++i)
        std::memcpy(dst + (o * size + idx[i]) * row, src + (o * n + i) * row, row);
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    copy_(*views::select(self, d, idx[i]), *views::select(source, d, i));
}

void index_add_(TensorImpl& self, int64_t dim, const TensorImpl& index, const TensorImpl& source,
                double alpha) {
  constexpr std::string_view op = "index_add_";
  const auto [d, idx] = check_index_source(self, dim, index, source, op);
  if (self.dim() == 0) {
    for (size_t i = 0; i < idx.size(); ++i) add_scaled_(self, source, alpha);
    return;
  }
  for (size_t i = 0; i < idx.size(); ++i) {
    auto dst = views::select(self, d, idx[i]);
    add_scaled_(*dst, *views::select(source, d, static_cast<int64_t>(i)), alpha);
  }
}

// ---------------------------------------------------------------------------------------------
// gather / scatter

namespace {

// Shared checks: index rank == self rank, index.size(d) <= limit.size(d) (d != dim unless
// `all_dims`), then every index value in [0, self.size(dim)).
int64_t check_gather_scatter(const TensorImpl& self, int64_t dim, const TensorImpl& index,
                             const TensorImpl* src, std::string_view op) {
  check_index_dtype(index, op);
  KILN_CHECK(index.dim() == self.dim(), op, "expected index of ", self.dim(),
             " dims (as self), got ", index.sizes());
  const int64_t d = wrap_dim(dim, self.dim(), op);
  for (int64_t i = 0; i < self.dim(); ++i) {
    if (i != d) {
      KILN_CHECK(index.sizes()[i] <= self.sizes()[i], op, "expected index.size(", i,
                 ") <= self.size(", i, "), got index ", index.sizes(), " and self ", self.sizes());
    }
    if (src) {
      KILN_CHECK(index.sizes()[i] <= src->sizes()[i], op, "expected index.size(", i,
                 ") <= src.size(", i, "), got index ", index.sizes(), " and src ", src->sizes());
    }
  }
  if (src) {
    KILN_CHECK(src->dim() == self.dim(), op, "expected src of ", self.dim(), " dims, got ",
               src->sizes());
    KILN_CHECK(src->dtype() == self.dtype(), op, "expected src of dtype ", dtype_name(self.dtype()),
               ", got ", dtype_name(src->dtype()));
  }
  const int64_t size = self.dim() ? self.sizes()[d] : 1;
  for_each_index(index, [&](int64_t i) { check_bound(i, size, dim, op); });
  return d;
}

// Strides of `t` in bytes, with stride 0 on dim d (the indexed dim).
Dims indexed_strides(const TensorImpl& t, int64_t d) {
  Dims s = byte_strides(t.strides(), t.itemsize());
  if (t.dim() > 0) s[d] = 0;
  return s;
}

enum class ScatterMode { Copy, Value, Add };

void scatter_impl(TensorImpl& self, int64_t dim, const TensorImpl& index, const TensorImpl* src,
                  double value, ScatterMode mode, std::string_view op) {
  const int64_t d = check_gather_scatter(self, dim, index, src, op);
  if (index.numel() == 0) return;
  const int64_t dstride =
      self.dim() ? self.strides()[d] * static_cast<int64_t>(self.itemsize()) : 0;
  const uint64_t vbits = scalar_bits(value, self.dtype());
  Dims src_strides =
      src ? byte_strides(src->strides(), src->itemsize()) : Dims(index.sizes().size());
  auto plan = plan_loop<3>(
      index.sizes(),
      {static_cast<char*>(self.data()), static_cast<char*>(index.data()),
       src ? static_cast<char*>(src->data())
           : reinterpret_cast<char*>(const_cast<uint64_t*>(&vbits))},
      {indexed_strides(self, d), byte_strides(index.strides(), index.itemsize()), src_strides});
  visit_index(index.dtype(), [&](auto itag) {
    using I = decltype(itag);
    if (mode == ScatterMode::Add) {
      visit_dtype(self.dtype(), [&](auto tag) {
        using T = decltype(tag);
        using C = std::conditional_t<std::is_same_v<T, bool>, int64_t, compute_t<T>>;
        serial_for_each(plan, [&](char** p, const int64_t* s, int64_t n) {
          for (int64_t k = 0; k < n; ++k) {
            const int64_t i = *reinterpret_cast<const I*>(p[1] + k * s[1]);
            T* dst = reinterpret_cast<T*>(p[0] + k * s[0] + i * dstride);
            *dst = from<T>(to<C>(*dst) + to<C>(*reinterpret_cast<const T*>(p[2] + k * s[2])));
          }
        });
      });
      return;
    }
    visit_bytes(self.itemsize(), [&](auto btag) {
      using E = decltype(btag);
      serial_for_each(plan, [&](char** p, const int64_t* s, int64_t n) {
        for (int64_t k = 0; k < n; ++k) {
          const int64_t i = *reinterpret_cast<const I*>(p[1] + k * s[1]);
          E v;
          std::memcpy(&v, p[2] + k * s[2], sizeof(E));
          std::memcpy(p[0] + k * s[0] + i * dstride, &v, sizeof(E));
        }
      });
    });
  });
}

}  // namespace

void gather_out(const TensorImpl& self, int64_t dim, const TensorImpl& index, TensorImpl& out) {
  constexpr std::string_view op = "gather";
  check_out(out, index.sizes(), self.dtype(), op);
  const int64_t d = check_gather_scatter(self, dim, index, nullptr, op);
  if (index.numel() == 0) return;
  const int64_t dstride =
      self.dim() ? self.strides()[d] * static_cast<int64_t>(self.itemsize()) : 0;
  auto plan =
      plan_loop<3>(index.sizes(),
                   {static_cast<char*>(out.data()), static_cast<char*>(index.data()),
                    static_cast<char*>(self.data())},
                   {byte_strides(out.strides(), out.itemsize()),
                    byte_strides(index.strides(), index.itemsize()), indexed_strides(self, d)});
  visit_index(index.dtype(), [&](auto itag) {
    using I = decltype(itag);
    visit_bytes(self.itemsize(), [&](auto btag) {
      using E = decltype(btag);
      for_each_strided(plan, [&](char** p, const int64_t* s, int64_t n) {
        for (int64_t k = 0; k < n; ++k) {
          const int64_t i = *reinterpret_cast<const I*>(p[1] + k * s[1]);
          E v;
          std::memcpy(&v, p[2] + k * s[2] + i * dstride, sizeof(E));
          std::memcpy(p[0] + k * s[0], &v, sizeof(E));
        }
      });
    });
  });
}

void scatter_(TensorImpl& self, int64_t dim, const TensorImpl& index, const TensorImpl& src) {
  scatter_impl(self, dim, index, &src, 0, ScatterMode::Copy, "scatter_");
}
void scatter_(TensorImpl& self, int64_t dim, const TensorImpl& index, double value) {
  scatter_impl(self, dim, index, nullptr, value, ScatterMode::Value, "scatter_");
}
void scatter_add_(TensorImpl& self, int64_t dim, const TensorImpl& index, const TensorImpl& src) {
  scatter_impl(self, dim, index, &src, 0, ScatterMode::Add, "scatter_add_");
}

// ---------------------------------------------------------------------------------------------
// masks

namespace {
void check_mask(const TensorImpl& mask, std::string_view op) {
  KILN_CHECK(mask.dtype() == DType::Bool || mask.dtype() == DType::UInt8, op,
             "expected mask of dtype bool (or uint8), got ", dtype_name(mask.dtype()));
}
}  // namespace

void masked_fill_(TensorImpl& self, const TensorImpl& mask, double value) {
  constexpr std::string_view op = "masked_fill_";
  check_mask(mask, op);
  const Dims ms = broadcast_strides(mask, self.sizes(), op);
  if (self.numel() == 0) return;
  const uint64_t vbits = scalar_bits(value, self.dtype());
  auto plan =
      plan_loop<2>(self.sizes(), {static_cast<char*>(self.data()), static_cast<char*>(mask.data())},
                   {byte_strides(self.strides(), self.itemsize()), ms});
  visit_bytes(self.itemsize(), [&](auto btag) {
    using E = decltype(btag);
    E v;
    std::memcpy(&v, &vbits, sizeof(E));
    for_each_strided(plan, [&](char** p, const int64_t* s, int64_t n) {
      for (int64_t k = 0; k < n; ++k) {
        if (*reinterpret_cast<const uint8_t*>(p[1] + k * s[1])) {
          std::memcpy(p[0] + k * s[0], &v, sizeof(E));
        }
      }
    });
  });
}

TensorImplPtr masked_select(const TensorImpl& self, const TensorImpl& mask) {
  constexpr std::string_view op = "masked_select";
  check_mask(mask, op);
  const Dims shape = broadcast_shapes(self.sizes(), mask.sizes(), op);
  const Dims ss = byte_strides(broadcast_strides(self, shape, op), self.itemsize());
  const Dims ms = broadcast_strides(mask, shape, op);
  int64_t count = 0;
  auto mplan = plan_loop<1>(shape, {static_cast<char*>(mask.data())}, {ms});
  if (checked_numel(shape, op) > 0) {
    serial_for_each(mplan, [&](char** p, const int64_t* s, int64_t n) {
      for (int64_t k = 0; k < n; ++k)
        count += *reinterpret_cast<const uint8_t*>(p[0] + k * s[0]) != 0;
    });
  }
  auto out = empty(Dims{count}, self.dtype());
  if (count == 0) return out;
  char* dst = static_cast<char*>(out->data());
  const size_t item = self.itemsize();
  auto plan = plan_loop<2>(
      shape, {static_cast<char*>(self.data()), static_cast<char*>(mask.data())}, {ss, ms});
  serial_for_each(plan, [&](char** p, const int64_t* s, int64_t n) {
    for (int64_t k = 0; k < n; ++k) {
      if (*reinterpret_cast<const uint8_t*>(p[1] + k * s[1])) {
        std::memcpy(dst, p[0] + k * s[0], item);
        dst += item;
      }
    }
  });
  return out;
}

// ---------------------------------------------------------------------------------------------
// cat / stack / split / chunk

namespace {
bool skipped_in_cat(const TensorImpl& t) {
  return t.dim() == 1 && t.sizes()[0] == 0;
}
}  // namespace

Dims cat_shape(std::span<const TensorImpl* const> tensors, int64_t dim) {
  constexpr std::string_view op = "cat";
  KILN_CHECK(!tensors.empty(), op, "expected a non-empty list of tensors, got 0 tensors");
  const TensorImpl* ref = nullptr;
  for (const TensorImpl* t : tensors) {
    if (!skipped_in_cat(*t)) {
      ref = t;
      break;
    }
  }
  if (!ref) return Dims{0};
  KILN_CHECK(ref->dim() > 0, op, "zero-dimensional tensor cannot be concatenated");
  const int64_t d = wrap_dim(dim, ref->dim(), op);
  Dims out = ref->sizes();
  out[d] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorImpl& t = *tensors[i];
    if (skipped_in_cat(t)) continue;
    KILN_CHECK(t.dim() == ref->dim(), op, "expected tensors of ", ref->dim(), " dims, got tensor ",
               i, " of shape ", t.sizes());
    for (int64_t k = 0; k < t.dim(); ++k) {
      KILN_CHECK(k == d || t.sizes()[k] == ref->sizes()[k], op, "expected sizes to match ",
                 ref->sizes(), " except in dim ", d, ", got tensor ", i, " of shape ", t.sizes());
    }
    out[d] = checked_add(out[d], t.sizes()[d], op, "the concatenated size");
  }
  return out;
}

void cat_out(std::span<const TensorImpl* const> tensors, int64_t dim, TensorImpl& out) {
  constexpr std::string_view op = "cat";
  const Dims shape = cat_shape(tensors, dim);
  KILN_CHECK(out.sizes() == shape, op, "expected out of shape ", shape, ", got ", out.sizes());
  if (out.numel() == 0) return;
  const int64_t d = wrap_dim(dim, out.dim(), op);
  int64_t offset = 0;
  for (const TensorImpl* t : tensors) {
    if (skipped_in_cat(*t)) continue;
    const int64_t n = t->sizes()[d];
    if (n > 0) {
      auto dst = views::narrow(out, d, offset, n);
      copy_(*dst, *t);
    }
    offset += n;
  }
}

Dims stack_shape(std::span<const TensorImpl* const> tensors, int64_t dim) {
  constexpr std::string_view op = "stack";
  KILN_CHECK(!tensors.empty(), op, "expected a non-empty list of tensors, got 0 tensors");
  const Dims& s0 = tensors[0]->sizes();
  for (size_t i = 1; i < tensors.size(); ++i) {
    KILN_CHECK(tensors[i]->sizes() == s0, op, "expected each tensor to be equal size, got ", s0,
               " at entry 0 and ", tensors[i]->sizes(), " at entry ", i);
  }
  const int64_t d = wrap_dim(dim, static_cast<int64_t>(s0.size()) + 1, op);
  Dims out = s0;
  out.insert(static_cast<size_t>(d), static_cast<int64_t>(tensors.size()));
  return out;
}

void stack_out(std::span<const TensorImpl* const> tensors, int64_t dim, TensorImpl& out) {
  constexpr std::string_view op = "stack";
  const Dims shape = stack_shape(tensors, dim);
  KILN_CHECK(out.sizes() == shape, op, "expected out of shape ", shape, ", got ", out.sizes());
  const int64_t d = wrap_dim(dim, out.dim(), op);
  if (out.numel() == 0) return;
  for (size_t i = 0; i < tensors.size(); ++i) {
    auto dst = views::select(out, d, static_cast<int64_t>(i));
    copy_(*dst, *tensors[i]);
  }
}

std::vector<TensorImplPtr> split(const TensorImpl& self, int64_t split_size, int64_t dim) {
  constexpr std::string_view op = "split";
  KILN_CHECK(self.dim() > 0, op, "expected a tensor of at least 1 dim, got a 0-dim tensor");
  const int64_t d = wrap_dim(dim, self.dim(), op);
  const int64_t size = self.sizes()[d];
  KILN_CHECK(split_size > 0 || (split_size == 0 && size == 0), op,
             "expected a positive split_size, got ", split_size, " for dim of size ", size);
  std::vector<TensorImplPtr> out;
  if (size == 0) {
    out.push_back(views::narrow(self, d, 0, 0));
    return out;
  }
  for (int64_t start = 0; start < size; start += split_size) {
    out.push_back(views::narrow(self, d, start, std::min(split_size, size - start)));
  }
  return out;
}

std::vector<TensorImplPtr> split_with_sizes(const TensorImpl& self,
                                            std::span<const int64_t> split_sizes, int64_t dim) {
  constexpr std::string_view op = "split_with_sizes";
  KILN_CHECK(self.dim() > 0, op, "expected a tensor of at least 1 dim, got a 0-dim tensor");
  const int64_t d = wrap_dim(dim, self.dim(), op);
  int64_t total = 0;
  for (int64_t s : split_sizes) {
    KILN_CHECK(s >= 0, op, "expected non-negative split sizes, got ", Dims(split_sizes));
    total += s;
  }
  KILN_CHECK(total == self.sizes()[d], op, "expected split sizes ", Dims(split_sizes),
             " to sum to the size of dim ", d, " (", self.sizes()[d], "), got ", total);
  std::vector<TensorImplPtr> out;
  int64_t start = 0;
  for (int64_t s : split_sizes) {
    out.push_back(views::narrow(self, d, start, s));
    start += s;
  }
  return out;
}

std::vector<TensorImplPtr> chunk(const TensorImpl& self, int64_t chunks, int64_t dim) {
  constexpr std::string_view op = "chunk";
  KILN_CHECK(chunks > 0, op, "expected chunks > 0, got ", chunks);
  KILN_CHECK(self.dim() > 0, op, "expected a tensor of at least 1 dim, got a 0-dim tensor");
  const int64_t d = wrap_dim(dim, self.dim(), op);
  const int64_t size = self.sizes()[d];
  const int64_t split_size = (size + chunks - 1) / chunks;
  if (size == 0) {
    std::vector<TensorImplPtr> out;
    for (int64_t i = 0; i < chunks; ++i) out.push_back(views::narrow(self, d, 0, 0));
    return out;
  }
  return split(self, split_size, d);
}

// ---------------------------------------------------------------------------------------------
// pad

Dims pad_shape(std::span<const int64_t> sizes, std::span<const int64_t> pad) {
  constexpr std::string_view op = "pad";
  const int64_t r = static_cast<int64_t>(sizes.size());
  KILN_CHECK(pad.size() % 2 == 0 && static_cast<int64_t>(pad.size()) <= 2 * r, op,
             "expected an even number of pad values, at most 2 * rank (", 2 * r, "), got ",
             Dims(pad));
  Dims out(sizes);
  for (size_t i = 0; i < pad.size() / 2; ++i) {
    const int64_t d = r - 1 - static_cast<int64_t>(i);
    // Checked: pads from an artifact may be anything (INT64_MAX twice once wrapped to size - 2).
    // Each pad is bounded too, so that `o - left` below cannot overflow.
    constexpr int64_t kMaxPad = int64_t(1) << 62;
    const int64_t lo = pad[2 * i], hi = pad[2 * i + 1];
    KILN_CHECK(lo > -kMaxPad && lo < kMaxPad && hi > -kMaxPad && hi < kMaxPad &&
                   add_ok(sizes[d], lo, out[d]) && add_ok(out[d], hi, out[d]),
               op, "expected pads below 2^62 whose padded size fits in 64 bits, got ", Dims(pad),
               " for dim ", d, " of size ", sizes[d]);
    KILN_CHECK(out[d] >= 0, op, "padding ", Dims(pad), " makes dim ", d, " of size ", sizes[d],
               " negative (", out[d], ")");
  }
  return out;
}

void pad_out(const TensorImpl& self, std::span<const int64_t> pad, PadMode mode, double value,
             TensorImpl& out) {
  constexpr std::string_view op = "pad";
  check_out(out, pad_shape(self.sizes(), pad), self.dtype(), op);
  const int64_t r = self.dim();
  // Nothing to write (and no index maps: an empty input's padded dims may be 2^40 long).
  if (out.numel() == 0) return;
  // Per dim: the source index of every output index, -1 for the constant.
  std::vector<std::vector<int64_t>> maps(static_cast<size_t>(r));
  for (int64_t d = 0; d < r; ++d) {
    const int64_t size = self.sizes()[d];
    const int64_t i = r - 1 - d;
    const int64_t left = 2 * i < static_cast<int64_t>(pad.size()) ? pad[2 * i] : 0;
    const int64_t right = 2 * i < static_cast<int64_t>(pad.size()) ? pad[2 * i + 1] : 0;
    if (mode == PadMode::Reflect && (left || right)) {
      KILN_CHECK(left >= 0 && right >= 0 && left < size && right < size, op, "reflect padding (",
                 left, ", ", right, ") must be non-negative and less than ", "the size of dim ", d,
                 " (", size, ")");
    }
    if (mode == PadMode::Replicate && (left || right)) {
      KILN_CHECK(left >= 0 && right >= 0 && size > 0, op, "replicate padding (", left, ", ", right,
                 ") needs non-negative pads and a non-empty dim ", d);
    }
    const int64_t osize = out.sizes()[d];
    auto& m = maps[d];
    m.resize(static_cast<size_t>(osize));
    for (int64_t o = 0; o < osize; ++o) {
      int64_t j = o - left;
      if (mode == PadMode::Constant) {
        m[o] = (j >= 0 && j < size) ? j : -1;
      } else if (mode == PadMode::Reflect) {
        if (j < 0) j = -j;
        if (j >= size) j = 2 * (size - 1) - j;
        m[o] = j;
      } else {
        m[o] = std::clamp<int64_t>(j, 0, size - 1);
      }
    }
  }
  if (out.numel() == 0) return;
  if (r == 0) {
    copy_(out, self);
    return;
  }
  const uint64_t vbits = scalar_bits(value, self.dtype());
  const int64_t inner = out.sizes()[r - 1];
  const int64_t rows = out.numel() / inner;
  const int64_t item = static_cast<int64_t>(self.itemsize());
  const char* src = static_cast<const char*>(self.data());
  char* dst = static_cast<char*>(out.data());
  visit_bytes(self.itemsize(), [&](auto btag) {
    using E = decltype(btag);
    E v;
    std::memcpy(&v, &vbits, sizeof(E));
    const int64_t ss = self.strides()[r - 1] * item, os = out.strides()[r - 1] * item;
    const int64_t* mlast = maps[r - 1].data();
    parallel_for(0, rows, std::max<int64_t>(1, kParallelGrain / inner), [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row) {
        int64_t rem = row, soff = 0, ooff = 0;
        bool fill = false;
        for (int64_t d = r - 2; d >= 0; --d) {
          const int64_t o = rem % out.sizes()[d];
          rem /= out.sizes()[d];
          const int64_t m = maps[d][o];
          if (m < 0) fill = true;
          soff += m * self.strides()[d] * item;
          ooff += o * out.strides()[d] * item;
        }
        char* drow = dst + ooff;
        if (fill) {
          for (int64_t k = 0; k < inner; ++k) std::memcpy(drow + k * os, &v, sizeof(E));
          continue;
        }
        const char* srow = src + soff;
        for (int64_t k = 0; k < inner; ++k) {
          const int64_t m = mlast[k];
          E x = v;
          if (m >= 0) std::memcpy(&x, srow + m * ss, sizeof(E));
          std::memcpy(drow + k * os, &x, sizeof(E));
        }
      }
    });
  });
}

// ---------------------------------------------------------------------------------------------
// one_hot

Dims one_hot_shape(const TensorImpl& index, int64_t num_classes) {
  constexpr std::string_view op = "one_hot";
  check_index_dtype(index, op);
  if (num_classes == -1) {
    KILN_CHECK(index.numel() > 0, op,
               "cannot infer the number of classes from an empty index; pass num_classes");
    int64_t mx = 0;
    for_each_index(index, [&](int64_t i) { mx = std::max(mx, i); });
    num_classes = mx + 1;
  }
  KILN_CHECK(num_classes >= 0, op, "expected num_classes >= 0 (or -1), got ", num_classes);
  Dims s = index.sizes();
  s.push_back(num_classes);
  return s;
}

void one_hot_out(const TensorImpl& index, TensorImpl& out) {
  constexpr std::string_view op = "one_hot";
  check_index_dtype(index, op);
  KILN_CHECK(out.dim() == index.dim() + 1, op, "expected out of ", index.dim() + 1,
             " dims (index dims + classes), got ", out.sizes());
  for (int64_t d = 0; d < index.dim(); ++d) {
    KILN_CHECK(out.sizes()[d] == index.sizes()[d], op, "expected out of shape ", index.sizes(),
               " + [classes], got ", out.sizes());
  }
  const int64_t nc = out.sizes().back();
  for_each_index(index, [&](int64_t i) {
    KILN_CHECK(i >= 0 && i < nc, op, "class values must be in [0, ", nc, "), got ", i);
  });
  if (out.numel() == 0) return;
  auto zero = zeros(Dims{}, out.dtype());
  copy_(out, *zero);
  const uint64_t one = scalar_bits(1.0, out.dtype());
  const int64_t cstride = out.strides().back() * static_cast<int64_t>(out.itemsize());
  // Out viewed without its class dim, walked together with index.
  auto base = views::select(out, -1, 0);
  auto plan = plan_loop<2>(index.sizes(),
                           {static_cast<char*>(base->data()), static_cast<char*>(index.data())},
                           {byte_strides(base->strides(), out.itemsize()),
                            byte_strides(index.strides(), index.itemsize())});
  visit_index(index.dtype(), [&](auto itag) {
    using I = decltype(itag);
    const size_t item = out.itemsize();
    for_each_strided(plan, [&](char** p, const int64_t* s, int64_t n) {
      for (int64_t k = 0; k < n; ++k) {
        const int64_t i = *reinterpret_cast<const I*>(p[1] + k * s[1]);
        std::memcpy(p[0] + k * s[0] + i * cstride, &one, item);
      }
    });
  });
}

}  // namespace kiln::kernels
