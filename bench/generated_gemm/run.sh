#!/usr/bin/env bash
# run.sh NAME: runs build.sh's NAME under mlir-cpu-runner (one thread); prints the largest
# |error| over all of C against a naive scalar reference, C[M-1][N-1], GFLOP/s and seconds.
set -euo pipefail
out=${OUT:-/tmp/kiln-generated-gemm}
bin=${LLVM_BIN:-/usr/lib/llvm-19/bin}
lib=${LLVM_LIB:-/usr/lib/llvm-19/lib}
"$bin/mlir-cpu-runner" -O3 -e main -entry-point-result=void --march=x86_64 \
  --mattr="${MATTR:-+avx512f,+avx512vl,+avx512bw,+avx512dq,+fma,+avx2}" \
  --shared-libs="$lib/libmlir_c_runner_utils.so,$lib/libmlir_runner_utils.so" "$out/$1.llvm.mlir"
