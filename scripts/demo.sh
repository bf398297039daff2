#!/usr/bin/env bash
# The README's main job: build, then `kiln demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh release >/dev/null
exec build/release/bin/kiln demo "$@"
