#!/usr/bin/env bash
# CTest aarch64/qemu_model: cross-builds kiln_runtime + kiln_aot_main for arm64 (cached in
# RUNTIME_BUILD, incremental and ccache'd), then runs the AOT tests that compile models for
# aarch64-linux-gnu and run them under qemu-aarch64 against the host. Exits 77 (skipped) when the
# cross compiler or qemu is not installed (scripts/bootstrap.sh installs both).
#   aarch64_qemu.sh SOURCE_DIR RUNTIME_BUILD CODEGEN_TESTS [JIT_TESTS]
set -euo pipefail
src=$1 build=$2 tests=$3 jit_tests=${4:-}
for tool in aarch64-linux-gnu-g++ qemu-aarch64; do
  if ! command -v "$tool" >/dev/null; then
    echo "aarch64_qemu: $tool not installed; skipping"
    exit 77
  fi
done
bash "$src/scripts/build_runtime_aarch64.sh" "$build"
export KILN_AARCH64_RUNTIME_DIR="$build/runtime"
# A hand-written LLVM IR model, then a traced LeNet through the whole compiler.
"$tests" --gtest_also_run_disabled_tests --gtest_filter='AotAarch64.*'
if [ -n "$jit_tests" ]; then
  "$jit_tests" --gtest_also_run_disabled_tests --gtest_filter='JitAotAarch64.*'
fi
