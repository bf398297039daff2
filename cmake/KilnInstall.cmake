# `cmake --install`: libraries, headers, the kiln and kiln-opt tools, a CMake package
# (find_package(kiln)) and pkg-config files. Three entry points, each with what it needs only:
#   kiln::runtime  (kiln-runtime.pc)  load and run .kiln artifacts; no LLVM (DESIGN.md §2)
#   kiln::kiln     (kiln.pc)          eager tensors, autograd, nn, optim, data, serialization
#   kiln::jit      (kiln-jit.pc)      trace, passes, compile, save, AOT; needs LLVM/MLIR 19
# The other libraries are exported for the link line only (kiln::kiln_ir, ...).
include(CMakePackageConfigHelpers)

set_target_properties(kiln_runtime PROPERTIES EXPORT_NAME runtime)
set(KILN_EXPORTED kiln_runtime kiln_aot_main kiln_flags kiln)
set(KILN_TOOLS kiln_cli)
if(KILN_WITH_MLIR)
  set_target_properties(kiln_jit PROPERTIES EXPORT_NAME jit)
  list(APPEND KILN_EXPORTED kiln_mlir_deps kiln_schema kiln_ir kiln_passes kiln_codegen kiln_trace
       kiln_jit)
  list(APPEND KILN_TOOLS kiln-opt)
endif()
# ONNX import (kiln::jit::import_onnx) when it was built: kiln::jit links it and protobuf.
set(KILN_CONFIG_WITH_ONNX OFF)
if(KILN_WITH_MLIR AND TARGET kiln_onnx)
  list(APPEND KILN_EXPORTED kiln_onnx)
  set(KILN_CONFIG_WITH_ONNX ON)
endif()
install(TARGETS ${KILN_EXPORTED} EXPORT kilnTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS ${KILN_TOOLS} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# Headers, each library's public folder merged under include/kiln.
set(KILN_HEADER_DIRS runtime/include/kiln frontend/include/kiln)
if(KILN_WITH_MLIR)
  list(APPEND KILN_HEADER_DIRS ir/include/kiln passes/include/kiln codegen/include/kiln
       frontend/trace/include/kiln frontend/jit/include/kiln)
endif()
if(KILN_CONFIG_WITH_ONNX)
  list(APPEND KILN_HEADER_DIRS frontend/onnx/include/kiln)
endif()
foreach(dir ${KILN_HEADER_DIRS})
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
          FILES_MATCHING PATTERN "*.h")
endforeach()
# Generated from the op schema: abi.h and kernels/elementwise.h include them; the dialect's
# headers include the ODS output.
install(FILES ${PROJECT_BINARY_DIR}/runtime/include/kiln/runtime/abi_ops.inc
              ${PROJECT_BINARY_DIR}/runtime/include/kiln/runtime/unary_ops.inc
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kiln/runtime)
if(KILN_WITH_MLIR)
  install(FILES ${PROJECT_BINARY_DIR}/ir/include/kiln/ir/KilnDialect.h.inc
                ${PROJECT_BINARY_DIR}/ir/include/kiln/ir/KilnEnums.h.inc
                ${PROJECT_BINARY_DIR}/ir/include/kiln/ir/KilnOps.h.inc
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kiln/ir)
endif()
install(FILES ${PROJECT_SOURCE_DIR}/runtime/schema/kiln.fbs
        DESTINATION ${CMAKE_INSTALL_DATADIR}/kiln)
install(EXPORT kilnTargets NAMESPACE kiln:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)

# kiln_RUNTIME_DIR: where compile_aot finds libkiln_runtime.a and libkiln_aot_main.a of a
# relocated install (AotOptions::runtime_dir).
set(KILN_CONFIG_WITH_MLIR ${KILN_WITH_MLIR})
file(WRITE ${PROJECT_BINARY_DIR}/kilnConfig.cmake.in [=[
@PACKAGE_INIT@
include(CMakeFindDependencyMacro)
find_dependency(Threads)
find_dependency(ZLIB)
set(kiln_WITH_MLIR @KILN_CONFIG_WITH_MLIR@)
if(kiln_WITH_MLIR)
  find_dependency(MLIR CONFIG HINTS "@MLIR_DIR@")
endif()
if(@KILN_CONFIG_WITH_ONNX@)
  find_dependency(Protobuf)
endif()
include("${CMAKE_CURRENT_LIST_DIR}/kilnTargets.cmake")
set_and_check(kiln_RUNTIME_DIR "@PACKAGE_CMAKE_INSTALL_LIBDIR@")
set_and_check(kiln_TOOLS_DIR "@PACKAGE_CMAKE_INSTALL_BINDIR@")
# The name the runtime had before kiln::kiln and kiln::jit were installed.
if(NOT TARGET kiln::kiln_runtime)
  add_library(kiln::kiln_runtime ALIAS kiln::runtime)
endif()
set(kiln_jit_FOUND ${kiln_WITH_MLIR})
set(kiln_runtime_FOUND TRUE)
set(kiln_kiln_FOUND TRUE)
check_required_components(kiln)
]=])
configure_package_config_file(${PROJECT_BINARY_DIR}/kilnConfig.cmake.in
  ${PROJECT_BINARY_DIR}/kilnConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kiln
  PATH_VARS CMAKE_INSTALL_LIBDIR CMAKE_INSTALL_BINDIR)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kilnConfig.cmake ${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)

# pkg-config: the libraries are static C++, so C users of the runtime also need the C++ runtime.
set(KILN_PC_PREFIX [=[prefix=${pcfiledir}/../..
libdir=${prefix}/@CMAKE_INSTALL_LIBDIR@
includedir=${prefix}/@CMAKE_INSTALL_INCLUDEDIR@
]=])
file(WRITE ${PROJECT_BINARY_DIR}/kiln-runtime.pc.in "${KILN_PC_PREFIX}" [=[
Name: kiln-runtime
Description: kiln runtime: load and run .kiln artifacts (C and C++ APIs)
Version: @PROJECT_VERSION@
Cflags: -I${includedir}
Libs: -L${libdir} -lkiln_runtime -lstdc++ -lm -lpthread -ldl
]=])
file(WRITE ${PROJECT_BINARY_DIR}/kiln.pc.in "${KILN_PC_PREFIX}" [=[
Name: kiln
Description: kiln eager C++ API: tensors, autograd, nn, optim, data, serialization
Version: @PROJECT_VERSION@
Requires: kiln-runtime = @PROJECT_VERSION@
Cflags: -I${includedir} -std=c++20
Libs: -L${libdir} -lkiln -lz
]=])
set(KILN_PC_FILES kiln-runtime kiln)
if(KILN_WITH_MLIR)
  # LLVM's definitions and include folder: kiln/jit's headers take an mlir::ModuleOp.
  list(JOIN KILN_LLVM_DEFINITIONS " " KILN_PC_LLVM_CFLAGS)
  set(KILN_PC_ONNX_LIBS "")
  if(KILN_CONFIG_WITH_ONNX)  # kiln_onnx after kiln_jit (it uses it); protobuf after both
    string(APPEND KILN_PC_LLVM_CFLAGS " -DKILN_JIT_HAVE_ONNX=1")
    set(KILN_PC_ONNX_LIBS " -lkiln_onnx -lprotobuf")
  endif()
  set(KILN_PC_LLVM_INCLUDES "")
  foreach(dir ${LLVM_INCLUDE_DIRS} ${MLIR_INCLUDE_DIRS})
    string(APPEND KILN_PC_LLVM_INCLUDES " -I${dir}")
  endforeach()
  file(WRITE ${PROJECT_BINARY_DIR}/kiln-jit.pc.in "${KILN_PC_PREFIX}" [=[
Name: kiln-jit
Description: kiln tracer and compiler: trace, optimize, JIT/AOT compile and save .kiln artifacts
Version: @PROJECT_VERSION@
Requires: kiln = @PROJECT_VERSION@
Cflags: -I${includedir}@KILN_PC_LLVM_INCLUDES@ @KILN_PC_LLVM_CFLAGS@
Libs: -L${libdir} -lkiln_jit -lkiln_trace -lkiln_codegen -lkiln_passes -lkiln_ir@KILN_PC_ONNX_LIBS@ -L@LLVM_LIBRARY_DIR@ -Wl,-rpath,@LLVM_LIBRARY_DIR@ -lMLIR -lLLVM
]=])
  list(APPEND KILN_PC_FILES kiln-jit)
endif()
foreach(pc ${KILN_PC_FILES})
  configure_file(${PROJECT_BINARY_DIR}/${pc}.pc.in ${PROJECT_BINARY_DIR}/${pc}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/${pc}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()
