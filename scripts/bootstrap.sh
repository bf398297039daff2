#!/usr/bin/env bash
# Installs kiln's build dependencies from Debian's repositories; skips what is already present, so
# a second run costs a few dpkg queries. CUDA (/usr/local/cuda) is optional and never installed.
set -euo pipefail

packages=(
  llvm-19-dev libmlir-19-dev mlir-19-tools llvm-19-tools libzstd-dev libflatbuffers-dev
  flatbuffers-compiler zlib1g-dev ccache lld ninja-build cmake g++ libgtest-dev libbenchmark-dev
  dataset-fashion-mnist
  # arm64 cross builds of the runtime and running them (kiln compile --target aarch64-linux-gnu)
  g++-aarch64-linux-gnu qemu-user
  # the Python module (python/) and its tests: pybind11, Debian's python3 with NumPy
  pybind11-dev python3-dev python3-numpy
  # ONNX import (frontend/onnx): protobuf and onnx.proto; its tests export models with PyTorch
  libprotobuf-dev protobuf-compiler libonnx-dev python3-onnx python3-torch
  # examples/distributed's test launches its ranks with Open MPI's mpirun too
  openmpi-bin
  # the loader fuzzer (scripts/sanitize.sh fuzz): libFuzzer comes with clang's runtime
  clang libclang-rt-14-dev
  # the ONNX importer fuzzer (scripts/sanitize.sh fuzz-onnx): kiln's eager headers need clang 15+
  clang-19 libclang-rt-19-dev
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "bootstrap: all ${#packages[@]} packages present"
  exit 0
fi

echo "bootstrap: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
