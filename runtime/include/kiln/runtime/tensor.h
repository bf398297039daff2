#pragma once
// TensorImpl: the metadata every executor shares — storage, sizes, strides (in elements), storage
// offset, dtype, device. Kernels read and write TensorImpls; the eager frontend wraps them in
// kiln::Tensor and hangs its autograd metadata on `autograd_meta`.

#include <cstdint>
#include <memory>
#include <span>

#include "kiln/runtime/dtype.h"
#include "kiln/runtime/error.h"
#include "kiln/runtime/intrusive_ptr.h"
#include "kiln/runtime/small_vector.h"
#include "kiln/runtime/storage.h"

namespace kiln {

// Owned by the frontend; the runtime only destroys it with the tensor.
struct AutogradMetaBase {
  virtual ~AutogradMetaBase() = default;
};

class TensorImpl : public RefCounted {
 public:
  TensorImpl(StoragePtr storage, Dims sizes, Dims strides, int64_t offset, DType dtype);

  const Dims& sizes() const { return sizes_; }
  const Dims& strides() const { return strides_; }
  int64_t size(int64_t dim) const;  // negative dims count from the end
  int64_t stride(int64_t dim) const;
  int64_t dim() const { return static_cast<int64_t>(sizes_.size()); }
  int64_t numel() const { return numel_; }
  int64_t storage_offset() const { return offset_; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_->device(); }
  size_t itemsize() const { return dtype_size(dtype_); }
  size_t nbytes() const { return static_cast<size_t>(numel_) * itemsize(); }
  bool is_contiguous() const { return contiguous_; }

  const StoragePtr& storage() const { return storage_; }
  // The first element's CPU address. A tensor on another device throws (a CPU kernel reached
  // with a CUDA tensor: an op without a CUDA kernel), never hands out a device address.
  void* data() const {
    if (storage_->device() != Device::CPU) [[unlikely]]
      fail_not_on_cpu();
    return raw_data();
  }
  // The first element's address on the tensor's device (the CUDA backend's kernels).
  void* raw_data() const {
    return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(itemsize());
  }
  template <typename T>
  T* data_ptr() const {
    return static_cast<T*>(data());
  }

  // Rebinds this tensor's view (used by in-place resize of outputs and by set_()).
  void set_view(Dims sizes, Dims strides, int64_t offset);

  std::unique_ptr<AutogradMetaBase> autograd_meta;

 private:
  void refresh();
  [[noreturn]] void fail_not_on_cpu() const;

  StoragePtr storage_;
  Dims sizes_;
  Dims strides_;
  int64_t offset_ = 0;
  int64_t numel_ = 0;
  DType dtype_;
  bool contiguous_ = true;
};

using TensorImplPtr = IntrusivePtr<TensorImpl>;

// Row-major strides for `sizes`; throws "op: strides of size [...] overflow int64".
Dims contiguous_strides(std::span<const int64_t> sizes, std::string_view op = "tensor");
// Product of sizes; throws on a negative size, or when the product of the non-zero sizes (the
// outermost contiguous stride) overflows int64 (op names the caller).
int64_t checked_numel(std::span<const int64_t> sizes, std::string_view op);
// Wraps a possibly negative dim into [0, rank); throws "op: dim d out of range for rank r".
int64_t wrap_dim(int64_t dim, int64_t rank, std::string_view op);

// A new contiguous tensor; contents are uninitialized.
TensorImplPtr empty(std::span<const int64_t> sizes, DType dtype);
// The same on `device`: Device::CUDA memory comes from the CUDA caching allocator (kiln::Error
// "no CUDA device: ..." where there is none). Defined with the CUDA backend (src/cuda), so the
// artifact core links no device code.
TensorImplPtr empty(std::span<const int64_t> sizes, DType dtype, Device device);
TensorImplPtr zeros(std::span<const int64_t> sizes, DType dtype);
// Borrows `data` (the caller keeps it alive); strides default to contiguous.
TensorImplPtr from_blob(void* data, std::span<const int64_t> sizes, DType dtype,
                        std::span<const int64_t> strides = {});
// A view of `base`'s storage with the given geometry; checks that it stays inside the storage.
TensorImplPtr make_view(const TensorImpl& base, Dims sizes, Dims strides, int64_t offset);

// Shape description used in error messages: "[2, 3] f32", "[2, 3] f32 cuda" off the CPU.
std::string describe(const TensorImpl& t);

}  // namespace kiln
