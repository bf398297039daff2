# Fails when a file under runtime/ or frontend/ (outside frontend/trace and frontend/jit) includes an LLVM or MLIR
# header. Run with -DROOT=<source dir>.
file(GLOB_RECURSE files
  ${ROOT}/runtime/*.h ${ROOT}/runtime/*.cpp ${ROOT}/runtime/*.cc
  ${ROOT}/frontend/*.h ${ROOT}/frontend/*.cpp ${ROOT}/frontend/*.cc)
set(bad "")
foreach(f IN LISTS files)
  if(f MATCHES "/frontend/(trace|jit)/")
    continue()
  endif()
  file(STRINGS ${f} lines REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"](mlir|llvm|llvm-c|mlir-c)/")
  foreach(line IN LISTS lines)
    file(RELATIVE_PATH rel ${ROOT} ${f})
    list(APPEND bad "${rel}: ${line}")
  endforeach()
endforeach()
if(bad)
  list(JOIN bad "\n  " msg)
  message(FATAL_ERROR "layering: runtime/ and frontend/ must not include LLVM/MLIR headers "
                      "(DESIGN.md §2):\n  ${msg}")
endif()
