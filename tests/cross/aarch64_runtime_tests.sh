#!/usr/bin/env bash
# CTest aarch64/runtime_tests: the runtime's GoogleTest suite cross-built for arm64 (GEMM NEON
# path, the AVX2-subset shim of simd_compat.h, scalar fallbacks) and run under qemu-aarch64.
# Exits 77 (skipped) without the cross compiler or qemu (scripts/bootstrap.sh installs both).
#   aarch64_runtime_tests.sh SOURCE_DIR RUNTIME_BUILD
set -euo pipefail
src=$1 build=$2
for tool in aarch64-linux-gnu-g++ qemu-aarch64; do
  if ! command -v "$tool" >/dev/null; then
    echo "aarch64_runtime_tests: $tool not installed; skipping"
    exit 77
  fi
done
bash "$src/scripts/build_runtime_aarch64.sh" "$build" --tests
qemu-aarch64 -L /usr/aarch64-linux-gnu "$build/tests/cross/kiln_runtime_tests"
