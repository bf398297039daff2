// kiln_abi_alloc / free / parallel_for / errors: the non-op services generated code needs.

#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "kiln/runtime/abi.h"
#include "kiln/runtime/allocator.h"
#include "kiln/runtime/registry.h"
#include "kiln/runtime/thread_pool.h"

namespace {
thread_local std::string g_error;
thread_local bool g_has_error = false;

// Generated code nests leases only when compiled code runs inside a leased kernel call (the
// executor running a compiled region): a few levels. Deeper ones lend nothing but still balance.
constexpr int kMaxLeaseDepth = 8;
thread_local std::optional<kiln::ScratchLease> g_leases[kMaxLeaseDepth];
thread_local int g_lease_depth = 0;

bool leases_enabled() {
  static const bool enabled = [] {
    const char* e = std::getenv("KILN_ABI_NO_LEASE");
    return !(e && *e && std::strcmp(e, "0") != 0);
  }();
  return enabled;
}
}  // namespace

extern "C" {

void* kiln_abi_alloc(int64_t nbytes) {
  return kiln::cpu_allocator().allocate(static_cast<size_t>(nbytes > 0 ? nbytes : 1));
}

void kiln_abi_free(void* ptr, int64_t nbytes) {
  if (ptr) kiln::cpu_allocator().deallocate(ptr, static_cast<size_t>(nbytes > 0 ? nbytes : 1));
}

void kiln_abi_lease_begin(void* base, int64_t nbytes) {
  const int depth = g_lease_depth++;
  if (depth < kMaxLeaseDepth && leases_enabled() && base && nbytes > 0)
    g_leases[depth].emplace(base, static_cast<size_t>(nbytes));
}

void kiln_abi_lease_end(void) {
  if (g_lease_depth == 0) return;
  const int depth = --g_lease_depth;
  if (depth < kMaxLeaseDepth) g_leases[depth].reset();
}

void kiln_abi_parallel_for(int64_t begin, int64_t end, int64_t grain, kiln_abi_range_fn fn,
                           void* ctx) {
  kiln::parallel_for(begin, end, grain, [&](int64_t b, int64_t e) { fn(ctx, b, e); });
}

void kiln_abi_set_error(const char* message) {
  if (g_has_error) return;  // the first error is the cause; later ones are consequences
  g_has_error = true;
  g_error = message ? message : "unknown error";
}

char* kiln_abi_take_error(void) {
  if (!g_has_error) return nullptr;
  g_has_error = false;
  char* out = static_cast<char*>(std::malloc(g_error.size() + 1));
  std::memcpy(out, g_error.c_str(), g_error.size() + 1);
  return out;
}

void kiln_abi_free_error(char* message) {
  std::free(message);
}

}  // extern "C"

namespace kiln::rt {

void register_abi_core(Registry& r) {
  r.add_function("kiln_abi_alloc", reinterpret_cast<void*>(&kiln_abi_alloc));
  r.add_function("kiln_abi_free", reinterpret_cast<void*>(&kiln_abi_free));
  r.add_function("kiln_abi_lease_begin", reinterpret_cast<void*>(&kiln_abi_lease_begin));
  r.add_function("kiln_abi_lease_end", reinterpret_cast<void*>(&kiln_abi_lease_end));
  r.add_function("kiln_abi_parallel_for", reinterpret_cast<void*>(&kiln_abi_parallel_for));
  r.add_function("kiln_abi_set_error", reinterpret_cast<void*>(&kiln_abi_set_error));
  r.add_function("kiln_abi_take_error", reinterpret_cast<void*>(&kiln_abi_take_error));
  r.add_function("kiln_abi_free_error", reinterpret_cast<void*>(&kiln_abi_free_error));
}

}  // namespace kiln::rt
