#!/usr/bin/env bash
# kiln's CPU process group and DistributedDataParallel beside PyTorch's DDP with Gloo, in one run:
# RANKS processes each (default 2), THREADS compute threads per process (default 1), on this
# machine over loopback TCP. kiln: build/release/bench/bench_distributed; PyTorch: PYTHON (default
# /tmp/torch2/bin/python) running bench/peers/ddp_torch.py. Rank 0 of each prints.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ranks=${RANKS:-2}
threads=${THREADS:-1}
python=${PYTHON:-/tmp/torch2/bin/python}
launch() {  # launch PORT COMMAND...: one process per rank, rank 0 in the foreground
  local port=$1 r
  shift
  for ((r = 1; r < ranks; r++)); do
    MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=$ranks RANK=$r KILN_NUM_THREADS=$threads \
      THREADS=$threads OMP_NUM_THREADS=$threads "$@" > /dev/null &
  done
  MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=$ranks RANK=0 KILN_NUM_THREADS=$threads \
    THREADS=$threads OMP_NUM_THREADS=$threads "$@"
  wait
}
echo "== kiln (bench_distributed), $ranks ranks x $threads threads"
launch $((20000 + RANDOM % 20000)) "$root/build/release/bench/bench_distributed" "$@"
if [ -x "$python" ]; then
  echo "== PyTorch $("$python" -c 'import torch; print(torch.__version__)') DDP (gloo)"
  launch $((20000 + RANDOM % 20000)) "$python" "$root/bench/peers/ddp_torch.py"
fi
