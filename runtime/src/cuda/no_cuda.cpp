// A build without CUDA's headers: the backend's entry points answer "built without CUDA".
#if !KILN_HAVE_CUDA
#include "kiln/runtime/cuda/compile.h"
#include "kiln/runtime/cuda/cuda.h"
#include "kiln/runtime/cuda/matmul.h"
#include "kiln/runtime/cuda/nn.h"
#include "kiln/runtime/error.h"

namespace kiln::cuda {

namespace {
constexpr const char* kWhy =
    "no CUDA device: kiln was built without CUDA (the toolkit's headers were not found; "
    "configure with KILN_CUDA=ON and CUDA installed)";
[[noreturn]] void absent(std::string_view op) {
  fail(op, kWhy);
}
}  // namespace

bool built_with_cuda() {
  return false;
}
bool is_available() {
  return false;
}
std::string unavailable_reason() {
  return kWhy;
}
void require_device(std::string_view op) {
  absent(op);
}
const DeviceInfo& device_info() {
  absent("cuda");
}
Stream::Stream() {
  absent("cuda");
}
Stream::~Stream() = default;
void Stream::synchronize() const {}
StreamId current_stream() {
  absent("cuda");
}
void synchronize(StreamId) {
  absent("cuda");
}
Event::Event() {
  absent("cuda");
}
Event::~Event() = default;
void Event::record(StreamId) {}
void Event::synchronize() const {}
void Event::block(StreamId) const {}
float Event::elapsed_ms(const Event&) const {
  return 0;
}
CachingAllocator& device_allocator() {
  absent("cuda allocator");
}
void copy_to_device(DevicePtr, const void*, size_t, StreamId) {
  absent("copy to cuda");
}
void copy_to_host(void*, DevicePtr, size_t, StreamId) {
  absent("copy to cpu");
}
void copy_device_to_device(DevicePtr, DevicePtr, size_t, StreamId) {
  absent("copy");
}
void copy_to_device_async(DevicePtr, const void*, size_t, StreamId) {
  absent("copy to cuda");
}
void copy_to_host_async(void*, DevicePtr, size_t, StreamId) {
  absent("copy to cpu");
}
void fill32(DevicePtr, uint32_t, size_t, StreamId) {
  absent("fill");
}
void* allocate_pinned(size_t) {
  absent("pinned memory");
}
void free_pinned(void*) {}
CompiledCode compile(std::string_view op, const std::string&, const std::string&) {
  absent(op);
}
std::string nvrtc_version() {
  absent("nvrtc");
}
const Kernel& kernel(std::string_view op, const std::string&, const std::string&) {
  absent(op);
}
void Kernel::launch(std::string_view op, unsigned, unsigned, void**, StreamId, unsigned) const {
  absent(op);
}
KernelCacheStats kernel_cache_stats() {
  return {};
}
MatmulOptions& matmul_options() {
  static MatmulOptions options;
  return options;
}
void matmul_out(const TensorImpl&, const TensorImpl&, const TensorImpl*, bool, TensorImpl&,
                const MatmulOptions&, StreamId) {
  absent("matmul");
}

ConvOptions& conv_options() {
  static ConvOptions options;
  return options;
}
std::string cudnn_version() {
  absent("cudnn");
}
void conv2d_out(const TensorImpl&, const TensorImpl&, const TensorImpl*,
                const kernels::Conv2dParams&, bool, TensorImpl&) {
  absent("conv2d");
}
void conv2d_backward_out(const TensorImpl&, const TensorImpl&, const TensorImpl&,
                         const kernels::Conv2dParams&, TensorImpl*, TensorImpl*, TensorImpl*) {
  absent("conv2d_backward");
}

}  // namespace kiln::cuda
#endif  // !KILN_HAVE_CUDA
