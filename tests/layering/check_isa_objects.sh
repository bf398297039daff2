#!/usr/bin/env bash
# Fails when an object compiled for a wider ISA than the baseline (*_avx512.cpp) runs code at load
# time: a static constructor there executes before any CPUID check and dies with SIGILL on CPUs
# without that ISA (every binary linking the runtime did, on Zen 3). Such files may hold constant
# data and functions only.
set -euo pipefail
archive=$1
symbols=$(nm -A "$archive" 2>/dev/null)
grep -q '_avx512\.cpp\.o:' <<<"$symbols" || { echo "isa objects: no *_avx512 objects in $archive" >&2; exit 1; }
found=$(grep -E '_avx512\.cpp\.o:.* (_GLOBAL__sub_I|_GLOBAL__I_)' <<<"$symbols" || true)
if [[ -n $found ]]; then
  echo "isa objects: static initializers in files compiled for a wider ISA:" >&2
  echo "$found" >&2
  exit 1
fi
