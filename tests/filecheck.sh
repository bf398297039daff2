#!/usr/bin/env bash
# Runs the `// RUN:` lines of one test file, lit-style: %s is the file, a trailing backslash
# continues a line, each command runs with pipefail. Tools (kiln-opt, FileCheck, not) come from
# PATH, which CTest sets to the build's bin/ and LLVM's bin/.
set -uo pipefail
file=$1
cmd=""
status=0
ran=0
while IFS= read -r line; do
  [[ $line =~ ^[[:space:]]*//[[:space:]]*RUN:[[:space:]]?(.*)$ ]] || continue
  part=${BASH_REMATCH[1]}
  if [[ $part == *\\ ]]; then
    cmd+="${part%\\} "
    continue
  fi
  cmd+=$part
  cmd=${cmd//%s/$file}
  echo "RUN: $cmd"
  if ! bash -o pipefail -c "$cmd"; then
    echo "FAILED: $cmd" >&2
    status=1
  fi
  ran=$((ran + 1))
  cmd=""
done <"$file"
if [[ $ran -eq 0 ]]; then
  echo "no RUN lines in $file" >&2
  exit 1
fi
exit $status
