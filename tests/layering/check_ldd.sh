#!/usr/bin/env bash
# Fails when the given binary needs an LLVM or MLIR shared library, or does not run.
set -euo pipefail
bin=$1
deps=$(ldd "$bin")
if grep -Ei 'libLLVM|libMLIR|libclang' <<<"$deps"; then
  echo "layering: $bin links LLVM/MLIR" >&2
  exit 1
fi
"$bin"
