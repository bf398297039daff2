#pragma once
// Run-time compilation of generated CUDA C with NVRTC, and the kernels it yields: compiled once
// per (source, device arch), kept in memory and in an on-disk cache so a second process skips
// NVRTC. NVRTC is loaded with dlopen; compile() needs no device (CI compiles for sm_90 without
// one), kernel() does.

#include <cstdint>
#include <string>
#include <string_view>

#include "kiln/runtime/cuda/caching_allocator.h"

namespace kiln::cuda {

struct CompiledCode {
  std::string ptx;
  std::string cubin;  // an ELF for `arch`
  std::string log;    // NVRTC's messages (warnings)
};
// Compiles `source` for `arch` ("sm_90"). A source NVRTC refuses throws kiln::Error(op, "NVRTC
// could not compile the generated kernel: <log>").
CompiledCode compile(std::string_view op, const std::string& source, const std::string& arch);
// NVRTC's version, "13.0"; throws where NVRTC is not found.
std::string nvrtc_version();

// A kernel compiled for the process's device.
class Kernel {
 public:
  // args: pointers to each parameter's value, as cuLaunchKernel takes them.
  void launch(std::string_view op, unsigned grid, unsigned block, void** args, StreamId stream,
              unsigned shared_bytes = 0) const;
  void* function = nullptr;  // CUfunction
};
// The kernel `name` of `source` for this device: from memory, else from the disk cache
// ($KILN_CACHE_DIR/cuda, else $HOME/.cache/kiln/cuda; KILN_CACHE_DIR=off disables it), else NVRTC.
// Thread-safe; the returned reference lives as long as the process.
const Kernel& kernel(std::string_view op, const std::string& source, const std::string& name);

struct KernelCacheStats {
  int64_t compiled = 0;     // NVRTC runs
  int64_t from_disk = 0;    // cubins read from the disk cache
  int64_t from_memory = 0;  // lookups answered in memory
};
KernelCacheStats kernel_cache_stats();

// 64-bit FNV-1a of `text` (the cache key's source half).
uint64_t source_hash(std::string_view text);

}  // namespace kiln::cuda
