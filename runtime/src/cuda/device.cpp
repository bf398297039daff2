// Device properties, streams, events, copies, pinned memory and the device allocator's source.
#if KILN_HAVE_CUDA
#include <cstdio>
#include <mutex>

#include "api.h"
#include "kiln/runtime/cuda/cuda.h"
#include "kiln/runtime/error.h"

namespace kiln::cuda {

namespace {

constexpr std::string_view kOp = "cuda";

CUstream stream_of(StreamId id) {
  return reinterpret_cast<CUstream>(static_cast<uintptr_t>(id));
}

DeviceInfo read_device_info() {
  const api::Driver& d = api::driver(kOp);
  DeviceInfo info;
  CUdevice dev = 0;
  info.index = api::device_ordinal(kOp);
  api::check(d.cuDeviceGet(&dev, info.index), kOp, "cuDeviceGet");
  char name[256] = {};
  api::check(d.cuDeviceGetName(name, sizeof name, dev), kOp, "cuDeviceGetName");
  info.name = name;
  auto attr = [&](CUdevice_attribute a) {
    int v = 0;
    api::check(d.cuDeviceGetAttribute(&v, a, dev), kOp, "cuDeviceGetAttribute");
    return v;
  };
  info.major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  info.minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  info.multiprocessors = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  info.l2_bytes = attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
  api::check(d.cuDeviceTotalMem(&info.total_memory, dev), kOp, "cuDeviceTotalMem");
  api::check(d.cuDriverGetVersion(&info.driver_version), kOp, "cuDriverGetVersion");
  return info;
}

std::string gib(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / (1 << 30));
  return buf;
}

// cuMemAlloc under the caching allocator.
class DriverMemory final : public DeviceMemorySource {
 public:
  DevicePtr allocate(size_t nbytes) override {
    const api::Driver& d = api::driver("cuda allocator");
    CUdeviceptr p = 0;
    CUresult r = d.cuMemAlloc(&p, nbytes);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) return 0;
    api::check(r, "cuda allocator", "cuMemAlloc");
    return p;
  }
  void free(DevicePtr ptr, size_t) override {
    api::check(api::driver("cuda allocator").cuMemFree(ptr), "cuda allocator", "cuMemFree");
  }
  std::string describe_memory() override {
    size_t free_bytes = 0, total = 0;
    if (api::driver("cuda allocator").cuMemGetInfo(&free_bytes, &total) != CUDA_SUCCESS) return {};
    return "the device has " + gib(free_bytes) + " free of " + gib(total);
  }
};

}  // namespace

const DeviceInfo& device_info() {
  static const DeviceInfo info = read_device_info();
  return info;
}

Stream::Stream() {
  CUstream s = nullptr;
  api::check(api::driver(kOp).cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), kOp, "cuStreamCreate");
  id_ = reinterpret_cast<uintptr_t>(s);
}
Stream::~Stream() {
  if (id_) api::driver(kOp).cuStreamDestroy(stream_of(id_));
}
void Stream::synchronize() const {
  cuda::synchronize(id_);
}

StreamId current_stream() {
  static Stream* eager = new Stream();  // lives as long as the process: ops may run at exit
  return eager->id();
}

void synchronize(StreamId stream) {
  api::check(api::driver(kOp).cuStreamSynchronize(stream_of(stream)), kOp, "cuStreamSynchronize");
}

Event::Event() {
  CUevent e = nullptr;
  api::check(api::driver(kOp).cuEventCreate(&e, CU_EVENT_DEFAULT), kOp, "cuEventCreate");
  event_ = e;
}
Event::~Event() {
  if (event_) api::driver(kOp).cuEventDestroy(static_cast<CUevent>(event_));
}
void Event::record(StreamId stream) {
  api::check(api::driver(kOp).cuEventRecord(static_cast<CUevent>(event_), stream_of(stream)), kOp,
             "cuEventRecord");
}
void Event::synchronize() const {
  api::check(api::driver(kOp).cuEventSynchronize(static_cast<CUevent>(event_)), kOp,
             "cuEventSynchronize");
}
void Event::block(StreamId stream) const {
  api::check(api::driver(kOp).cuStreamWaitEvent(stream_of(stream), static_cast<CUevent>(event_), 0),
             kOp, "cuStreamWaitEvent");
}
float Event::elapsed_ms(const Event& end) const {
  float ms = 0;
  api::check(api::driver(kOp).cuEventElapsedTime(&ms, static_cast<CUevent>(event_),
                                                 static_cast<CUevent>(end.event_)),
             kOp, "cuEventElapsedTime");
  return ms;
}

CachingAllocator& device_allocator() {
  // Never destroyed: tensors freed during static destruction still return their blocks.
  static DriverMemory* source = new DriverMemory();
  static CachingAllocator* allocator = new CachingAllocator(*source);
  return *allocator;
}

void copy_to_device(DevicePtr dst, const void* src, size_t nbytes, StreamId stream) {
  if (nbytes == 0) return;
  const api::Driver& d = api::driver("copy to cuda");
  api::check(d.cuMemcpyHtoDAsync(dst, src, nbytes, stream_of(stream)), "copy to cuda",
             "cuMemcpyHtoDAsync");
  synchronize(stream);
}
void copy_to_host(void* dst, DevicePtr src, size_t nbytes, StreamId stream) {
  if (nbytes == 0) return;
  const api::Driver& d = api::driver("copy to cpu");
  api::check(d.cuMemcpyDtoHAsync(dst, src, nbytes, stream_of(stream)), "copy to cpu",
             "cuMemcpyDtoHAsync");
  synchronize(stream);
}
void copy_device_to_device(DevicePtr dst, DevicePtr src, size_t nbytes, StreamId stream) {
  if (nbytes == 0) return;
  api::check(api::driver("copy").cuMemcpyDtoDAsync(dst, src, nbytes, stream_of(stream)), "copy",
             "cuMemcpyDtoDAsync");
}
void copy_to_device_async(DevicePtr dst, const void* pinned_src, size_t nbytes, StreamId stream) {
  if (nbytes == 0) return;
  api::check(
      api::driver("copy to cuda").cuMemcpyHtoDAsync(dst, pinned_src, nbytes, stream_of(stream)),
      "copy to cuda", "cuMemcpyHtoDAsync");
}
void copy_to_host_async(void* pinned_dst, DevicePtr src, size_t nbytes, StreamId stream) {
  if (nbytes == 0) return;
  api::check(
      api::driver("copy to cpu").cuMemcpyDtoHAsync(pinned_dst, src, nbytes, stream_of(stream)),
      "copy to cpu", "cuMemcpyDtoHAsync");
}
void fill32(DevicePtr dst, uint32_t pattern, size_t nbytes, StreamId stream) {
  KILN_CHECK(nbytes % 4 == 0, "fill", "expected a multiple of 4 bytes, got ", nbytes);
  if (nbytes == 0) return;
  api::check(api::driver("fill").cuMemsetD32Async(dst, pattern, nbytes / 4, stream_of(stream)),
             "fill", "cuMemsetD32Async");
}

void* allocate_pinned(size_t nbytes) {
  void* p = nullptr;
  api::check(api::driver("pinned memory").cuMemHostAlloc(&p, nbytes ? nbytes : 1, 0),
             "pinned memory", "cuMemHostAlloc");
  return p;
}
void free_pinned(void* ptr) {
  if (ptr)
    api::check(api::driver("pinned memory").cuMemFreeHost(ptr), "pinned memory", "cuMemFreeHost");
}

}  // namespace kiln::cuda
#endif  // KILN_HAVE_CUDA
