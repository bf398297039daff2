#pragma once
// Helpers the CUDA kernels' host code shares: per-call device scratch memory from the caching
// allocator, a contiguous stand-in for an output view, and a device-side error flag.

#include <cstdint>

#include "kiln/runtime/cuda/cuda.h"
#include "kiln/runtime/cuda/eager.h"
#include "kiln/runtime/tensor.h"

namespace kiln::cuda {

// `bytes` of device memory ordered on `stream`, returned to the allocator when it goes out of
// scope (stream order makes that safe while kernels still use it).
class Scratch {
 public:
  Scratch(size_t bytes, StreamId stream)
      : ptr_(bytes > 0 ? device_allocator().allocate(bytes, stream) : 0) {}
  ~Scratch() {
    if (ptr_) device_allocator().free(ptr_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  DevicePtr get() const { return ptr_; }
  void* address() const { return reinterpret_cast<void*>(static_cast<uintptr_t>(ptr_)); }

 private:
  DevicePtr ptr_;
};

// `target` itself when contiguous, else a fresh contiguous buffer that finish() copies back.
class ContiguousOutput {
 public:
  explicit ContiguousOutput(TensorImpl& target) : target_(target) {
    if (!target.is_contiguous()) buffer_ = empty(target.sizes(), target.dtype(), Device::CUDA);
  }
  TensorImpl& get() { return buffer_ ? *buffer_ : target_; }
  void finish() {
    if (buffer_) copy_out(target_, *buffer_);
  }

 private:
  TensorImpl& target_;
  TensorImplPtr buffer_;
};

// A 64-bit value on the device that kernels overwrite when they meet bad input (an index out of
// range); seen() reads it back, which waits for the stream.
class ErrorFlag {
 public:
  static constexpr uint64_t kClear = ~uint64_t{0} >> 1;  // no index reaches it
  explicit ErrorFlag(StreamId stream) : scratch_(8, stream), stream_(stream) {
    copy_to_device(scratch_.get(), &kClear, 8, stream);
  }
  void* address() const { return scratch_.address(); }
  // The value a kernel wrote, or kClear.
  uint64_t seen() const {
    uint64_t v = kClear;
    copy_to_host(&v, scratch_.get(), 8, stream_);
    return v;
  }

 private:
  Scratch scratch_;
  StreamId stream_;
};

}  // namespace kiln::cuda
