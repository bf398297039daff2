#!/usr/bin/env bash
# Side-by-side latency of kiln vs its peers on ResNet-18 / MobileNetV2, 224x224, batch 1 and 8,
# THREADS threads (issue #8 / #9). Installs nothing: checks that the peers are present (see
# bench/README.md "Peers") and that kiln is built, then runs every engine interleaved in one run
# (round-robin, the starting engine rotating each round) and prints the median latency per
# (model, batch, engine) and kiln/peer ratios. Report only ratios from one run.
#
#   bench/peers/run.sh                       # from the repository root, after building
#   ROUNDS=5 ITERS_B1=15 ITERS_B8=5 bench/peers/run.sh   # the defaults
#
# Engines: kiln-jit (freeze + inference pipeline + kiln::jit::compile: bench_codegen's
# BM_CompiledOptimizedSeries), kiln-art (.kiln artifact on kiln_runtime's executor: `kiln run
# --bench`), ort (onnxruntime-node, opt level 'all'), torchscript (trace + freeze +
# optimize_for_inference). Optional (ENGINES=...): torch-eager (slow with Debian's torch build:
# seconds per MobileNetV2 batch), kiln-eager (BM_EagerSeries), and two from PyPI in a virtual
# environment (`python3 -m venv /tmp/torch2 && /tmp/torch2/bin/pip install torch onnxruntime`,
# PY2=/tmp/torch2/bin/python): ort-py (onnxruntime's Python package, ort_bench.py: for machines
# without npm; spinning on, ORT's default) and torch-compile (PyTorch 2.x torch.compile, Inductor:
# the compiler to beat). Each engine's number per round is
# the median of ITERS timed runs, back to back after WARMUP untimed ones, in a fresh process; the
# table gives the median over rounds, and the ratios are taken within each round (same load), then
# the median.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build/release}
PYTHON=${PYTHON:-/usr/bin/python3}
PY2=${PY2:-/tmp/torch2/bin/python}  # PyTorch 2.x and onnxruntime from PyPI (ort-py, torch-compile)
ORT_NODE_MODULES=${ORT_NODE_MODULES:-/tmp/ortnode/node_modules}
WORK=${WORK:-/tmp/kiln-peers}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-5}
ITERS_B1=${ITERS_B1:-15}
ITERS_B8=${ITERS_B8:-5}
WARMUP=${WARMUP:-3}
MODELS=${MODELS:-"resnet18 mobilenet_v2"}
BATCHES=${BATCHES:-"1 8"}
ENGINES=${ENGINES:-"kiln-jit kiln-art ort torchscript"}
HERE=$ROOT/bench/peers
NICE=${NICE:-}  # e.g. NICE=-10 (root): run every engine ahead of the machine's other jobs
export THREADS KILN_NUM_THREADS=$THREADS OMP_NUM_THREADS=$THREADS
[[ -z $NICE ]] || renice -n "$NICE" -p $$ >/dev/null

missing=0
need() { echo "run.sh: missing $1 -- $2" >&2; missing=1; }
[[ -x $BUILD/bin/kiln ]] || need "$BUILD/bin/kiln" "ninja -C build/release kiln_cli"
[[ -x $BUILD/bench/bench_codegen ]] || need "$BUILD/bench/bench_codegen" "ninja -C build/release bench_codegen"
"$PYTHON" -c 'import torch, torchvision' 2>/dev/null ||
  need "PyTorch for $PYTHON" "apt-get install -y python3-torch python3-torchvision"
if [[ " $ENGINES " == *" ort "* ]]; then
  command -v node >/dev/null || need node "apt-get install -y nodejs npm"
  NODE_PATH=$ORT_NODE_MODULES node -e 'require("onnxruntime-node")' 2>/dev/null ||
    need "onnxruntime-node in $ORT_NODE_MODULES" \
      "mkdir -p /tmp/ortnode && cd /tmp/ortnode && npm init -y && npm install onnxruntime-node --onnxruntime-node-install=skip"
fi
if [[ " $ENGINES " == *" ort-py "* ]]; then
  "$PY2" -c 'import onnxruntime' 2>/dev/null ||
    need "onnxruntime for $PY2" "python3 -m venv /tmp/torch2 && /tmp/torch2/bin/pip install onnxruntime"
fi
if [[ " $ENGINES " == *" torch-compile "* ]]; then
  "$PY2" -c 'import torch, torchvision' 2>/dev/null ||
    need "PyTorch 2.x and torchvision for $PY2" "/tmp/torch2/bin/pip install torch torchvision"
fi
((missing == 0)) || exit 1

mkdir -p "$WORK"
RESULTS=$WORK/results.$(date -u +%H%M%S).txt
: >"$RESULTS"
echo "# $(date -u '+%F %T UTC')  $(uptime | sed 's/.*load/load/')  threads=$THREADS rounds=$ROUNDS iters b1=$ITERS_B1 b8=$ITERS_B8 nice=$(nice)"
versions="torch $("$PYTHON" -c 'import torch; print(torch.__version__)')"
[[ " $ENGINES " != *" ort "* ]] ||
  versions+="  onnxruntime-node $(NODE_PATH=$ORT_NODE_MODULES node -p 'require("onnxruntime-node/package.json").version')"
[[ " $ENGINES " != *" ort-py "* && " $ENGINES " != *" torch-compile "* ]] ||
  versions+="  $("$PY2" -c 'import torch, onnxruntime; print("torch", torch.__version__, " onnxruntime", onnxruntime.__version__)')"
echo "# kiln $(git -C "$ROOT" rev-parse --short HEAD)  $versions  $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')"

# Inputs each engine needs, made once (random weights everywhere; latency does not depend on them).
for m in $MODELS; do
  for b in $BATCHES; do
    [[ -s $WORK/${m}_b$b.onnx ]] ||
      "$PYTHON" "$HERE/torch_bench.py" export-onnx --model "$m" --batch "$b" -o "$WORK/${m}_b$b.onnx" >/dev/null 2>&1
    [[ -s $WORK/${m}_b$b.kiln ]] ||
      "$BUILD/bin/kiln" export "$m" --input-shape "$b,3,224,224" -o "$WORK/${m}_b$b.kiln" >/dev/null 2>&1
  done
done

run_engine() {  # engine model batch iters -> "RESULT engine model batch median min n" on stdout
  local e=$1 m=$2 b=$3 n=$4
  case $e in
    kiln-jit | kiln-eager)
      local bm=BM_CompiledOptimizedSeries
      [[ $e == kiln-eager ]] && bm=BM_EagerSeries
      # WARMUP untimed runs, then N timed ones back to back in one process (bench/codegen.cpp).
      KILN_BENCH_WARMUP=$WARMUP KILN_BENCH_ITERS=$n "$BUILD/bench/bench_codegen" \
        --benchmark_filter="^$bm/$m/$b/" --benchmark_format=json 2>/dev/null |
        "$PYTHON" -c '
import json, sys
e, m, b = sys.argv[1:4]
r = json.load(sys.stdin)["benchmarks"][0]
med, low, n = r["median_ms"], r["min_ms"], int(r["runs"])
print(f"RESULT {e} {m} {b} {med:.3f} {low:.3f} {n}")' "$e" "$m" "$b"
      ;;
    kiln-art)
      # `kiln run` makes one untimed first run, then WARMUP - 1 more (--warmup), before the N
      # timed ones: WARMUP untimed runs, as the other engines get.
      "$BUILD/bin/kiln" run "$WORK/${m}_b$b.kiln" --bench "$n" --warmup $((WARMUP > 0 ? WARMUP - 1 : 0)) 2>/dev/null |
        sed -n "s/^steady state over \([0-9]*\) runs: median \([0-9.]*\) ms.*min \([0-9.]*\) ms.*/RESULT $e $m $b \2 \3 \1/p"
      ;;
    ort)
      NODE_PATH=$ORT_NODE_MODULES node "$HERE/ort_bench.js" "$WORK/${m}_b$b.onnx" "$m" "$b" "$n" "$WARMUP"
      ;;
    ort-py)
      "$PY2" "$HERE/ort_bench.py" "$WORK/${m}_b$b.onnx" "$m" "$b" "$n" "$WARMUP"
      ;;
    torch-compile)
      "$PY2" "$HERE/torch_bench.py" time --model "$m" --batch "$b" --engine compile --iters "$n" \
        --warmup "$WARMUP" 2>/dev/null
      ;;
    torchscript | torch-eager)
      # libgomp's active spin-wait collapses when another job takes a core (0.8 s instead of 5 ms for
      # MobileNetV2 b1 on this shared machine); passive waiting is the fair setting for the peer.
      OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE} "$PYTHON" "$HERE/torch_bench.py" time --model "$m" --batch "$b" --engine "${e#torch-}" \
        --iters "$n" --warmup "$WARMUP" 2>/dev/null
      ;;
  esac
}

read -ra engines <<<"$ENGINES"
ne=${#engines[@]}
for ((r = 0; r < ROUNDS; ++r)); do
  for m in $MODELS; do
    for b in $BATCHES; do
      n=$ITERS_B1
      ((b == 1)) || n=$ITERS_B8
      for ((i = 0; i < ne; ++i)); do
        e=${engines[$(((i + r) % ne))]}
        line=$(run_engine "$e" "$m" "$b" "$n" | grep '^RESULT' || true)
        if [[ -z $line ]]; then
          echo "run.sh: $e $m b$b failed" >&2
          continue
        fi
        echo "$line $r" >>"$RESULTS"
        echo "  round $r: ${line#RESULT }" >&2
      done
    done
  done
done
echo "# end $(date -u '+%T UTC')  $(uptime | sed 's/.*load/load/')"

"$PYTHON" - "$RESULTS" "$ENGINES" <<'PY'
import statistics, sys
from collections import defaultdict
path, engines = sys.argv[1], sys.argv[2].split()
med, mins = defaultdict(list), defaultdict(list)
for line in open(path):
    _, e, m, b, md, mn, n, r = line.split()
    med[(m, int(b), e)].append(float(md)); mins[(m, int(b), e)].append(float(mn))
keys = sorted({(m, b) for m, b, _ in med}, key=lambda k: (k[0] != "resnet18", k[1]))
def val(m, b, e):
    v = med.get((m, b, e)); return statistics.median(v) if v else None
def fmt(x): return f"{x:9.1f}" if x is not None else f"{'-':>9}"
print("\nmedian latency, ms (median over rounds of each round's median; min over all runs in brackets)")
print(f"{'model':<13}{'batch':>5} " + "".join(f"{e:>20}" for e in engines))
for m, b in keys:
    cells = []
    for e in engines:
        v = val(m, b, e)
        cells.append(f"{'-':>20}" if v is None else f"{v:11.1f} [{min(mins[(m, b, e)]):6.1f}]")
    print(f"{m:<13}{b:>5} " + "".join(cells))
ratios = [(k, p) for k in ("kiln-jit", "kiln-art", "kiln-eager") if k in engines
          for p in ("ort", "ort-py", "torch-compile", "torchscript", "torch-eager") if p in engines]
# Per round, the engines of one (model, batch) ran back to back, so a round's ratio compares them
# under the same load; the table gives the median over rounds of those ratios, and the ratio of
# the best runs (min over all rounds), which the machine's other load disturbs least.
per_round = defaultdict(dict)
for line in open(path):
    _, e, m, b, md, mn, n, r = line.split()
    per_round[(m, int(b), int(r))][e] = float(md)
def round_ratio(m, b, k, p):
    v = [d[k] / d[p] for (mm, bb, r), d in per_round.items() if (mm, bb) == (m, b) and k in d and p in d]
    return statistics.median(v) if v else None
print("\nkiln / peer latency ratio (< 1: kiln faster): median over rounds of the round's median ratio [ratio of mins]")
print(f"{'model':<13}{'batch':>5} " + "".join(f"{k + '/' + p:>24}" for k, p in ratios))
for m, b in keys:
    cells = []
    for k, p in ratios:
        a = round_ratio(m, b, k, p)
        c = (min(mins[(m, b, k)]) / min(mins[(m, b, p)])) if mins.get((m, b, k)) and mins.get((m, b, p)) else None
        cells.append(f"{a:15.2f} [{c:5.2f}]" if a and c else f"{'-':>24}")
    print(f"{m:<13}{b:>5} " + "".join(cells))
PY
