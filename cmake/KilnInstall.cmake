# `cmake --install`: kiln_runtime (library + headers) with a CMake package (find_package(kiln),
# target kiln::kiln_runtime) and a pkg-config file (kiln.pc). A service or phone app that only
# runs artifacts needs nothing else (DESIGN.md §2).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS kiln_runtime kiln_flags EXPORT kilnTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/runtime/include/kiln/runtime
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kiln)
# Generated from the op schema: abi.h and kernels/elementwise.h include them.
install(FILES ${PROJECT_BINARY_DIR}/runtime/include/kiln/runtime/abi_ops.inc
              ${PROJECT_BINARY_DIR}/runtime/include/kiln/runtime/unary_ops.inc
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kiln/runtime)
install(FILES ${PROJECT_SOURCE_DIR}/runtime/schema/kiln.fbs
        DESTINATION ${CMAKE_INSTALL_DATADIR}/kiln)
install(EXPORT kilnTargets NAMESPACE kiln:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)

file(WRITE ${PROJECT_BINARY_DIR}/kilnConfig.cmake.in [=[
@PACKAGE_INIT@
include(CMakeFindDependencyMacro)
find_dependency(Threads)
include("${CMAKE_CURRENT_LIST_DIR}/kilnTargets.cmake")
check_required_components(kiln)
]=])
configure_package_config_file(${PROJECT_BINARY_DIR}/kilnConfig.cmake.in
  ${PROJECT_BINARY_DIR}/kilnConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kilnConfig.cmake ${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)

# pkg-config: the library is static C++, so C users also need the C++ runtime.
file(WRITE ${PROJECT_BINARY_DIR}/kiln.pc.in [=[
prefix=${pcfiledir}/../..
libdir=${prefix}/@CMAKE_INSTALL_LIBDIR@
includedir=${prefix}/@CMAKE_INSTALL_INCLUDEDIR@

Name: kiln
Description: kiln runtime: load and run .kiln artifacts (C and C++ APIs)
Version: @PROJECT_VERSION@
Cflags: -I${includedir}
Libs: -L${libdir} -lkiln_runtime -lstdc++ -lm -lpthread -ldl
]=])
configure_file(${PROJECT_BINARY_DIR}/kiln.pc.in ${PROJECT_BINARY_DIR}/kiln.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/kiln.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
