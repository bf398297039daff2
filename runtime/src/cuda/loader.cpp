// dlopen of the CUDA libraries and their error codes (see api.h). Without the toolkit's headers
// the backend is absent and no_cuda.cpp answers instead.
#if KILN_HAVE_CUDA
#include <dlfcn.h>

#include <cstdlib>
#include <vector>

#include "api.h"
#include "kiln/runtime/cuda/cuda.h"
#include "kiln/runtime/error.h"

namespace kiln::cuda::api {

namespace {

#define KILN_CUDA_STR2(x) #x
#define KILN_CUDA_STR(x) KILN_CUDA_STR2(x)  // expands cuMemAlloc to "cuMemAlloc_v2" first

// Resolves every member of `table` from `lib`; the first missing symbol is the error.
#define KILN_CUDA_RESOLVE(f)                                                   \
  table.f = reinterpret_cast<decltype(table.f)>(dlsym(lib, KILN_CUDA_STR(f))); \
  if (!table.f && missing.empty()) missing = KILN_CUDA_STR(f);

// Where the toolkit's libraries are looked for, in order: KILN_CUDA_LIB_DIR, the loader's
// path, the toolkit this was built against, /usr/local/cuda.
std::vector<std::string> candidates(const char* soname, const char* plain) {
  std::vector<std::string> out;
  for (const char* name : {soname, plain}) {
    if (const char* dir = std::getenv("KILN_CUDA_LIB_DIR"))
      out.push_back(std::string(dir) + "/" + name);
    out.push_back(name);
#ifdef KILN_CUDA_TOOLKIT_LIB_DIR
    out.push_back(std::string(KILN_CUDA_TOOLKIT_LIB_DIR) + "/" + name);
#endif
    out.push_back(std::string("/usr/local/cuda/lib64/") + name);
    out.push_back(std::string("/usr/local/cuda/lib/") + name);  // where the toolkit puts NCCL
  }
  return out;
}

void* open_first(const std::vector<std::string>& paths, std::string& error) {
  for (const std::string& p : paths) {
    if (void* lib = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL)) return lib;
  }
  error = "not found (looked for " + paths.front() +
          ", then in the loader's path, the build's "
          "toolkit and /usr/local/cuda/lib64 and lib; set KILN_CUDA_LIB_DIR)";
  return nullptr;
}

template <typename Table>
struct Loaded {
  Table table;
  std::string error;  // empty when loaded
};

struct DriverState {
  Driver table;
  std::string error;
  CUcontext context = nullptr;
  int index = 0;  // the device's ordinal
};

// KILN_CUDA_DEVICE, else the launcher's rank on this machine (torchrun's LOCAL_RANK, Open MPI's
// OMPI_COMM_WORLD_LOCAL_RANK, Slurm's SLURM_LOCALID, MPICH's MPI_LOCALRANKID) modulo the device
// count, so that the ranks of a process group on
// a machine with several GPUs take one each; else device 0.
int choose_device(int count, std::string& error) {
  auto read = [](const char* name, long& v) {
    const char* text = std::getenv(name);
    if (!text || !*text) return false;
    char* end = nullptr;
    v = std::strtol(text, &end, 10);
    return *end == '\0' && v >= 0;
  };
  long v = 0;
  if (std::getenv("KILN_CUDA_DEVICE")) {
    if (!read("KILN_CUDA_DEVICE", v) || v >= count) {
      error = "no CUDA device: KILN_CUDA_DEVICE='" + std::string(std::getenv("KILN_CUDA_DEVICE")) +
              "' is not a device ordinal below the device count " + std::to_string(count);
      return 0;
    }
    return static_cast<int>(v);
  }
  if (read("LOCAL_RANK", v) || read("OMPI_COMM_WORLD_LOCAL_RANK", v) || read("SLURM_LOCALID", v) ||
      read("MPI_LOCALRANKID", v)) {
    return static_cast<int>(v % count);
  }
  return 0;
}

DriverState load_driver() {
  DriverState s;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    s.error = "no CUDA device: the NVIDIA driver (libcuda.so.1) is not installed";
    return s;
  }
  Driver& table = s.table;
  std::string missing;
  KILN_CUDA_DRIVER_FUNCTIONS(KILN_CUDA_RESOLVE)
  if (!missing.empty()) {
    s.error = "no CUDA device: libcuda.so.1 lacks " + missing + " (a driver older than CUDA 12?)";
    return s;
  }
  CUresult r = table.cuInit(0);
  int count = 0;
  if (r == CUDA_SUCCESS) r = table.cuDeviceGetCount(&count);
  if (r != CUDA_SUCCESS || count == 0) {
    const char* name = nullptr;
    table.cuGetErrorName(r, &name);
    s.error = r == CUDA_SUCCESS ? "no CUDA device: the driver reports none"
                                : std::string("no CUDA device: cuInit failed: ") +
                                      (name ? name : "unknown error");
    return s;
  }
  s.index = choose_device(count, s.error);
  if (!s.error.empty()) return s;
  CUdevice dev = 0;
  r = table.cuDeviceGet(&dev, s.index);
  if (r == CUDA_SUCCESS) r = table.cuDevicePrimaryCtxRetain(&s.context, dev);
  if (r != CUDA_SUCCESS) {
    const char* name = nullptr;
    table.cuGetErrorName(r, &name);
    s.error = std::string("no CUDA device: cannot create a context: ") + (name ? name : "?");
  }
  return s;
}

const DriverState& driver_state() {
  static const DriverState state = load_driver();
  return state;
}

template <typename Table>
Loaded<Table> load_library(const char* soname, const char* plain,
                           void (*resolve)(void*, Table&, std::string&)) {
  Loaded<Table> l;
  void* lib = open_first(candidates(soname, plain), l.error);
  if (!lib) {
    l.error = std::string(plain) + " " + l.error;
    return l;
  }
  std::string missing;
  resolve(lib, l.table, missing);
  if (!missing.empty()) l.error = std::string(plain) + " lacks " + missing;
  return l;
}

void resolve_nvrtc(void* lib, Nvrtc& table, std::string& missing) {
  KILN_NVRTC_FUNCTIONS(KILN_CUDA_RESOLVE)
}
void resolve_cublaslt(void* lib, CublasLt& table, std::string& missing) {
  KILN_CUBLASLT_FUNCTIONS(KILN_CUDA_RESOLVE)
}
#if KILN_HAVE_CUDNN
void resolve_cudnn(void* lib, Cudnn& table, std::string& missing) {
  KILN_CUDNN_FUNCTIONS(KILN_CUDA_RESOLVE)
}
#endif

}  // namespace

const Driver& driver(std::string_view op) {
  const DriverState& s = driver_state();
  if (!s.error.empty()) [[unlikely]]
    fail(op, s.error);
  make_context_current(op);
  return s.table;
}

int device_ordinal(std::string_view op) {
  const DriverState& s = driver_state();
  if (!s.error.empty()) fail(op, s.error);
  return s.index;
}

void* open_toolkit_library(const char* soname, const char* plain, std::string& error) {
  return open_first(candidates(soname, plain), error);
}

void make_context_current(std::string_view op) {
  thread_local bool current = false;
  if (current) return;
  const DriverState& s = driver_state();
  if (!s.error.empty()) fail(op, s.error);
  check(s.table.cuCtxSetCurrent(s.context), op, "cuCtxSetCurrent");
  current = true;
}

const Nvrtc& nvrtc(std::string_view op) {
  static const Loaded<Nvrtc> l =
      load_library<Nvrtc>("libnvrtc.so.13", "libnvrtc.so", resolve_nvrtc);
  if (!l.error.empty()) fail(op, "NVRTC (CUDA's run-time compiler): ", l.error);
  return l.table;
}

const CublasLt& cublaslt(std::string_view op) {
  static const Loaded<CublasLt> l =
      load_library<CublasLt>("libcublasLt.so.13", "libcublasLt.so", resolve_cublaslt);
  if (!l.error.empty()) fail(op, "cuBLASLt: ", l.error);
  return l.table;
}

#if KILN_HAVE_CUDNN
const Cudnn& cudnn(std::string_view op) {
  static const Loaded<Cudnn> l = load_library<Cudnn>("libcudnn.so.9", "libcudnn.so", resolve_cudnn);
  if (!l.error.empty()) fail(op, "cuDNN 9: ", l.error);
  return l.table;
}

void check(cudnnStatus_t r, std::string_view op, std::string_view what) {
  if (r == CUDNN_STATUS_SUCCESS) [[likely]]
    return;
  const Cudnn& lib = cudnn(op);
  char message[512] = {};
  lib.cudnnGetLastErrorString(message, sizeof message);
  fail(op, what, " failed: ", lib.cudnnGetErrorString(r), message[0] ? ": " : "", message);
}
#endif

void check(CUresult r, std::string_view op, std::string_view what) {
  if (r == CUDA_SUCCESS) [[likely]]
    return;
  const char *name = nullptr, *text = nullptr;
  const Driver& d = driver_state().table;
  if (d.cuGetErrorName) d.cuGetErrorName(r, &name);
  if (d.cuGetErrorString) d.cuGetErrorString(r, &text);
  fail(op, what, " failed: ", name ? name : "CUDA error", " (", static_cast<int>(r),
       "): ", text ? text : "");
}

void check(nvrtcResult r, std::string_view op, std::string_view what) {
  if (r == NVRTC_SUCCESS) [[likely]]
    return;
  fail(op, what, " failed: ", nvrtc(op).nvrtcGetErrorString(r));
}

void check(cublasStatus_t r, std::string_view op, std::string_view what) {
  if (r == CUBLAS_STATUS_SUCCESS) [[likely]]
    return;
  fail(op, what, " failed: cuBLAS status ", static_cast<int>(r));
}

}  // namespace kiln::cuda::api

namespace kiln::cuda {

bool built_with_cuda() {
  return true;
}
bool is_available() {
  return api::driver_state().error.empty();
}
std::string unavailable_reason() {
  return api::driver_state().error;
}
void require_device(std::string_view op) {
  api::driver(op);
}

}  // namespace kiln::cuda
#endif  // KILN_HAVE_CUDA
