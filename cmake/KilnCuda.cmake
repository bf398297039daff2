# Finds the CUDA toolkit for the CUDA backend (runtime/src/cuda). Only its headers are used at build
# time; the driver, NVRTC and cuBLASLt are loaded with dlopen at first use (no link-time
# dependency), so binaries start on machines without CUDA. KILN_CUDA=AUTO|ON|OFF.
set(KILN_HAVE_CUDA OFF)
# A cross build (arm64 runtime) would find the host's x86 toolkit: CUDA only when asked for.
if(CMAKE_CROSSCOMPILING AND KILN_CUDA STREQUAL "AUTO")
  set(KILN_CUDA OFF)
endif()
if(NOT KILN_CUDA STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND AND TARGET CUDA::nvrtc)
    set(KILN_HAVE_CUDA ON)
  elseif(KILN_CUDA STREQUAL "ON")
    message(FATAL_ERROR "KILN_CUDA=ON but no CUDA toolkit with NVRTC was found")
  endif()
endif()
