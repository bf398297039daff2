# DESIGN.md §2: kiln_runtime and kiln (eager) never depend on LLVM/MLIR. Checked three ways:
#  1. at configure time, over the targets' transitive link libraries and include directories;
#  2. at build time, over the sources' #include lines (cmake/check_includes.cmake);
#  3. by a test that runs ldd on a program linked with only kiln + kiln_runtime.

set(KILN_FORBIDDEN_LINK_PATTERN "^(MLIR|LLVM|kiln_mlir_deps|kiln_ir|kiln_passes|kiln_codegen|kiln_trace)$|MLIR|LLVM")

function(_kiln_collect_links target out_var)
  set(seen ${${out_var}})
  if(NOT TARGET ${target})
    list(APPEND seen ${target})
    set(${out_var} ${seen} PARENT_SCOPE)
    return()
  endif()
  get_target_property(libs ${target} INTERFACE_LINK_LIBRARIES)
  get_target_property(type ${target} TYPE)
  if(NOT type STREQUAL "INTERFACE_LIBRARY")
    get_target_property(own ${target} LINK_LIBRARIES)
    if(own)
      list(APPEND libs ${own})
    endif()
  endif()
  foreach(lib IN LISTS libs)
    if(lib AND NOT lib MATCHES "NOTFOUND" AND NOT lib MATCHES "^\\$<")
      list(FIND seen ${lib} idx)
      if(idx EQUAL -1)
        list(APPEND seen ${lib})
        _kiln_collect_links(${lib} seen)
      endif()
    endif()
  endforeach()
  set(${out_var} ${seen} PARENT_SCOPE)
endfunction()

function(kiln_check_layering)
  foreach(target kiln_runtime kiln)
    set(deps "")
    _kiln_collect_links(${target} deps)
    foreach(dep IN LISTS deps)
      if(dep MATCHES "${KILN_FORBIDDEN_LINK_PATTERN}")
        message(FATAL_ERROR "layering: ${target} links ${dep}; runtime/ and frontend/ must not "
                            "depend on LLVM/MLIR (DESIGN.md §2)")
      endif()
    endforeach()
    get_target_property(incs ${target} INCLUDE_DIRECTORIES)
    foreach(inc IN LISTS incs)
      if(inc MATCHES "llvm|mlir")
        message(FATAL_ERROR "layering: ${target} includes ${inc}")
      endif()
    endforeach()
  endforeach()

  add_custom_target(kiln_layering_check ALL
    COMMAND ${CMAKE_COMMAND} -DROOT=${PROJECT_SOURCE_DIR} -P ${PROJECT_SOURCE_DIR}/cmake/check_includes.cmake
    COMMENT "Checking that runtime/ and frontend/ include no LLVM/MLIR header"
    VERBATIM)
endfunction()
