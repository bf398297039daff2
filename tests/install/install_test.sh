#!/usr/bin/env bash
# cmake --install, then use the installed runtime the two ways a user would: find_package(kiln)
# (the standalone examples/embed project) and pkg-config (the C API test compiled with cc).
set -euo pipefail
build=$1
src=$2
artifact=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cmake --install "$build" --prefix "$dir/prefix" >/dev/null
test -f "$dir/prefix/include/kiln/runtime/c_api.h"
test -f "$dir/prefix/lib/cmake/kiln/kilnConfig.cmake"
# Every installed header compiles on its own (a generated file it includes must be installed too).
for h in $(cd "$dir/prefix/include" && find kiln -name '*.h'); do
  echo "#include \"$h\"" | c++ -std=c++20 -fsyntax-only -I"$dir/prefix/include" -x c++ - ||
    { echo "installed header $h does not compile alone" >&2; exit 1; }
done
cmake -S "$src/examples/embed" -B "$dir/embed" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$dir/prefix" >/dev/null
cmake --build "$dir/embed" >/dev/null
"$dir/embed/example_embed" "$artifact" 2 10
export PKG_CONFIG_PATH="$dir/prefix/lib/pkgconfig"
cc -std=c99 $(pkg-config --cflags kiln) "$src/tests/runtime/c_api_test.c" -o "$dir/c_api_test" \
  $(pkg-config --libs kiln)
"$dir/c_api_test" "$artifact"
echo "install ok"
