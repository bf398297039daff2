#!/usr/bin/env bash
# The one device check of the CUDA backend, on the GPU machine. It builds nothing: it runs what
# scripts/gpu_prepare.sh built here and put in .gpu/ (the CUDA test binary, the benchmark binary
# and the one shared library they need that the GPU image lacks), then the PyTorch peer.
#   bash scripts/gpu_check.sh            # logs under $OUT (the device tool's folder) or /tmp
#   KILN_GPU_PEERS=0 bash scripts/gpu_check.sh   # without the PyTorch peer
#   KILN_GPU_BENCH=0 KILN_GPU_PEERS=0 ...          # the tests alone
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/kiln-gpu-check}
mkdir -p "$out"
{ grep PRETTY_NAME /etc/os-release; nvidia-smi --query-gpu=name,driver_version,memory.total \
    --format=csv,noheader; } 2>&1 | tee "$out/machine.txt"
# NVRTC, cuBLASLt and NCCL: the toolkit's, else the ones PyTorch's wheels carry.
libdirs=.gpu/lib
for lib in libnvrtc.so.13 libcublasLt.so.13 libnccl.so.2; do
  if ! ldconfig -p | grep -q "$lib" && [ ! -e "/usr/local/cuda/lib64/$lib" ] &&
    [ ! -e "/usr/local/cuda/lib/$lib" ]; then
    found=$(find / -name "$lib" -not -path "/proc/*" 2>/dev/null | head -1)
    [ -n "$found" ] && libdirs="$libdirs:$(dirname "$found")"
  fi
done
export LD_LIBRARY_PATH="$libdirs:${LD_LIBRARY_PATH:-}"
export KILN_CACHE_DIR="$out/cache"
.gpu/kiln_cuda_tests --gtest_brief=1 2>&1 | tee "$out/tests.txt" | tail -60
tests_rc=${PIPESTATUS[0]}
[ "${KILN_GPU_BENCH:-1}" = 1 ] && .gpu/bench_cuda --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
  --benchmark_out="$out/bench_cuda.json" 2>&1 | tee "$out/bench.txt" | grep -v "^\*\*\*"
[ "${KILN_GPU_PEERS:-1}" = 1 ] && PYTHONUNBUFFERED=1 timeout 240 python3 bench/peers/cuda_torch.py 2>&1 | tee "$out/torch.txt" |
  grep -E "RESULT|device|Error"
rm -rf "$out/cache"
echo "kiln_cuda_tests exit $tests_rc"
exit "$tests_rc"
