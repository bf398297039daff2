// Host facts the loader matches an artifact against (architecture, CPU features) and loading of
// compiled code objects: an ELF shared object blob written to a memfd and dlopen'ed from
// /proc/self/fd, so nothing touches the file system.

#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kiln/runtime/target.h"
#include "model_impl.h"

namespace kiln::rt {

std::string_view host_arch() {
#if defined(__x86_64__)
  return "x86_64";
#elif defined(__aarch64__)
  return "aarch64";
#else
  return "unknown";
#endif
}

bool host_has_feature(std::string_view f) {
  return has_feature(host_target(), f);
}

CodeHandle::~CodeHandle() {
  if (handle) dlclose(handle);
  if (fd >= 0) close(fd);
}

std::unique_ptr<CodeHandle> load_code_object(const uint8_t* data, size_t size,
                                             const std::string& what) {
  constexpr uint8_t kElf[4] = {0x7f, 'E', 'L', 'F'};
  KILN_CHECK(size >= 64 && std::memcmp(data, kElf, 4) == 0, "kiln artifact", what,
             ": not an ELF shared object");
  auto code = std::make_unique<CodeHandle>();
  code->fd = memfd_create("kiln-code", MFD_CLOEXEC);
  KILN_CHECK(code->fd >= 0, "kiln artifact", what, ": memfd_create failed: ", std::strerror(errno));
  for (size_t done = 0; done < size;) {
    const ssize_t w = write(code->fd, data + done, size - done);
    KILN_CHECK(w > 0, "kiln artifact", what, ": writing the memfd failed: ", std::strerror(errno));
    done += static_cast<size_t>(w);
  }
  const std::string path = "/proc/self/fd/" + std::to_string(code->fd);
  code->handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  KILN_CHECK(code->handle, "kiln artifact", what, ": dlopen failed: ", dlerror());
  return code;
}

CompiledFn find_symbol(const CodeHandle& code, const std::string& symbol) {
  void* p = dlsym(code.handle, symbol.c_str());
  KILN_CHECK(p, "kiln artifact", "compiled symbol \"", symbol, "\" not found in its code object");
  return reinterpret_cast<CompiledFn>(p);
}

}  // namespace kiln::rt
