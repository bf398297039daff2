#!/usr/bin/env bash
# Cross-builds kiln_runtime and kiln_aot_main for Linux arm64 into build/aarch64-runtime (or $1),
# for `kiln compile --target aarch64-linux-gnu`; with --tests also the runtime's GoogleTest suite
# (run it with qemu-aarch64 -L /usr/aarch64-linux-gnu DIR/tests/cross/kiln_runtime_tests).
# Incremental and ccache'd: fast when up to date. Exits 77 (CTest's "skipped") when the cross
# compiler is not installed.
#   build_runtime_aarch64.sh [DIR] [--tests]
set -euo pipefail
cd "$(dirname "$0")/.."
out=build/aarch64-runtime
targets=(kiln_runtime kiln_aot_main)
for arg in "$@"; do
  case "$arg" in
    --tests) targets+=(kiln_runtime_tests) ;;
    *) out=$arg ;;
  esac
done
if ! command -v aarch64-linux-gnu-g++ >/dev/null; then
  echo "build_runtime_aarch64: aarch64-linux-gnu-g++ not found (scripts/bootstrap.sh installs it)"
  exit 77
fi
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(pwd)}
# Configured every time (about a second when nothing changed) so the options below always hold.
cmake -S . -B "$out" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE="$(pwd)/cmake/toolchains/aarch64-linux-gnu.cmake" \
  -DKILN_RUNTIME_ONLY=ON -DKILN_WITH_MLIR=OFF -DKILN_BUILD_TESTS=ON -DKILN_BUILD_BENCH=OFF \
  -DKILN_CUDA=OFF >/dev/null
ninja -C "$out" -j "${KILN_BUILD_JOBS:-2}" "${targets[@]}"
