#!/usr/bin/env bash
# examples/distributed as separate processes: 2 and 3 ranks started torchrun-style (environment
# variables), 2 ranks through Open MPI's mpirun where it is installed, and 1 process on the whole
# batch. Every rank of a run must print the same checksum, and each run the 1-process checksum up
# to rounding.
set -euo pipefail
bin=$1
args=(--steps 12 --batch 48 --hidden 96 --bucket-mb 0.02 --timeout 60)
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT

checksum() { sed -n 's/.*parameter checksum \([^ ]*\)$/\1/p' "$1"; }

# Ranks as background processes on a random port; when one fails the others are stopped (they
# would wait for it), and a port clash ("cannot listen") is retried on another port.
run_env() {
  local world=$1 attempt port r ok pids
  for attempt in 1 2 3; do
    port=$((20000 + RANDOM % 30000))
    ok=1
    pids=()
    for ((r = 0; r < world; r++)); do
      MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=$world RANK=$r \
        "$bin" "${args[@]}" > "$tmp/env$world.$r" 2>&1 &
      pids+=($!)
    done
    for ((r = 0; r < world; r++)); do
      if ! wait -n; then
        ok=0
        kill "${pids[@]}" 2> /dev/null || true
        break
      fi
    done
    wait 2> /dev/null || true
    if [ $ok = 1 ]; then return 0; fi
    if ! grep -q "cannot listen" "$tmp/env$world".*; then cat "$tmp/env$world".*; return 1; fi
  done
  return 1
}

run_env 1
reference=$(checksum "$tmp/env1.0")
echo "1 process: $reference"
compare() {
  local name=$1; shift
  local first
  first=$(checksum "$1")
  for f in "$@"; do
    local c
    c=$(checksum "$f")
    if [ "$c" != "$first" ]; then
      echo "FAIL $name: ranks differ: $first vs $c"; cat "$@"; exit 1
    fi
  done
  awk -v a="$first" -v b="$reference" -v n="$name" 'BEGIN {
    d = (a - b) / b; if (d < 0) d = -d;
    printf "%s: %s (relative difference %.2g)\n", n, a, d;
    exit (d < 1e-5 ? 0 : 1) }' || { echo "FAIL $name: far from the 1-process run"; exit 1; }
}
run_env 2
compare "2 ranks (environment)" "$tmp"/env2.*
run_env 3
compare "3 ranks (environment)" "$tmp"/env3.*

if command -v mpirun > /dev/null; then
  port=$((20000 + RANDOM % 30000))
  mpirun --allow-run-as-root --oversubscribe -np 2 -x MASTER_PORT=$port \
    --output-filename "$tmp/mpi" "$bin" "${args[@]}" > /dev/null 2>&1 ||
    { cat "$tmp"/mpi/1/rank.*/std* 2>/dev/null; echo "FAIL mpirun"; exit 1; }
  compare "2 ranks (mpirun)" "$tmp"/mpi/1/rank.*/stdout
else
  echo "mpirun not installed: the Open MPI launch is not checked"
fi
echo "PASS"
