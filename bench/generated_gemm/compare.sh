#!/usr/bin/env bash
# compare.sh: every register tile of the generated kernel and kiln's runtime GEMM on the same
# shapes, one thread, ROUNDS interleaved rounds (this host is noisy: compare within a round).
# BENCH_GEMM: kiln's bench_gemm (default build/release/bench/bench_gemm from the repository root).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bench=${BENCH_GEMM:-build/release/bench/bench_gemm}
shapes=("s1 128 1024 256" "s2 256 256 256" "s3 1024 1024 1024")
tiles=("mmt4d 8 32" "mmt4d 6 32" "mmt4d 16 16" "mmt4d 12 32" "mmt4d 14 32" "matmul 8 32")
declare -A rows=(
  [s1]='^BM_SgemmPackedB/M:128/N:1024/K:256/'
  [s2]='^BM_Sgemm/M:256/N:256/K:256/tb:0'
  [s3]='^BM_(Sgemm|OpenBlasSgemm)/M:1024/N:1024/K:1024/tb:0'
)
for s in "${shapes[@]}"; do
  for t in "${tiles[@]}"; do
    set -- $s $t
    "$here/build.sh" "${1}_${5}_${6}x${7}" "$2" "$3" "$4" "$6" "$7" "$5"
  done
done
for r in $(seq 1 "${ROUNDS:-3}"); do
  for s in "${shapes[@]}"; do
    set -- $s
    for t in "${tiles[@]}"; do
      set -- $s $t
      n=${1}_${5}_${6}x${7}
      echo "round=$r generated $n (maxerr, C[M-1][N-1], GFLOP/s, s): $("$here/run.sh" "$n" | tr '\n' ' ')"
    done
    KILN_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$bench" --benchmark_filter="${rows[$1]}" \
      --benchmark_min_time=1.0 2>/dev/null | grep '^BM_' | sed "s/^/round=$r kiln $1 /"
  done
done
