#pragma once
// Storage: one reference-counted block of bytes that views share. Its version counter is bumped by
// every in-place write, so autograd can refuse a saved tensor that changed under it.

#include <cstddef>
#include <cstdint>
#include <functional>

#include "kiln/runtime/allocator.h"
#include "kiln/runtime/device.h"
#include "kiln/runtime/intrusive_ptr.h"

namespace kiln {

class Storage : public RefCounted {
 public:
  // Owns nbytes from the CPU allocator.
  explicit Storage(size_t nbytes);
  // Borrows external memory (a user's buffer, an mmap'd weight segment, an arena slot); `deleter`
  // runs when the last reference goes (may be empty for memory the caller keeps alive).
  Storage(void* data, size_t nbytes, std::function<void(void*)> deleter);
  // nbytes of device memory from the device's allocator (Device::CUDA; defined with the CUDA
  // backend in src/cuda/device_storage.cpp).
  Storage(size_t nbytes, Device device);
  ~Storage() override;

  // The address on device(): a CPU pointer, or a CUDA device address.
  void* data() const { return data_; }
  Device device() const { return device_; }
  size_t nbytes() const { return nbytes_; }
  bool owns_memory() const { return allocator_ != nullptr; }

  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  // nbytes, unless it exceeds this thread's StorageLimit (then kiln::Error).
  static size_t checked_size(size_t nbytes);

  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Allocator* allocator_ = nullptr;
  std::function<void(void*)> deleter_;
  std::atomic<uint64_t> version_{0};
  Device device_ = Device::CPU;
};

using StoragePtr = IntrusivePtr<Storage>;

// While alive, a Storage this thread allocates that is larger than `max_bytes` is refused with a
// kiln::Error instead of allocated: a service evaluating models it does not trust (the ONNX
// importer under its fuzzer) bounds what one value may take. Nests (the innermost applies).
class StorageLimit {
 public:
  explicit StorageLimit(size_t max_bytes);
  ~StorageLimit();
  StorageLimit(const StorageLimit&) = delete;
  StorageLimit& operator=(const StorageLimit&) = delete;

 private:
  size_t previous_;
};

}  // namespace kiln
