// NVRTC compilation and the kernel caches (see kiln/runtime/cuda/compile.h).
#include "kiln/runtime/cuda/compile.h"

namespace kiln::cuda {
uint64_t source_hash(std::string_view text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}
}  // namespace kiln::cuda

#if KILN_HAVE_CUDA

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <vector>

#include <unistd.h>

#include "api.h"
#include "kiln/runtime/cuda/cuda.h"
#include "kiln/runtime/error.h"

namespace kiln::cuda {

namespace {

struct Cache {
  std::mutex mutex;
  std::unordered_map<std::string, std::unique_ptr<Kernel>> kernels;  // key: hash-arch-name
  std::unordered_map<std::string, CUmodule> modules;                 // key: hash-arch
  KernelCacheStats stats;
};
Cache& cache() {
  static Cache* c = new Cache();  // modules stay loaded for the process
  return *c;
}

std::filesystem::path cache_dir() {
  const char* env = std::getenv("KILN_CACHE_DIR");
  if (env && std::string_view(env) == "off") return {};
  if (env && *env) return std::filesystem::path(env) / "cuda";
  const char* home = std::getenv("HOME");
  if (!home || !*home) return {};
  return std::filesystem::path(home) / ".cache" / "kiln" / "cuda";
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return {};
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// Written to a temporary name and renamed, so concurrent processes never read half a file.
void write_file_atomically(const std::filesystem::path& p, const std::string& bytes) {
  std::error_code ec;
  std::filesystem::create_directories(p.parent_path(), ec);
  if (ec) return;  // a read-only home only costs the next process a compile
  std::filesystem::path tmp = p;
  tmp += ".tmp" + std::to_string(static_cast<long>(::getpid()));
  {
    std::ofstream out(tmp, std::ios::binary);
    if (!out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()))) return;
  }
  std::filesystem::rename(tmp, p, ec);
}

// A cubin starts with the ELF magic; anything else in the cache is ignored and recompiled.
bool looks_like_elf(const std::string& bytes) {
  return bytes.size() > 64 && bytes.compare(0, 4,
                                            "\x7f"
                                            "ELF") == 0;
}

}  // namespace

std::string nvrtc_version() {
  int major = 0, minor = 0;
  api::check(api::nvrtc("nvrtc").nvrtcVersion(&major, &minor), "nvrtc", "nvrtcVersion");
  return std::to_string(major) + "." + std::to_string(minor);
}

CompiledCode compile(std::string_view op, const std::string& source, const std::string& arch) {
  const api::Nvrtc& n = api::nvrtc(op);
  nvrtcProgram prog = nullptr;
  api::check(n.nvrtcCreateProgram(&prog, source.c_str(), "kiln_generated.cu", 0, nullptr, nullptr),
             op, "nvrtcCreateProgram");
  std::unique_ptr<_nvrtcProgram, void (*)(_nvrtcProgram*)> guard(
      prog, [](_nvrtcProgram* p) { api::nvrtc("nvrtc").nvrtcDestroyProgram(&p); });
  const std::string arch_flag = "--gpu-architecture=" + arch;
  // Device code by default (the shared formulas are plain C++ functions); IEEE division and
  // square root as on the CPU; fused multiply-add is the CUDA default, as in PyTorch's kernels.
  const char* options[] = {arch_flag.c_str(), "--std=c++17", "--device-as-default-execution-space",
                           "-DKILN_NVRTC=1"};
  nvrtcResult r = n.nvrtcCompileProgram(prog, 4, options);
  CompiledCode out;
  size_t log_size = 0;
  n.nvrtcGetProgramLogSize(prog, &log_size);
  if (log_size > 1) {
    out.log.resize(log_size);
    n.nvrtcGetProgramLog(prog, out.log.data());
    out.log.resize(log_size - 1);
  }
  if (r != NVRTC_SUCCESS) {
    fail(op, "NVRTC could not compile the generated kernel for ", arch, " (",
         n.nvrtcGetErrorString(r), "):\n", out.log, "\n--- source ---\n", source);
  }
  size_t size = 0;
  api::check(n.nvrtcGetPTXSize(prog, &size), op, "nvrtcGetPTXSize");
  out.ptx.resize(size);
  api::check(n.nvrtcGetPTX(prog, out.ptx.data()), op, "nvrtcGetPTX");
  if (!out.ptx.empty() && out.ptx.back() == '\0') out.ptx.pop_back();
  api::check(n.nvrtcGetCUBINSize(prog, &size), op, "nvrtcGetCUBINSize");
  out.cubin.resize(size);
  api::check(n.nvrtcGetCUBIN(prog, out.cubin.data()), op, "nvrtcGetCUBIN");
  return out;
}

const Kernel& kernel(std::string_view op, const std::string& source, const std::string& name) {
  const api::Driver& d = api::driver(op);
  const std::string arch = device_info().arch();
  char key_hex[17];
  std::snprintf(key_hex, sizeof key_hex, "%016llx",
                static_cast<unsigned long long>(source_hash(source)));
  const std::string key = std::string(key_hex) + "-" + arch;
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  const std::string full_key = key + "-" + name;
  if (auto it = c.kernels.find(full_key); it != c.kernels.end()) {
    ++c.stats.from_memory;
    return *it->second;
  }
  CUmodule& module = c.modules[key];
  if (!module) {
    // The disk cache's key includes NVRTC's version: a new toolkit recompiles.
    std::filesystem::path dir = cache_dir();
    std::filesystem::path file;
    std::string cubin;
    if (!dir.empty()) {
      file = dir / (key + "-nvrtc" + nvrtc_version() + ".cubin");
      cubin = read_file(file);
      if (!looks_like_elf(cubin)) cubin.clear();
    }
    if (cubin.empty()) {
      cubin = compile(op, source, arch).cubin;
      ++c.stats.compiled;
      if (!file.empty()) write_file_atomically(file, cubin);
    } else {
      ++c.stats.from_disk;
    }
    CUmodule loaded = nullptr;
    api::check(d.cuModuleLoadData(&loaded, cubin.data()), op, "cuModuleLoadData");
    module = loaded;
  }
  auto k = std::make_unique<Kernel>();
  CUfunction f = nullptr;
  api::check(d.cuModuleGetFunction(&f, module, name.c_str()), op,
             "cuModuleGetFunction(" + name + ")");
  k->function = f;
  return *c.kernels.emplace(full_key, std::move(k)).first->second;
}

KernelCacheStats kernel_cache_stats() {
  std::lock_guard lock(cache().mutex);
  return cache().stats;
}

void Kernel::launch(std::string_view op, unsigned grid, unsigned block, void** args,
                    StreamId stream, unsigned shared_bytes) const {
  const api::Driver& d = api::driver(op);
  api::check(
      d.cuLaunchKernel(static_cast<CUfunction>(function), grid, 1, 1, block, 1, 1, shared_bytes,
                       reinterpret_cast<CUstream>(static_cast<uintptr_t>(stream)), args, nullptr),
      op, "cuLaunchKernel");
}

}  // namespace kiln::cuda
#endif  // KILN_HAVE_CUDA
