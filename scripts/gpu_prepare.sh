#!/usr/bin/env bash
# Builds (release preset) and gathers what scripts/gpu_check.sh runs on the GPU machine into .gpu/
# (git-ignored): kiln_cuda_tests, bench_cuda and Google Benchmark's shared library. The binaries
# link no LLVM and carry libstdc++ statically; CUDA itself is loaded there with dlopen.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh release --target kiln_cuda_tests bench_cuda
rm -rf .gpu && mkdir -p .gpu/lib
cp build/release/tests/kiln_cuda_tests build/release/bench/bench_cuda .gpu/
strip .gpu/kiln_cuda_tests .gpu/bench_cuda
lib=$(ldd .gpu/bench_cuda | awk '/libbenchmark/ {print $3}')
[ -n "$lib" ] && cp -L "$lib" .gpu/lib/
du -sh .gpu
