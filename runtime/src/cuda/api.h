#pragma once
// The CUDA libraries' entry points, loaded with dlopen at first use (never linked): the driver
// (libcuda.so.1, from the NVIDIA driver), NVRTC, cuBLASLt and cuDNN (from the toolkit). The
// toolkit's headers give the types; the symbol names are those the headers' macros select
// (cuMemAlloc is cuMemAlloc_v2), so a table member is called exactly as the plain API would be.
// Only built with the toolkit's headers (KILN_HAVE_CUDA).

#include <cublasLt.h>
#include <cuda.h>
#include <nvrtc.h>

// cuDNN's graph API (cuDNN 9; its headers sit beside the toolkit's where cuDNN is installed).
#if __has_include(<cudnn_graph.h>)
#include <cudnn_graph.h>
#define KILN_HAVE_CUDNN 1
#else
#define KILN_HAVE_CUDNN 0
#endif

#include <string>
#include <string_view>

namespace kiln::cuda::api {

#define KILN_CUDA_DRIVER_FUNCTIONS(X)                                                             \
  X(cuInit)                                                                                       \
  X(cuDriverGetVersion)                                                                           \
  X(cuDeviceGetCount)                                                                             \
  X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute) X(cuDeviceTotalMem)                   \
      X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent) X(cuCtxSynchronize) X(cuMemAlloc)            \
          X(cuMemFree) X(cuMemGetInfo) X(cuMemHostAlloc) X(cuMemFreeHost) X(cuMemcpyHtoDAsync)    \
              X(cuMemcpyDtoHAsync) X(cuMemcpyDtoDAsync) X(cuMemsetD32Async) X(cuStreamCreate)     \
                  X(cuStreamDestroy) X(cuStreamSynchronize) X(cuStreamWaitEvent) X(cuEventCreate) \
                      X(cuEventDestroy) X(cuEventRecord) X(cuEventSynchronize)                    \
                          X(cuEventElapsedTime) X(cuModuleLoadData) X(cuModuleUnload)             \
                              X(cuModuleGetFunction) X(cuLaunchKernel) X(cuGetErrorName)          \
                                  X(cuGetErrorString)

#define KILN_NVRTC_FUNCTIONS(X)                                                                  \
  X(nvrtcVersion)                                                                                \
  X(nvrtcCreateProgram)                                                                          \
  X(nvrtcDestroyProgram)                                                                         \
  X(nvrtcCompileProgram) X(nvrtcGetPTXSize) X(nvrtcGetPTX) X(nvrtcGetCUBINSize) X(nvrtcGetCUBIN) \
      X(nvrtcGetProgramLogSize) X(nvrtcGetProgramLog) X(nvrtcGetErrorString)

#define KILN_CUBLASLT_FUNCTIONS(X)                                                       \
  X(cublasLtCreate)                                                                      \
  X(cublasLtDestroy)                                                                     \
  X(cublasLtGetVersion)                                                                  \
  X(cublasLtMatmul) X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy)             \
      X(cublasLtMatmulDescSetAttribute) X(cublasLtMatrixLayoutCreate)                    \
          X(cublasLtMatrixLayoutDestroy) X(cublasLtMatmulPreferenceCreate)               \
              X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulPreferenceSetAttribute) \
                  X(cublasLtMatmulAlgoGetHeuristic)

#define KILN_CUDNN_FUNCTIONS(X)                                                                \
  X(cudnnGetVersion)                                                                           \
  X(cudnnCreate)                                                                               \
  X(cudnnDestroy)                                                                              \
  X(cudnnSetStream) X(cudnnGetErrorString) X(cudnnGetLastErrorString)                          \
      X(cudnnBackendCreateDescriptor) X(cudnnBackendDestroyDescriptor) X(cudnnBackendFinalize) \
          X(cudnnBackendSetAttribute) X(cudnnBackendGetAttribute) X(cudnnBackendExecute)

#define KILN_CUDA_MEMBER(f) decltype(&::f) f = nullptr;

struct Driver {
  KILN_CUDA_DRIVER_FUNCTIONS(KILN_CUDA_MEMBER)
};
struct Nvrtc {
  KILN_NVRTC_FUNCTIONS(KILN_CUDA_MEMBER)
};
struct CublasLt {
  KILN_CUBLASLT_FUNCTIONS(KILN_CUDA_MEMBER)
};
#if KILN_HAVE_CUDNN
struct Cudnn {
  KILN_CUDNN_FUNCTIONS(KILN_CUDA_MEMBER)
};
#endif

// Loaded and initialized once (cuInit, the device's primary context current on the calling thread);
// throws kiln::Error(op, "no CUDA device: <why>") where there is none.
const Driver& driver(std::string_view op);
// The toolkit libraries: throw kiln::Error(op, "<library> not found: <where it looked>").
const Nvrtc& nvrtc(std::string_view op);
const CublasLt& cublaslt(std::string_view op);
#if KILN_HAVE_CUDNN
// libcudnn.so.9 (cuDNN 9: the graph API); throws kiln::Error(op, "cuDNN ... not found: ...").
const Cudnn& cudnn(std::string_view op);
// Throws kiln::Error(op, "<what> failed: CUDNN_STATUS_...: <cuDNN's last message>").
void check(cudnnStatus_t r, std::string_view op, std::string_view what);
#endif

// Throws kiln::Error(op, "<what> failed: CUDA_ERROR_...: <description>") unless r is success.
void check(CUresult r, std::string_view op, std::string_view what);
void check(nvrtcResult r, std::string_view op, std::string_view what);
void check(cublasStatus_t r, std::string_view op, std::string_view what);

// Makes the device's primary context current on this thread (each new thread needs it once).
void make_context_current(std::string_view op);
// The ordinal of the device this process uses (see cuda.h's device_info).
int device_ordinal(std::string_view op);
// dlopen of a toolkit library from the places NVRTC is looked for; null with `error` set.
void* open_toolkit_library(const char* soname, const char* plain, std::string& error);

}  // namespace kiln::cuda::api
