// Tensors on a device: Storage's device constructor and empty(sizes, dtype, device). Kept apart
// from storage.cpp and tensor.cpp so the artifact core (bench/artifact_size_core) links no
// device code.

#include "kiln/runtime/cuda/cuda.h"
#include "kiln/runtime/error.h"
#include "kiln/runtime/storage.h"
#include "kiln/runtime/tensor.h"

namespace kiln {

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  KILN_CHECK(device == Device::CUDA, "storage", "expected a device other than cpu here");
  cuda::CachingAllocator& allocator = cuda::device_allocator();
  // Stream-ordered: the block is reused only by work queued after this tensor's last use.
  data_ = reinterpret_cast<void*>(
      static_cast<uintptr_t>(allocator.allocate(checked_size(nbytes), cuda::current_stream())));
  deleter_ = [&allocator](void* p) {
    allocator.free(static_cast<cuda::DevicePtr>(reinterpret_cast<uintptr_t>(p)));
  };
}

TensorImplPtr empty(std::span<const int64_t> sizes, DType dtype, Device device) {
  if (device == Device::CPU) return empty(sizes, dtype);
  const int64_t n = checked_numel(sizes, "empty");
  const size_t itemsize = dtype_size(dtype);
  KILN_CHECK(static_cast<uint64_t>(n) <= SIZE_MAX / itemsize, "empty", "size ", Dims(sizes),
             " overflows the address space");
  auto storage = make_intrusive<Storage>(static_cast<size_t>(n) * itemsize, device);
  return make_intrusive<TensorImpl>(std::move(storage), Dims(sizes), contiguous_strides(sizes), 0,
                                    dtype);
}

}  // namespace kiln
