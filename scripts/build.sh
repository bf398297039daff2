#!/usr/bin/env bash
# Bootstrap, configure and build one preset (default: release). Fast when already done.
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-release}
shift || true
bash scripts/bootstrap.sh
# ccache keys on relative paths below the checkout, so clones in other folders share its hits.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(pwd)}
if [ ! -f "build/$preset/build.ninja" ]; then
  cmake --preset "$preset" >/dev/null
fi
# Two cores here; MLIR-heavy files take ~1.2 GB each to compile, so two jobs fit in memory.
cmake --build --preset "$preset" -j "${KILN_BUILD_JOBS:-$(nproc)}" "$@"
