# Finds the CUDA toolkit (NVRTC) for the CUDA backend to come; nothing is built with it yet, and
# the backend will load CUDA with dlopen (no link-time dependency). KILN_CUDA=AUTO|ON|OFF.
set(KILN_HAVE_CUDA OFF)
if(NOT KILN_CUDA STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND AND TARGET CUDA::nvrtc)
    set(KILN_HAVE_CUDA ON)
  elseif(KILN_CUDA STREQUAL "ON")
    message(FATAL_ERROR "KILN_CUDA=ON but no CUDA toolkit with NVRTC was found")
  endif()
endif()
