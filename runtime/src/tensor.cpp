#include "kiln/runtime/tensor.h"

#include <climits>
#include <cstdint>
#include <cstring>
#include <sstream>

#include "kiln/runtime/checked_math.h"

namespace kiln {

TensorImpl::TensorImpl(StoragePtr storage, Dims sizes, Dims strides, int64_t offset, DType dtype)
    : storage_(std::move(storage)),
      sizes_(std::move(sizes)),
      strides_(std::move(strides)),
      offset_(offset),
      dtype_(dtype) {
  refresh();
}

int64_t TensorImpl::size(int64_t d) const {
  return sizes_[wrap_dim(d, dim(), "size")];
}
int64_t TensorImpl::stride(int64_t d) const {
  return strides_[wrap_dim(d, dim(), "stride")];
}

void TensorImpl::set_view(Dims sizes, Dims strides, int64_t offset) {
  sizes_ = std::move(sizes);
  strides_ = std::move(strides);
  offset_ = offset;
  refresh();
}

void TensorImpl::refresh() {
  numel_ = checked_numel(sizes_, "tensor");
  // Contiguous means row-major up to size-1 dims (whose stride does not matter). checked_numel
  // bounded the product of the non-zero sizes, so `expected` cannot overflow.
  contiguous_ = true;
  int64_t expected = 1;
  for (size_t i = sizes_.size(); i-- > 0;) {
    if (sizes_[i] == 1) continue;
    if (strides_[i] != expected) {
      contiguous_ = numel_ == 0;
      break;
    }
    expected *= std::max<int64_t>(sizes_[i], 1);
  }
}

Dims contiguous_strides(std::span<const int64_t> sizes, std::string_view op) {
  Dims strides(sizes.size());
  int64_t s = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = s;
    KILN_CHECK(sizes[i] >= 0, op, "sizes must be non-negative, got ", Dims(sizes));
    if (!mul_ok(s, std::max<int64_t>(sizes[i], 1), s)) [[unlikely]]
      fail(op, "strides of size ", Dims(sizes), " overflow int64");
  }
  return strides;
}

int64_t checked_numel(std::span<const int64_t> sizes, std::string_view op) {
  // The product of the non-zero sizes must fit too: it is the outermost contiguous stride, which
  // kernels compute even when another dim is 0 (as PyTorch's stride computation refuses it).
  int64_t n = 1, extent = 1;
  for (int64_t s : sizes) {
    KILN_CHECK(s >= 0, op, "sizes must be non-negative, got ", Dims(sizes));
    if (!mul_ok(extent, std::max<int64_t>(s, 1), extent)) [[unlikely]]
      fail(op, "size ", Dims(sizes), " overflows int64 elements");
    n *= s;  // |n| <= extent
  }
  return n;
}

int64_t wrap_dim(int64_t dim, int64_t rank, std::string_view op) {
  const int64_t r = rank == 0 ? 1 : rank;  // 0-dim tensors accept dim 0 / -1, as in PyTorch
  KILN_CHECK(dim >= -r && dim < r, op, "dim ", dim, " out of range for a tensor of rank ", rank,
             " (expected [", -r, ", ", r - 1, "])");
  return dim < 0 ? dim + r : dim;
}

TensorImplPtr empty(std::span<const int64_t> sizes, DType dtype) {
  const int64_t n = checked_numel(sizes, "empty");
  const size_t itemsize = dtype_size(dtype);
  KILN_CHECK(static_cast<uint64_t>(n) <= SIZE_MAX / itemsize, "empty", "size ", Dims(sizes),
             " overflows the address space");
  auto storage = make_intrusive<Storage>(static_cast<size_t>(n) * itemsize);
  return make_intrusive<TensorImpl>(std::move(storage), Dims(sizes), contiguous_strides(sizes), 0,
                                    dtype);
}

TensorImplPtr zeros(std::span<const int64_t> sizes, DType dtype) {
  auto t = empty(sizes, dtype);
  std::memset(t->data(), 0, t->nbytes());
  return t;
}

TensorImplPtr from_blob(void* data, std::span<const int64_t> sizes, DType dtype,
                        std::span<const int64_t> strides) {
  checked_numel(sizes, "from_blob");
  Dims st = strides.empty() ? contiguous_strides(sizes, "from_blob") : Dims(strides);
  KILN_CHECK(st.size() == sizes.size(), "from_blob", "expected ", sizes.size(), " strides, got ",
             st.size());
  for (size_t i = 0; i < st.size(); ++i)
    KILN_CHECK(st[i] >= 0, "from_blob", "negative stride ", st[i], " at dim ", i);
  // Bytes of the region the view touches.
  ViewExtent ext;
  uint64_t bytes = 0;
  KILN_CHECK(view_extent_ok(sizes, st, 0, ext) &&
                 (ext.empty || mul_ok(static_cast<uint64_t>(ext.hi) + 1,
                                      static_cast<uint64_t>(dtype_size(dtype)), bytes)),
             "from_blob", "size ", Dims(sizes), " with strides ", st,
             " overflows the address space");
  auto storage = make_intrusive<Storage>(data, static_cast<size_t>(bytes), nullptr);
  return make_intrusive<TensorImpl>(std::move(storage), Dims(sizes), std::move(st), 0, dtype);
}

TensorImplPtr make_view(const TensorImpl& base, Dims sizes, Dims strides, int64_t offset) {
  KILN_CHECK(sizes.size() == strides.size(), "view", "sizes ", sizes, " and strides ", strides,
             " differ in rank");
  for (size_t i = 0; i < sizes.size(); ++i)
    KILN_CHECK(sizes[i] >= 0, "view", "negative size in ", sizes);
  ViewExtent ext;
  KILN_CHECK(view_extent_ok(sizes, strides, offset, ext), "view", "view of sizes ", sizes,
             " strides ", strides, " offset ", offset, " overflows int64 element offsets");
  const int64_t capacity = static_cast<int64_t>(base.storage()->nbytes() / base.itemsize());
  KILN_CHECK(ext.empty || (ext.lo >= 0 && ext.hi < capacity), "view", "view of sizes ", sizes,
             " strides ", strides, " offset ", offset, " reaches elements [", ext.lo, ", ", ext.hi,
             "] outside a storage of ", capacity, " elements");
  return make_intrusive<TensorImpl>(base.storage(), std::move(sizes), std::move(strides), offset,
                                    base.dtype());
}

std::string describe(const TensorImpl& t) {
  std::ostringstream os;
  os << t.sizes() << ' ' << dtype_short_name(t.dtype());
  if (t.device() != Device::CPU) os << ' ' << device_name(t.device());
  return os.str();
}

void TensorImpl::fail_not_on_cpu() const {
  fail("cpu kernel", "got a ", device_name(device()), " tensor ", describe(*this),
       ": this op has no ", device_name(device()), " kernel yet; move the tensor with .cpu()");
}

}  // namespace kiln
