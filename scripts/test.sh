#!/usr/bin/env bash
# The README's test command: bootstrap, configure, build, run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-release}
bash scripts/build.sh "$preset"
ctest --preset "$preset" -j "$(nproc)"
