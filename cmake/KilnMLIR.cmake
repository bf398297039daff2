# LLVM/MLIR 19 from Debian. Link the shared libMLIR/libLLVM (one copy of each in a process, and
# links ten times faster than the static archives).
find_package(MLIR REQUIRED CONFIG HINTS /usr/lib/llvm-19/lib/cmake/mlir)
find_package(LLVM REQUIRED CONFIG HINTS ${MLIR_DIR}/../llvm /usr/lib/llvm-19/lib/cmake/llvm)
list(APPEND CMAKE_MODULE_PATH ${MLIR_CMAKE_DIR} ${LLVM_CMAKE_DIR})
include(TableGen)
include(AddLLVM)
include(AddMLIR)

separate_arguments(KILN_LLVM_DEFINITIONS NATIVE_COMMAND ${LLVM_DEFINITIONS})

# Everything that may see LLVM/MLIR links this instead of naming include dirs itself.
add_library(kiln_mlir_deps INTERFACE)
target_include_directories(kiln_mlir_deps SYSTEM INTERFACE ${LLVM_INCLUDE_DIRS} ${MLIR_INCLUDE_DIRS})
target_compile_definitions(kiln_mlir_deps INTERFACE ${KILN_LLVM_DEFINITIONS})
if(NOT LLVM_ENABLE_RTTI)
  target_compile_options(kiln_mlir_deps INTERFACE -fno-rtti)
endif()
target_link_directories(kiln_mlir_deps INTERFACE ${LLVM_LIBRARY_DIR})
target_link_libraries(kiln_mlir_deps INTERFACE MLIR LLVM)

find_program(KILN_FILECHECK FileCheck HINTS ${LLVM_TOOLS_BINARY_DIR} /usr/lib/llvm-19/bin REQUIRED)
find_program(KILN_NOT not HINTS ${LLVM_TOOLS_BINARY_DIR} /usr/lib/llvm-19/bin)
message(STATUS "MLIR ${LLVM_PACKAGE_VERSION} from ${MLIR_DIR}; FileCheck ${KILN_FILECHECK}")
