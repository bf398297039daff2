#pragma once
// Helpers the CUDA kernels' host code shares: per-call device scratch memory from the caching
// allocator, a contiguous stand-in for an output view, and a device-side error flag.

#include <cstdint>
#include <optional>

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

// Two 64-bit words on the device for kernels that meet bad input (an index out of range): such a
// kernel writes the value to word 1, then 1 to word 0. seen() reads them back, which waits for
// the stream.
class ErrorFlag {
 public:
  explicit ErrorFlag(StreamId stream) : scratch_(16, stream), stream_(stream) {
    fill32(scratch_.get(), 0, 16, stream);  // ordered on the stream: no host wait
  }
  void* address() const { return scratch_.address(); }
  // The value a kernel reported, if any.
  std::optional<int64_t> seen() const {
    uint64_t words[2] = {0, 0};
    copy_to_host(words, scratch_.get(), sizeof words, stream_);
    if (words[0] == 0) return std::nullopt;
    return static_cast<int64_t>(words[1]);
  }

 private:
  Scratch scratch_;
  StreamId stream_;
};

}  // namespace kiln::cuda
