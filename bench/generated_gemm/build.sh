#!/usr/bin/env bash
# build.sh NAME M N K MR NR {mmt4d|matmul}: gen.py's module lowered by upstream MLIR 19 alone
# (the transform script tiles to one MR x NR register tile, keeps K as the inner loop,
# vectorizes, forms vector.contract, hoists the accumulator, lowers to vector.fma) into
# $OUT/NAME.{mlir,vec.mlir,llvm.mlir} and the kernel's assembly $OUT/NAME.s (for inspection).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/kiln-generated-gemm}
bin=${LLVM_BIN:-/usr/lib/llvm-19/bin}
attrs=${MATTR:-+avx512f,+avx512vl,+avx512bw,+avx512dq,+fma,+avx2}
mkdir -p "$out"
n=$1
shift
python3 "$here/gen.py" "$@" >"$out/$n.mlir"
# (--test-vector-transfer-collapse-inner-most-dims: the packed operands' trailing unit dim would
# otherwise make each load of A or B a loop of scalar loads.)
"$bin/mlir-opt" "$out/$n.mlir" --transform-interpreter --test-transform-dialect-erase-schedule \
  -cse -canonicalize --test-vector-transfer-collapse-inner-most-dims -cse -canonicalize \
  -o "$out/$n.vec.mlir"
# (full-unroll: VectorToSCF's default puts an alloca per C transfer inside the tile loops.)
"$bin/mlir-opt" "$out/$n.vec.mlir" --convert-linalg-to-loops --convert-vector-to-scf=full-unroll=true \
  --lower-affine --convert-scf-to-cf --expand-strided-metadata --finalize-memref-to-llvm \
  --convert-vector-to-llvm --finalize-memref-to-llvm --convert-math-to-llvm --convert-arith-to-llvm \
  --convert-func-to-llvm --convert-cf-to-llvm --reconcile-unrealized-casts -o "$out/$n.llvm.mlir"
"$bin/mlir-translate" --mlir-to-llvmir "$out/$n.llvm.mlir" | "$bin/opt" -O3 -mattr="$attrs" -S |
  "$bin/llc" -O3 -mattr="$attrs" -o "$out/$n.s"
