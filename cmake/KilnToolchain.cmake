# Compiler cache, fast linker, warnings and the ISA baseline, applied to kiln's own targets only
# through the kiln_flags interface library (never globally, so LLVM's flags stay LLVM's).

find_program(KILN_CCACHE ccache)
if(KILN_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  set(CMAKE_C_COMPILER_LAUNCHER ${KILN_CCACHE})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${KILN_CCACHE})
endif()

find_program(KILN_LLD ld.lld)
# A cross gcc (aarch64-linux-gnu-g++) looks for its own prefixed linker: keep its bfd ld there.
if(KILN_LLD AND NOT CMAKE_CROSSCOMPILING)
  add_link_options(-fuse-ld=lld)
endif()
# Drop libraries nothing uses (CUDA driver among them) so binaries start on GPU-less machines.
add_link_options(-Wl,--as-needed)

add_library(kiln_flags INTERFACE)
target_compile_options(kiln_flags INTERFACE -Wall -Wextra -Wno-unused-parameter)
if(KILN_WARNINGS_AS_ERRORS)
  target_compile_options(kiln_flags INTERFACE -Werror)
endif()

set(KILN_ARCH_X86 OFF)
set(KILN_ARCH_AARCH64 OFF)
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  set(KILN_ARCH_X86 ON)
  target_compile_options(kiln_flags INTERFACE -march=${KILN_X86_BASELINE})
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64")
  set(KILN_ARCH_AARCH64 ON)
endif()
