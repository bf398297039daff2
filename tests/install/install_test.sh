#!/usr/bin/env bash
# cmake --install into a prefix that is then moved (the package must be relocatable), and use it
# the ways a user would:
#   find_package(kiln): examples/embed (kiln::runtime), examples/quickstart (kiln::kiln) and
#                       examples/custom_model (kiln::jit: load, train, trace, save, compile_aot)
#   pkg-config:         the C API test (kiln-runtime), quickstart (kiln), custom_model (kiln-jit)
# and every installed header compiles on its own.
set -euo pipefail
build=$1
src=$2
artifact=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cmake --install "$build" --prefix "$dir/staging" >/dev/null
mv "$dir/staging" "$dir/prefix"
prefix=$dir/prefix
for f in include/kiln/runtime/c_api.h include/kiln/kiln.h include/kiln/jit/aot.h \
         lib/cmake/kiln/kilnConfig.cmake lib/libkiln_runtime.a lib/libkiln_aot_main.a lib/libkiln.a \
         lib/libkiln_jit.a bin/kiln bin/kiln-opt; do
  test -f "$prefix/$f" || { echo "not installed: $f" >&2; exit 1; }
done
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"

# Every installed header compiles alone with its library's flags (a generated file it includes
# must be installed too; kiln/runtime headers need nothing but the prefix).
(cd "$prefix/include" && find kiln -name '*.h') | while read -r h; do
  case $h in
    kiln/runtime/*) pc=kiln-runtime ;;
    kiln/ir/* | kiln/passes/* | kiln/codegen/* | kiln/trace/* | kiln/jit/*) pc=kiln-jit ;;
    *) pc=kiln ;;
  esac
  echo "$pc $h"
done | xargs -P "$(nproc)" -n 2 sh -c \
  'echo "#include \"$1\"" | c++ -std=c++20 -fsyntax-only $(pkg-config --cflags "$0") -x c++ - ||
   { echo "installed header $1 does not compile alone" >&2; exit 255; }'

cmake_build() {  # example folder, build folder
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
  cmake --build "$2" >/dev/null
}
cmake_build "$src/examples/embed" "$dir/embed"
"$dir/embed/example_embed" "$artifact" 2 10
cmake_build "$src/examples/quickstart" "$dir/quickstart"
"$dir/quickstart/quickstart" | tail -1
cmake_build "$src/examples/custom_model" "$dir/custom_model"
python3 "$src/examples/custom_model/make_weights.py" "$dir/spotnet.safetensors"
"$dir/custom_model/custom_model" "$dir/spotnet.safetensors" "$dir/out-cmake"

cc -std=c99 $(pkg-config --cflags kiln-runtime) "$src/tests/runtime/c_api_test.c" \
  -o "$dir/c_api_test" $(pkg-config --libs kiln-runtime)
"$dir/c_api_test" "$artifact"
c++ $(pkg-config --cflags kiln) "$src/examples/quickstart/main.cpp" -o "$dir/quickstart_pc" \
  $(pkg-config --libs kiln)
echo "pkg-config kiln: $("$dir/quickstart_pc" | tail -1)"
c++ -std=c++20 -O1 $(pkg-config --cflags kiln-jit) \
  -DKILN_EXAMPLE_RUNTIME_DIR="\"$prefix/lib\"" "$src/examples/custom_model/main.cpp" \
  -o "$dir/custom_model_pc" $(pkg-config --libs kiln-jit)
"$dir/custom_model_pc" "$dir/spotnet.safetensors" "$dir/out-pc" | tail -1 | sed 's/^/pkg-config kiln-jit: /'
echo "install ok"
