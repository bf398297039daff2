#!/usr/bin/env bash
# Cross-builds kiln_runtime and kiln_aot_main for Linux arm64 into build/aarch64-runtime (or $1),
# for `kiln compile --target aarch64-linux-gnu`. Incremental and ccache'd: fast when up to date.
# Exits 77 (CTest's "skipped") when the cross compiler is not installed.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/aarch64-runtime}
if ! command -v aarch64-linux-gnu-g++ >/dev/null; then
  echo "build_runtime_aarch64: aarch64-linux-gnu-g++ not found (scripts/bootstrap.sh installs it)"
  exit 77
fi
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(pwd)}
if [ ! -f "$out/build.ninja" ]; then
  cmake -S . -B "$out" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_TOOLCHAIN_FILE="$(pwd)/cmake/toolchains/aarch64-linux-gnu.cmake" \
    -DKILN_RUNTIME_ONLY=ON -DKILN_WITH_MLIR=OFF -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_BENCH=OFF \
    -DKILN_CUDA=OFF >/dev/null
fi
ninja -C "$out" -j "${KILN_BUILD_JOBS:-2}" kiln_runtime kiln_aot_main
