#pragma once
// The CUDA backend's device layer: whether a device is there, its properties, streams, events,
// copies, pinned host memory and the device allocator. The driver is loaded with dlopen at first
// use, so a program linking kiln_runtime starts on machines without CUDA; there every call below
// except the queries throws kiln::Error("op", "no CUDA device: ...").
// One device per process (device_info().index: KILN_CUDA_DEVICE, else the launcher's local rank
// modulo the device count, else 0); eager work is ordered on current_stream().

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "kiln/runtime/cuda/caching_allocator.h"

namespace kiln::cuda {

// This build has the backend (CUDA's headers were found at build time).
bool built_with_cuda();
// A driver and at least one device; the first call loads and initializes the driver.
bool is_available();
// Why is_available() is false ("no CUDA device: the NVIDIA driver (libcuda.so.1) is not
// installed"); empty when it is true.
std::string unavailable_reason();
// Throws kiln::Error(op, unavailable_reason()) unless a device is available.
void require_device(std::string_view op);

struct DeviceInfo {
  int index = 0;  // the ordinal: KILN_CUDA_DEVICE, else LOCAL_RANK modulo the count, else 0
  std::string name;
  int major = 0, minor = 0;  // compute capability
  int multiprocessors = 0;
  int l2_bytes = 0;
  size_t total_memory = 0;
  int driver_version = 0;  // 13000 = CUDA 13.0
  std::string arch() const { return "sm_" + std::to_string(major * 10 + minor); }
};
const DeviceInfo& device_info();

// A stream of the driver (CUstream); the id is what kernels and the allocator take.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  StreamId id() const { return id_; }
  void synchronize() const;

 private:
  StreamId id_ = 0;
};
// The stream eager ops and copies use unless told otherwise (created at first use).
StreamId current_stream();
void synchronize(StreamId stream);

class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(StreamId stream);
  void synchronize() const;
  // Makes `stream` wait for this event's work (no host wait).
  void block(StreamId stream) const;
  // Milliseconds between this event and `end` (both recorded and complete).
  float elapsed_ms(const Event& end) const;

 private:
  void* event_ = nullptr;
};

// The process's device allocator (CachingAllocator over cuMemAlloc).
CachingAllocator& device_allocator();

// Copies. to_device/to_host wait for the copy (the host buffer may be pageable); device_to_device
// is ordered on `stream` and returns at once.
void copy_to_device(DevicePtr dst, const void* src, size_t nbytes, StreamId stream);
void copy_to_host(void* dst, DevicePtr src, size_t nbytes, StreamId stream);
void copy_device_to_device(DevicePtr dst, DevicePtr src, size_t nbytes, StreamId stream);
// Asynchronous copies from/to pinned host memory (allocate_pinned): return at once.
void copy_to_device_async(DevicePtr dst, const void* pinned_src, size_t nbytes, StreamId stream);
void copy_to_host_async(void* pinned_dst, DevicePtr src, size_t nbytes, StreamId stream);
// Fills nbytes (a multiple of 4) with a 32-bit pattern.
void fill32(DevicePtr dst, uint32_t pattern, size_t nbytes, StreamId stream);

// Page-locked host memory (cuMemHostAlloc): the fast path for host<->device copies.
void* allocate_pinned(size_t nbytes);
void free_pinned(void* ptr);

}  // namespace kiln::cuda
